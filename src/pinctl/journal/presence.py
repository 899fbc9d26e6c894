"""Whether a cri-proxy serves this node: what the watcher needs to say "not through the CRI".

cri-proxy writes ``cri-proxy.json`` in the journal's directory when it starts serving and
removes it when it stops. A deletion with no RemoveImage in the journal means "outside the CRI"
only while a proxy was serving; a file left by a killed proxy names a process that is gone, and
counts as no proxy. The mark names the process by its pid and its start time, so a pid reused
by another program after a kill does not count either.

The proxy often runs on the host (a systemd unit) while the watcher runs in a pod with its own
PID namespace, where the proxy's pid names nothing. So the mark also says which PID namespace
it was written in, and the proxy touches it every HEARTBEAT_S: a reader in another namespace
counts the proxy serving while the mark is younger than STALE_S.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Optional

from pinctl.backends import procfs
from pinctl.journal import parse_stamp, stamp

PRESENCE = "cri-proxy.json"
HEARTBEAT_S = 10.0
# Three missed heartbeats: a proxy stopped by SIGKILL counts as gone within this, seen from another namespace.
STALE_S = 3 * HEARTBEAT_S


@dataclass(frozen=True)
class ProxyPresence:
    pid: int
    started: float
    listen: str
    upstream: str
    start_ticks: Optional[int] = None  # procfs.start_ticks of pid when it marked itself
    pid_namespace: str = ""  # its /proc/self/ns/pid link ("pid:[4026531836]"); "" unknown
    age: float = 0.0  # seconds since the mark was written or touched


def mark_serving(directory: str, listen: str, upstream: str, pid: Optional[int] = None) -> None:
    """Say that this process serves the CRI on listen; written whole or not at all (rename)."""
    os.makedirs(directory, mode=0o750, exist_ok=True)
    pid = pid or os.getpid()
    data = {"pid": pid, "started": stamp(time.time()), "listen": listen, "upstream": upstream,
            "start_ticks": procfs.start_ticks(pid), "pid_namespace": _pid_namespace()}
    temporary = os.path.join(directory, f".{PRESENCE}.{os.getpid()}")
    with open(temporary, "w") as stream:
        json.dump(data, stream)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(temporary, os.path.join(directory, PRESENCE))


def clear(directory: str, pid: Optional[int] = None) -> None:
    """Remove the mark, if it is this process's (a newer proxy's mark stays)."""
    found = serving(directory, alive_only=False)
    if found is not None and found.pid == (pid or os.getpid()):
        try:
            os.unlink(os.path.join(directory, PRESENCE))
        except FileNotFoundError:
            pass


def serving(directory: str, alive_only: bool = True) -> Optional[ProxyPresence]:
    """The proxy that marked itself serving, if its process is alive; None otherwise (no mark, a
    mark that does not parse, or a process that is gone)."""
    try:
        with open(os.path.join(directory, PRESENCE)) as stream:
            data = json.load(stream)
            age = max(0.0, time.time() - os.fstat(stream.fileno()).st_mtime)
        ticks = data.get("start_ticks")
        found = ProxyPresence(int(data["pid"]), parse_stamp(data["started"]), str(data["listen"]),
                              str(data["upstream"]), int(ticks) if ticks is not None else None,
                              str(data.get("pid_namespace") or ""), age)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if alive_only and not _alive(found):
        return None
    return found


def touch(directory: str) -> None:
    """The heartbeat: the mark is fresh again (OSError when it cannot be touched)."""
    os.utime(os.path.join(directory, PRESENCE))


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _alive(found: ProxyPresence) -> bool:
    if found.pid_namespace and found.pid_namespace != _pid_namespace():
        return found.age < STALE_S  # its pid names nothing here: the heartbeat tells
    if found.pid <= 0:
        return False
    ticks = procfs.start_ticks(found.pid)
    return ticks is not None and (found.start_ticks is None or ticks == found.start_ticks)

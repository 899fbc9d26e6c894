"""Whether a cri-proxy serves this node: what the watcher needs to say "not through the CRI".

cri-proxy writes ``cri-proxy.json`` in the journal's directory when it starts serving and
removes it when it stops. A deletion with no RemoveImage in the journal means "outside the CRI"
only while a proxy was serving; a file left by a killed proxy names a process that is gone, and
counts as no proxy.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Optional

from pinctl.journal import parse_stamp, stamp

PRESENCE = "cri-proxy.json"


@dataclass(frozen=True)
class ProxyPresence:
    pid: int
    started: float
    listen: str
    upstream: str


def mark_serving(directory: str, listen: str, upstream: str, pid: Optional[int] = None) -> None:
    """Say that this process serves the CRI on listen; written whole or not at all (rename)."""
    os.makedirs(directory, mode=0o750, exist_ok=True)
    data = {"pid": pid or os.getpid(), "started": stamp(time.time()), "listen": listen, "upstream": upstream}
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
        found = ProxyPresence(int(data["pid"]), parse_stamp(data["started"]), str(data["listen"]),
                              str(data["upstream"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if alive_only and not _alive(found.pid):
        return None
    return found


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

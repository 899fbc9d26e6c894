"""What /proc tells of this node's processes: command lines, start times, the executables they
run, and which process serves a unix socket, following pinctl cri-proxy (or its relay) to the
socket it forwards to. Reads only, but for signal_exactly, which signals one process and no other
that took its pid; a process that goes away meanwhile is simply not found."""

from __future__ import annotations

import errno
import os
import signal
import socket
import struct
import time
from datetime import datetime, timezone
from typing import Iterator, Optional, Sequence

PROC = "/proc"
# What forwards a socket to another: pinctl cri-proxy (-r / --runtime-endpoint) and its relay (--upstream).
FORWARD_FLAGS = ("--upstream", "--runtime-endpoint", "-r")
MAX_HOPS = 4
# A listener that does not accept within this is taken as not there.
PROBE_TIMEOUT_S = 1.0
NO_PTRACE = "no ptrace access to it: run as root with CAP_SYS_PTRACE"


def parse_flags(argv: Sequence[str]) -> dict[str, str]:
    """--name=value and --name value, as Go's flag packages read them; a repeated flag keeps
    every value, comma-joined (pflag's string slices take both forms)."""
    flags: dict[str, str] = {}
    index = 1
    while index < len(argv):
        arg = argv[index]
        index += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            continue
        name, eq, value = arg.partition("=")
        if not eq:
            if index < len(argv) and not argv[index].startswith("-"):
                value = argv[index]
                index += 1
            else:
                value = "true"
        flags[name] = f"{flags[name]},{value}" if name in flags and value else value
    return flags


def socket_path(endpoint: str) -> str:
    """unix:///run/x.sock or /run/x.sock -> /run/x.sock"""
    return endpoint[len("unix://"):] if endpoint.startswith("unix://") else endpoint


def pids() -> list[int]:
    try:
        return sorted(int(name) for name in os.listdir(PROC) if name.isdigit())
    except OSError:
        return []


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as found:
            raw = found.read()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def program(pid: int) -> str:
    """The name a process runs under (its argv[0]'s last part); '' when it is gone."""
    argv = cmdline(pid)
    return os.path.basename(argv[0]) if argv else ""


def started_at(pid: int) -> Optional[datetime]:
    """When the process started, from its stat line (clock ticks since boot) and the uptime.

    Not /proc/stat's btime: it is whole seconds, truncated, so a start time from it can be up to
    a second early, and the GC estimate compares it with image records made moments before.
    """
    try:
        with open(f"{PROC}/uptime", encoding="ascii") as handle:
            uptime = float(handle.read().split()[0])
        now = time.time()
        with open(f"{PROC}/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            stat = handle.read()
    except (OSError, IndexError, ValueError):
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return datetime.fromtimestamp(now - uptime + int(fields[19]) / os.sysconf("SC_CLK_TCK"), timezone.utc)


def start_ticks(pid: int) -> Optional[int]:
    """When the process started, in clock ticks since boot (its stat line's 22nd field): with the
    pid, it names one process, as a pid alone does not once the pid is reused. None when it is gone."""
    try:
        with open(f"{PROC}/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            stat = handle.read()
        # Fields from the 3rd on follow the name, which may hold spaces and ')'.
        return int(stat[stat.rfind(")") + 2:].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def read_exe(pid: int) -> tuple[Optional[str], Optional[str]]:
    """The executable a process runs (/proc/PID/exe's target, with " (deleted)" after it when the
    file was since removed or replaced) and None; or None and why it cannot be told: NO_PTRACE
    (reading it takes ptrace access: another user's process, or one with capabilities this one
    lacks), "it is gone", "it runs no executable (a kernel thread, or a process exiting)", or
    "its executable cannot be read: <the error>"."""
    try:
        return os.readlink(f"{PROC}/{pid}/exe"), None
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EPERM):
            return None, NO_PTRACE
        if error.errno in (errno.ENOENT, errno.ESRCH):
            if os.path.exists(f"{PROC}/{pid}/stat"):
                return None, "it runs no executable (a kernel thread, or a process exiting)"
            return None, "it is gone"
        return None, f"its executable cannot be read: {error.strerror or error}"


def signal_exactly(pid: int, ticks: int, signum: int) -> None:
    """Send signum to pid only while it is the process that started at ticks (start_ticks): a
    process that ended and left its pid to another is not signalled. Check what it runs (goexe,
    through /proc/PID/exe) between two start_ticks readings that agree, then pass the first here.

    A pidfd is opened first and the start time read after, so the process checked is the one the
    pidfd names and the one signalled. Where pidfds are missing (a kernel before 5.3, or a seccomp
    filter refusing pidfd_open), the start time is checked just before os.kill: a pid reused in
    between cannot be ruled out there. Raises ProcessLookupError when the process is gone or its
    start time differs (the pid was reused); PermissionError when it may not be signalled."""
    if pid <= 0:  # os.kill would signal a process group, or every process
        raise ProcessLookupError(errno.ESRCH, f"no process {pid}")
    try:
        pidfd = os.pidfd_open(pid)
    except AttributeError:
        pidfd = -1
    except OSError as error:
        # pidfd_open fails with EPERM only from a seccomp filter; ESRCH (gone) is raised as it is.
        if error.errno not in (errno.ENOSYS, errno.EPERM):
            raise
        pidfd = -1
    try:
        if start_ticks(pid) != ticks:
            raise ProcessLookupError(errno.ESRCH, f"process {pid} is not the one that started at tick {ticks}")
        if pidfd >= 0:
            signal.pidfd_send_signal(pidfd, signum)
        else:
            os.kill(pid, signum)
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def as_seen_by(pid: int, path: str) -> str:
    """A path as the process sees it, reached from here: through its root when that differs, and
    through /proc/PID/root when it runs in a mount namespace of its own (a unit's private mounts,
    a node's namespace) and the name is another file there (CRI-O's /etc/crio, a runtime's image
    store need not be what this process sees; a name that is the same file on both sides keeps
    its plain form). Neither can be told without ptrace access to it (pinctl's DaemonSet drops
    every capability): then the path as it is, which the DaemonSet mounts at the same place."""
    try:
        root = os.readlink(f"{PROC}/{pid}/root")
        theirs = os.stat(f"{PROC}/{pid}/ns/mnt").st_ino
        ours = os.stat(f"{PROC}/self/ns/mnt").st_ino
    except OSError:
        return path
    if theirs != ours:
        through = f"{PROC}/{pid}/root/{path.lstrip('/')}"
        return path if _same_file(path, through) else through
    return path if root == "/" else os.path.join(root, path.lstrip("/"))


def as_served(endpoint: str, path: str) -> str:
    """A path of the runtime serving endpoint (its image store, say), reached from here."""
    pid = serving(socket_path(endpoint))
    return path if pid is None else as_seen_by(pid, path)


def _same_file(one: str, other: str) -> bool:
    try:
        first, second = os.stat(one), os.stat(other)
    except OSError:
        return False
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def stat_name(pid: int) -> str:
    """The kernel's name of a process (comm, 15 characters at most)."""
    try:
        with open(f"{PROC}/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return ""
    return stat[stat.find("(") + 1: stat.rfind(")")]


def serving(path: str) -> Optional[int]:
    """The process that answers on the unix socket at path: its listener, or, when that is a
    forwarder (pinctl cri-proxy, its relay), the process behind the socket it forwards to."""
    for _hop in range(MAX_HOPS):
        pid = socket_owner(path)
        if pid is None:
            return None
        upstream = next((value for name, value in parse_flags(cmdline(pid)).items() if name in FORWARD_FLAGS), None)
        if not upstream or socket_path(upstream) == path or socket_owner(socket_path(upstream)) is None:
            return pid
        path = socket_path(upstream)
    return None


def socket_owner(path: str) -> Optional[int]:
    """The process listening on the unix socket at path: the peer's credentials of a connection
    to it (SO_PEERCRED). A listener bound under one name and renamed into place (as cri-dockerd
    does) is still found, which /proc/net/unix, listing the bound name, would miss."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT_S)
    try:
        probe.connect(path)
        creds = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return _owner_by_inode(path)
    finally:
        probe.close()
    pid = struct.unpack("3i", creds)[0]
    return pid if pid > 0 else None


def _owner_by_inode(path: str) -> Optional[int]:
    inodes = set(_listening_inodes(os.path.abspath(path)))
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid in pids():
        try:
            fds = os.listdir(f"{PROC}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{PROC}/{pid}/fd/{fd}") in wanted:
                    return pid
            except OSError:
                continue
    return None


def _listening_inodes(path: str) -> Iterator[str]:
    try:
        with open(f"{PROC}/net/unix", encoding="utf-8", errors="replace") as table:
            next(table, None)
            for line in table:
                parts = line.split()
                # Num RefCount Protocol Flags Type St Inode Path; St 01 is listening.
                if len(parts) >= 8 and parts[7] == path and parts[5] == "01":
                    yield parts[6]
    except OSError:
        return


def environ(pid: int) -> dict[str, str]:
    """A process's environment as it started ({} when it cannot be read: no ptrace access, gone)."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as found:
            raw = found.read()
    except OSError:
        return {}
    pairs = (part.decode("utf-8", "replace").partition("=") for part in raw.split(b"\0") if part)
    return {name: value for name, eq, value in pairs if eq}

"""The crio process behind a CRI socket: found from the socket, confirmed by its executable, told
to reload with a signal that cannot reach another process, and heard through its own log.

CRI-O re-reads its pins only on SIGHUP (server/server.go, startReloadWatcher), so pinctl signals
it after every write. A SIGHUP kills most other programs, so the process must be CRI-O beyond
doubt: the one listening on the socket (SO_PEERCRED, through a cri-proxy too), whose executable
was built from CRI-O's main package (its Go build information, which argv[0] cannot fake), whose
CRI answers as cri-o, and which is still the process that started when it was checked (a pidfd
opened after the start time is compared). When any of that cannot be told, nothing is signalled
and the reason says why.

CRI-O logs each reload's outcome ("Configuration reload completed", or "Unable to reload
configuration: REASON" at error level): to the file its --log flag (or CONTAINER_LOG) names, else
to its stderr, which is a file under some supervisors and journald under systemd. pinctl reads
what was appended after its signal, so a refused reload is said with CRI-O's own reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from typing import Optional

from pinctl.backends import goexe, procfs
from pinctl.config.crio import CRIO_DEFAULT_DIR, CRIO_DEFAULT_PATH
from pinctl.errors import EngineError

# The main package CRI-O's crio binary is built from, as its Go build information records it.
CRIO_MAIN_PACKAGE = "github.com/cri-o/cri-o/cmd/crio"
RELOADED = "Configuration reload completed"
RELOAD_REFUSED = "Unable to reload configuration: "
# At most this much of a log is read after a signal (CRI-O prints its whole config after a reload).
LOG_READ_LIMIT = 4 << 20
# check looks for the last reload's outcome in this much of the log's end (check --wait, each second).
REFUSAL_READ_LIMIT = 1 << 20
JOURNAL_TIMEOUT_S = 5.0
JOURNAL_LINES = 2000


@dataclass(frozen=True)
class CrioLog:
    """Where CRI-O's log can be read: a file (its path as reached from here), or journald by pid."""

    path: Optional[str] = None
    journal_pid: Optional[int] = None

    def mark(self) -> int:
        """Where the log ends now: what comes after it is the reload's."""
        if self.path is None:
            return 0
        try:
            return os.stat(self.path).st_size
        except OSError:
            return 0

    def since(self, mark: int, since_epoch: float) -> Optional[str]:
        """The log's text after mark (a file) or since since_epoch (journald); None: unreadable."""
        if self.path is not None:
            try:
                with open(self.path, "rb") as handle:
                    handle.seek(mark)
                    return handle.read(LOG_READ_LIMIT).decode("utf-8", "replace")
            except OSError:
                return None
        if self.journal_pid is not None:
            return _journal(self.journal_pid, since_epoch)
        return None

    def describe(self) -> str:
        return self.path or (f"journalctl _PID={self.journal_pid}" if self.journal_pid else "")


@dataclass(frozen=True)
class CrioProcess:
    """One crio process, checked to be CRI-O, and the configuration it was started with."""

    pid: int
    ticks: int  # its start time (clock ticks since boot): a pid reused since is not it
    executable: str
    config_path: str = CRIO_DEFAULT_PATH
    config_dir: str = CRIO_DEFAULT_DIR
    log: CrioLog = CrioLog()


@dataclass(frozen=True)
class NotFound:
    """Why no crio process can be signalled for an endpoint: one line, and what to do."""

    reason: str
    fix: str


def find(endpoint: str) -> CrioProcess | NotFound:
    """The crio process answering on endpoint (directly or behind pinctl cri-proxy), or why not."""
    socket = procfs.socket_path(endpoint)
    pid = procfs.serving(socket)
    if pid is None:
        return NotFound(f"no process listening on {socket} can be seen from here (another PID namespace, or "
                        "nobody listens)", "run pinctl on the node itself (a pod needs hostPID: true)")
    ticks = procfs.start_ticks(pid)
    executable, unreadable = procfs.read_exe(pid)
    if ticks is None or executable is None:
        return NotFound(f"cannot tell which program pid {pid}, listening on {socket}, is: {unreadable or 'it is gone'}",
                        "run pinctl as root on the node (a pod needs hostPID and CAP_SYS_PTRACE)")
    built_from = goexe.go_main_path(f"{procfs.PROC}/{pid}/exe")
    if built_from != CRIO_MAIN_PACKAGE:
        what = f"a Go program built from {built_from}" if built_from else "not a Go program with build information"
        return NotFound(f"pid {pid}, listening on {socket}, is {executable}: {what}, not CRI-O's crio, so pinctl "
                        "does not signal it", "point -r at CRI-O's own socket")
    return describe(pid, ticks, executable, procfs.cmdline(pid))


def describe(pid: int, ticks: int, executable: str, argv: list[str]) -> CrioProcess:
    flags = procfs.parse_flags(argv)
    environ = procfs.environ(pid)
    config = flags.get("--config") or flags.get("-c") or environ.get("CONTAINER_CONFIG") or CRIO_DEFAULT_PATH
    config_dir = flags.get("--config-dir") or flags.get("-d") or environ.get("CONTAINER_CONFIG_DIR") or CRIO_DEFAULT_DIR
    return CrioProcess(pid, ticks, executable, procfs.as_seen_by(pid, config), procfs.as_seen_by(pid, config_dir),
                       _log_of(pid, flags.get("--log") or environ.get("CONTAINER_LOG")))


def _log_of(pid: int, named: Optional[str]) -> CrioLog:
    if named:
        return CrioLog(path=procfs.as_seen_by(pid, named))
    stderr = f"{procfs.PROC}/{pid}/fd/2"
    try:
        target = os.readlink(stderr)
        regular = os.path.isfile(stderr)
    except OSError:
        return CrioLog()
    if regular:
        return CrioLog(path=stderr)  # the open file itself, wherever its name now leads
    if target.startswith("socket:") and shutil.which("journalctl"):
        return CrioLog(journal_pid=pid)
    return CrioLog()


def signal_reload(process: CrioProcess) -> None:
    """SIGHUP to exactly the process found: not to a pid reused since."""
    try:
        procfs.signal_exactly(process.pid, process.ticks, signal.SIGHUP)
    except ProcessLookupError:
        raise EngineError(f"CRI-O (pid {process.pid}) is gone or was restarted since pinctl found it",
                          "run pinctl again") from None
    except PermissionError:
        raise EngineError(f"cannot signal CRI-O (pid {process.pid}) to reload", "run pinctl as root (sudo)") from None


@dataclass(frozen=True)
class ReloadLine:
    """What CRI-O's log says of a reload: done, or refused and why."""

    done: bool
    reason: str = ""


def reload_outcome(text: str) -> Optional[ReloadLine]:
    """The last reload outcome in a stretch of CRI-O's log (text or JSON format), or None."""
    found: Optional[ReloadLine] = None
    for line in text.splitlines():
        message = _message(line)
        if message is None:
            continue
        if message.startswith(RELOAD_REFUSED):
            found = ReloadLine(False, message[len(RELOAD_REFUSED):].strip())
        elif message.startswith(RELOADED):
            found = ReloadLine(True)
    return found


_TEXT_MESSAGE = re.compile(r'\bmsg="((?:[^"\\]|\\.)*)"')


def _message(line: str) -> Optional[str]:
    """logrus's msg field of one line: text format (msg="..."), JSON, or journald's bare message."""
    if RELOADED not in line and RELOAD_REFUSED not in line:
        return None
    if line.lstrip().startswith("{"):
        try:
            value = json.loads(line).get("msg")
        except (ValueError, AttributeError):
            value = None
        return value if isinstance(value, str) else None
    quoted = _TEXT_MESSAGE.search(line)
    if quoted is None:
        return line[line.find(RELOADED if RELOADED in line else RELOAD_REFUSED):]
    try:
        value = json.loads(f'"{quoted.group(1)}"')
    except ValueError:
        return quoted.group(1)
    return value if isinstance(value, str) else None


def last_refusal(log: CrioLog) -> Optional[str]:
    """CRI-O's reason when the last reload in the end of its log was refused (check's cause)."""
    if log.path is None and log.journal_pid is None:
        return None
    end = log.mark()
    text = log.since(max(0, end - REFUSAL_READ_LIMIT), 0.0)
    outcome = reload_outcome(text or "")
    return outcome.reason if outcome is not None and not outcome.done else None


def _journal(pid: int, since_epoch: float) -> Optional[str]:
    command = ["journalctl", "--no-pager", "-q", "-o", "cat", f"_PID={pid}"]
    # After a signal, what came since; for check, the end of it.
    command.append(f"--since=@{since_epoch:.6f}" if since_epoch else f"--lines={JOURNAL_LINES}")
    try:
        done = subprocess.run(command, capture_output=True, timeout=JOURNAL_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None

"""Noticing a changed config without a SIGHUP: sync --watch and cri-proxy poll the config's paths.

Kubernetes never sends SIGHUP, and a ConfigMap volume is updated by swapping a symlink: the
kubelet writes the new files into a fresh timestamped directory and renames a `..data` symlink
onto it, so `/etc/pinctl/config.toml` (a symlink through `..data`) is never written itself; only
what it resolves to changes. So the paths are polled, not watched with inotify: every
POLL_SECONDS each path is resolved (realpath) and stat'ed, and a change of what it resolves to,
its inode, size, times, owner or mode asks for a reload (the same one SIGHUP asks for). That is
a few stat calls every 2 s, the same on any filesystem and in any container, and needs no
library: inotify watches an inode, not a name, so it would miss the swap unless every directory
on the way were watched and re-armed after each swap.

What is polled: the main config file (also while it does not exist), its config.d (whose times
change when a drop-in is added, removed or renamed), every file read, and the directory of each
CRI-O file read (--from-crio: CRI-O's drop-ins). The directory of the main file is not: other
files come and go there. The reload itself reads the files the way every command does, so
StrictModes applies to what it reads.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pinctl.config.loader import CRIO_DEFAULT_PATH, DEFAULT_PATH, DROPIN_DIR

if TYPE_CHECKING:
    from pinctl.config.loader import Config

POLL_SECONDS = 2.0
# A change is acted on once the paths look the same twice this far apart: an editor's or a
# `cat >` write in progress is not read half done (an empty file is a valid, empty policy).
SETTLE_SECONDS = 0.5
# ... but a file written to for longer than this is read anyway.
SETTLE_MAX_SECONDS = 5.0

# What one path looks like: what it resolves to, and that file's identity and times; None when
# nothing is there.
PathState = Optional[tuple[str, int, int, int, int, int, int, int]]
Fingerprint = tuple[tuple[str, PathState], ...]


def watched_paths(cfg: Config) -> tuple[str, ...]:
    """The paths whose change can change what loading the config gives."""
    files = [os.path.abspath(path) for path in cfg.files]
    main = _main_file(files)
    dropins = os.path.join(os.path.dirname(main), DROPIN_DIR)
    paths = [main, dropins, *files]
    paths += [os.path.dirname(path) for path in files if path != main and os.path.dirname(path) != dropins]
    return tuple(dict.fromkeys(paths))


def _main_file(files: Sequence[str]) -> str:
    """The main config file. A file named with --config or $PINCTL_CONFIG must exist, so it is
    the first file read; when the first file read is a drop-in or CRI-O's (or nothing was read),
    the main file is the default one, absent for now."""
    default_dropins = os.path.join(os.path.dirname(DEFAULT_PATH), DROPIN_DIR) + os.sep
    if files and not files[0].startswith((default_dropins, CRIO_DEFAULT_PATH)):
        return files[0]
    return DEFAULT_PATH


def fingerprint(paths: Sequence[str]) -> Fingerprint:
    """How the paths look now. A directory's times change when an entry is added, removed or
    renamed in it, so a new drop-in shows without a listing."""
    return tuple((path, _state(path)) for path in paths)


def _state(path: str) -> PathState:
    try:
        resolved = os.path.realpath(path)
        st = os.stat(resolved)
    except OSError:
        # A dangling symlink is "nothing there" too; what it points to is then polled by name.
        return None
    return (resolved, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_uid)


def changed_path(before: Fingerprint, after: Fingerprint) -> str:
    """The first path that differs, for the log line."""
    old = dict(before)
    for path, state in after:
        if path not in old or old[path] != state:
            return path
    return before[0][0] if before else ""  # a path no longer polled


class ConfigPoll:
    """A thread that calls changed(path) when the config's paths change.

    paths() is asked at every turn (a reload may change what is read). The first fingerprint is
    taken at start; the caller has just loaded the config, so a change from then on is seen.
    """

    def __init__(self, paths: Callable[[], Sequence[str]], changed: Callable[[str], None],
                 interval: Optional[float] = None, settle: Optional[float] = None,
                 settle_max: float = SETTLE_MAX_SECONDS) -> None:
        self.paths = paths
        self.changed = changed
        # Read here, not as defaults: a test shortens them for the whole module.
        self.interval = POLL_SECONDS if interval is None else interval
        self.settle = SETTLE_SECONDS if settle is None else settle
        self.settle_max = settle_max
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._last: Fingerprint = ()

    def rebase(self) -> None:
        """Take how the paths look now as unchanged."""
        self._last = fingerprint(self.paths())

    def start(self) -> None:
        self.rebase()
        self._thread = threading.Thread(target=self._loop, name="pinctl-config-poll", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # Its waits end at once; a stat that hangs (a dead NFS mount) must not hold up SIGTERM.
            self._thread.join(timeout=1.0)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.turn()

    def turn(self) -> bool:
        """One look at the paths; whether it asked for a reload."""
        now = fingerprint(self.paths())
        if now == self._last:
            return False
        before = dict(self._last)
        if all(before.get(path, state) == state for path, state in now):
            # Only the set of paths changed: a reload read a new drop-in (or no longer reads one)
            # after the change that asked for it was seen. Taking it as a change would reload twice.
            self._last = now
            return False
        waited = 0.0
        while waited < self.settle_max and not self._stop.wait(self.settle):
            waited += self.settle
            again = fingerprint(self.paths())
            if again == now:
                break
            now = again
        if self._stop.is_set():
            return False
        if now == self._last:
            return False  # a reload meanwhile (SIGHUP's) read it already, and rebased
        path = changed_path(self._last, now)
        self._last = now
        self.changed(path)
        return True

"""One writer at a time for pinctl's CRI-O drop-in.

Every change (pin, unpin, sync, sync --watch, pull --pin) reads pinctl's drop-in, changes its own
items and writes it back, then reloads CRI-O and reads the CRI: two of them at once would each
write what it read before the other's write, and one change would be lost. So the whole of it runs
under an exclusive flock on CRI-O's drop-in directory itself: it is the one object every pinctl on
the node shares (a pod's bind mount of /etc/crio, a shell on the host, another mount namespace), it
adds no file that CRI-O would read (it reads every file there), and the kernel lets go of it when
its holder dies, so a killed pinctl never blocks the next.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from pinctl.backends import procfs
from pinctl.config import crio as crio_config
from pinctl.errors import PinctlError

# A change takes well under a second, and a reload CRI-O never confirms up to READ_BACK_S (30 s):
# a writer waiting longer than this is stuck behind something that will not finish.
LOCK_WAIT_S = 60.0
LOCK_POLL_S = 0.05
PROC_LOCKS = "/proc/locks"


@contextmanager
def held(directory: str, notice: Callable[[str], None], wait: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the writers' lock on directory; a busy lock is waited for up to wait seconds, saying so
    once through notice, then refused in one line naming the holder."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise crio_config.missing_dropin_dir(directory) from None
    except OSError as err:
        raise PinctlError(f"cannot open CRI-O's drop-in directory {directory}: {err.strerror or err}",
                          "run pinctl as root (sudo)") from None
    try:
        if not _take(fd):
            holder = holder_of(fd)
            by = f"pid {holder} ({procfs.stat_name(holder) or 'gone'})" if holder else "another process"
            notice(f"waiting for the writers' lock on {directory}, held by {by}")
            deadline = time.monotonic() + wait
            while not _take(fd):
                if time.monotonic() >= deadline:
                    raise PinctlError(f"the writers' lock on {directory} has been held by {by} for over {wait:g} s",
                                      "wait for it to finish, or stop it; then run pinctl again")
                time.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # the lock goes with the last descriptor


def _take(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def holder_of(fd: int) -> Optional[int]:
    """The pid holding a flock on the file open at fd, from /proc/locks (None when not told)."""
    st = os.fstat(fd)
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open(PROC_LOCKS, encoding="ascii", errors="replace") as table:
            for line in table:
                # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a blocked waiter's line has "->")
                fields = line.split()
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted:
                    return int(fields[4]) if fields[4].isdigit() else None
    except OSError:
        return None
    return None

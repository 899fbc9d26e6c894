"""stdout and stderr as pinctl's process writes them.

Python reports a closed pipe or a full disk as an OSError from whichever write or flush meets it,
and click turns an EPIPE into a silent exit 1 before pinctl sees it. Underneath each stream this
puts a file whose write raises pinctl's own OutputClosed or OutputError instead, so every writer
(click.echo, rich, print) ends in run()'s one handler. stdout also escapes what its encoding
cannot carry (a C locale, PYTHONIOENCODING=latin-1) instead of failing half-way.

stdout into a pipe or a file is buffered in one pipe's worth (64 KiB), PYTHONUNBUFFERED or not:
output that fits is written in one go at the end, so `pinctl ls | head -1` finds pinctl done and
it exits 0; an unbuffered stdout would write row by row and meet the closed pipe (141).
"""

from __future__ import annotations

import errno
import io
import os
import sys
from typing import Any, Optional, TextIO

from pinctl.errors import OutputClosed, OutputError

# A reader gone (a pipe, or a socket given as stdout by a supervisor).
CLOSED = (errno.EPIPE, errno.ECONNRESET)
# What a Linux pipe holds before a writer waits (pipe(7)): stdout's buffer when it is no terminal.
PIPE_BUFFER = 64 * 1024


class _GuardedFile(io.FileIO):
    def write(self, data: Any) -> int:
        try:
            return super().write(data) or 0
        except OSError as err:
            raise _translate(err, self.fileno()) from err


def _translate(err: OSError, fd: int) -> Exception:
    if err.errno in CLOSED:
        return OutputClosed(fd)
    return OutputError(fd, os.strerror(err.errno) if err.errno else str(err))


class _Closed(io.TextIOBase):
    """A descriptor the process was started without (pinctl ls >&-): Python leaves None there."""

    encoding = "utf-8"

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd

    def write(self, text: str) -> int:
        raise OutputError(self.fd, os.strerror(errno.EBADF))

    def isatty(self) -> bool:
        return False


def install() -> None:
    """Put guarded streams in place of sys.stdout and sys.stderr; once, at process start."""
    sys.stdout = _guarded(sys.stdout, "backslashreplace", whole=True) or sys.stdout or _Closed(1)
    sys.stderr = _guarded(sys.stderr, "backslashreplace") or sys.stderr or _Closed(2)


def _guarded(stream: Optional[TextIO], errors: str, whole: bool = False) -> Optional[TextIO]:
    """stream over a guarded file. whole (stdout): into a pipe or file, buffered in PIPE_BUFFER
    whatever Python chose; a terminal, and stderr, keep Python's buffering."""
    if not isinstance(stream, io.TextIOWrapper):
        return None  # already replaced (tests, an embedding program): leave it alone
    try:
        stream.flush()
        raw = _GuardedFile(stream.fileno(), "w", closefd=False)
    except (OSError, ValueError):
        return None  # no such descriptor (started with it closed): nothing to guard
    if whole and not raw.isatty():
        return io.TextIOWrapper(io.BufferedWriter(raw, buffer_size=PIPE_BUFFER), encoding=stream.encoding,
                                errors=errors)
    # Buffered as Python made the stream (PYTHONUNBUFFERED gives it no buffer at all).
    binary: Any = io.BufferedWriter(raw) if isinstance(stream.buffer, io.BufferedWriter) else raw
    return io.TextIOWrapper(binary, encoding=stream.encoding, errors=errors,
                            line_buffering=stream.line_buffering, write_through=stream.write_through)


def discard(fd: int) -> None:
    """Point fd at /dev/null, so the flush at exit cannot fail a second time."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)

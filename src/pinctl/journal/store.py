"""The deletion journal on disk: a directory of JSON-lines files, bounded and safe against a kill.

- ``journal.jsonl`` takes every new entry; when it would pass ``max_bytes`` it becomes
  ``journal.1.jsonl`` (the older ones move up one) and a new one starts. At most ``keep`` rotated
  files stay, so the journal never holds more than (keep + 1) x max_bytes.
- An entry is one ``write()`` of one whole line to a file opened for appending, under an
  exclusive lock on ``journal.lock`` (the watcher and cri-proxy both write), then fdatasync: an
  entry whose append returned survives a kill of the writer and a power cut.
- A writer killed in the middle of a line leaves it without its newline. The next append starts
  on a fresh line, so only that line is lost, and readers report it as cut short.
- Readers need no lock and no running watcher: a line that is cut short, corrupt or from a newer
  version is skipped and counted in ``JournalRead.problems``, one sentence per file and kind.
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator, Optional

from pinctl.errors import PinctlError
from pinctl.journal import Entry, NewerEntry, decode, encode

CURRENT = "journal.jsonl"
LOCK = "journal.lock"
MAX_BYTES = 4 * 1024 * 1024
KEEP = 4
# An entry is a few hundred bytes; a line longer than this was not written by pinctl.
LONGEST_LINE = 64 * 1024


class JournalError(PinctlError):
    """The journal's directory cannot be made, read or written."""


@dataclass
class JournalRead:
    """Every readable entry, oldest first, and what could not be read, one sentence each."""

    entries: list[Entry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def rotated(index: int) -> str:
    return CURRENT if index == 0 else f"journal.{index}.jsonl"


class Journal:
    def __init__(self, directory: str, max_bytes: int = MAX_BYTES, keep: int = KEEP) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.keep = keep

    def path(self, name: str = CURRENT) -> str:
        return os.path.join(self.directory, name)

    # -- writing ----------------------------------------------------------------------------

    def append(self, entry: Entry) -> None:
        """Write one entry, durably. JournalError when the directory cannot be written."""
        line = (encode(entry) + "\n").encode()
        try:
            os.makedirs(self.directory, mode=0o750, exist_ok=True)
            lock = os.open(self.path(LOCK), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o640)
        except OSError as err:
            raise self._error("write", err) from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._append_locked(line)
        except OSError as err:
            raise self._error("write", err) from None
        finally:
            os.close(lock)  # closing releases the lock

    def _append_locked(self, line: bytes) -> None:
        fd = os.open(self.path(), os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            size = os.fstat(fd).st_size
            if size and size + len(line) > self.max_bytes:
                os.close(fd)
                fd = -1
                self._rotate()
                fd = os.open(self.path(), os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
                size = 0
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # a line cut short by a kill stays alone, reported as such
            os.write(fd, line)
            os.fdatasync(fd)
        finally:
            if fd >= 0:
                os.close(fd)

    def _rotate(self) -> None:
        oldest = self.path(rotated(self.keep))
        if os.path.exists(oldest):
            os.unlink(oldest)
        for index in range(self.keep - 1, -1, -1):
            source = self.path(rotated(index))
            if os.path.exists(source):
                os.rename(source, self.path(rotated(index + 1)))
        dirfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dirfd)  # the renames themselves, before the next entry lands
        finally:
            os.close(dirfd)

    # -- reading ----------------------------------------------------------------------------

    def read(self, since: Optional[float] = None) -> JournalRead:
        """Every entry (at or after since), oldest first. A journal never written reads empty;
        JournalError when the directory or a file cannot be read at all."""
        result = JournalRead()
        for index in range(self.keep, -1, -1):
            name = rotated(index)
            try:
                with open(self.path(name), "rb") as stream:
                    self._read_file(name, stream, since, result)
            except FileNotFoundError:
                continue
            except OSError as err:
                raise self._error("read", err) from None
        return result

    def _read_file(self, name: str, stream: BinaryIO, since: Optional[float], result: JournalRead) -> None:
        corrupt = newer = cut = 0
        newest_version = ""
        for raw, complete in _lines(stream):
            if not raw.strip():
                continue
            try:
                entry = decode(raw.decode("utf-8"))
            except NewerEntry as err:
                newer += 1
                newest_version = str(err)
                continue
            except (ValueError, UnicodeDecodeError):
                if complete:
                    corrupt += 1
                else:
                    cut += 1
                continue
            if since is None or entry.time >= since:
                result.entries.append(entry)
        where = self.path(name)
        if cut:
            result.problems.append(f"{where}: the last line was cut short (a writer was killed mid-write)")
        if corrupt:
            result.problems.append(f"{where}: {corrupt} corrupt or cut-short line{'s' if corrupt > 1 else ''} skipped")
        if newer:
            result.problems.append(
                f"{where}: {newer} entr{'ies' if newer > 1 else 'y'} from a newer pinctl ({newest_version}) "
                "skipped: upgrade pinctl to read them")

    def _error(self, verb: str, err: OSError) -> JournalError:
        reason = os.strerror(err.errno) if err.errno else str(err)
        hint = "run as root, or set history_dir (PINCTL_HISTORY_DIR) to a directory you can " + verb
        if err.errno == errno.ENOSPC:
            hint = "free space on that filesystem"
        return JournalError(f"cannot {verb} the deletion journal in {self.directory}: {reason}", hint)


def _lines(stream: BinaryIO) -> Iterator[tuple[bytes, bool]]:
    """(line, ended by a newline) for each line; an over-long line is one corrupt line, read in pieces."""
    read = stream.readline
    while True:
        raw: bytes = read(LONGEST_LINE)
        if not raw:
            return
        if raw.endswith(b"\n"):
            yield raw[:-1], True
            continue
        if len(raw) < LONGEST_LINE:
            yield raw, False  # the end of the file without a newline
            return
        while raw and not raw.endswith(b"\n"):  # the rest of the over-long line
            raw = read(LONGEST_LINE)
        yield b"\x00", True

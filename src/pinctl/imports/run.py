"""import: image archives into the runtime that will use them, one archive at a time, within the
disk budget pull keeps too (pinctl.landing.budget), each reference pinned right after its own
record is made.

An archive is refused whole (ArchiveRefused, one line naming the archive and the entry) before
any of its images gets a record, so nothing of a broken archive is left named or labelled. The
budget: before an archive is read, the image filesystem must have room for DISK_FACTOR times the
tar it holds (as for a pull's compressed size; when a compressed file does not tell its tar's
size, only a filesystem at or past the budget refuses it); while blobs are written, the
filesystem is read again every 64 MiB and the import stops once usage passes the budget.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any, Callable, Literal, Optional, Protocol, Sequence, cast

from pinctl.display import human_size
from pinctl.errors import PinctlError, batch_exit_code, batch_status
from pinctl.imports.archive import ArchiveRefused, tar_size
from pinctl.imports.layout import Platforms, parse_platform
from pinctl.landing.budget import Budget, Destination, percent_used

if TYPE_CHECKING:
    from pinctl.model import Status

ImportAction = Literal["imported", "present", "failed"]
PROGRESS_EVERY = 8 * 1024 * 1024


@dataclass(frozen=True)
class ImportRequest:
    archives: Sequence[str]
    pin: bool = False
    platforms: Sequence[str] = ()
    all_platforms: bool = False
    max_usage: float = 80.0
    # Where the images go (-n; none: where the node says).
    namespaces: Sequence[str] = ()
    # The snapshotter to unpack for (containerd); None: the CRI's, from containerd's config.
    snapshotter: Optional[str] = None
    # Deadline of each long call (a blob's write, a layer's unpack, Docker's load).
    timeout: float = 1800.0

    def platform_filter(self) -> Platforms:
        return Platforms(tuple(parse_platform(p) for p in self.platforms), self.all_platforms)


@dataclass(frozen=True)
class ImportItem:
    """One reference an archive names (or the archive itself, ref empty, when it was refused)."""

    archive: str
    ref: str
    namespace: str
    action: ImportAction
    why: Optional[str] = None
    pin: Optional[str] = None  # pinned, already-pinned or failed; None when not asked
    digest: Optional[str] = None  # the record's target: manifest or index
    platforms: tuple[str, ...] = ()
    size: Optional[int] = None  # the tar's bytes, as read

    @property
    def ok(self) -> bool:
        return self.action != "failed" and self.pin != "failed"


@dataclass
class ImportReport:
    runtime: str
    items: list[ImportItem]
    max_usage: float
    interrupted: bool = False
    # Entries that name no image, so were not imported (said on stderr; no failure).
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return batch_exit_code(self.interrupted, all(item.ok for item in self.items),
                               all(item.action == "failed" for item in self.items))

    @property
    def status(self) -> Status:
        return batch_status(self.exit_code)


@dataclass(frozen=True)
class Loaded:
    """A record the import made or found: changed is False when it named this target already."""

    ref: str
    changed: bool
    digest: str
    platforms: tuple[str, ...]


Watch = Callable[[int], Optional[str]]


class ImportTarget(Destination, Protocol):
    """The runtime that imports (and will use) the images, and the namespace they land in."""

    def load(self, archive: str, source: IO[bytes], platforms: Platforms, watch: Watch,
             progress: Callable[[str], None], loaded: Callable[[Loaded], None]) -> list[str]:
        """Import one archive; loaded is called right after each record is made. Returns notes
        (entries that name no image). ArchiveRefused, EngineError."""


class Labels(Protocol):
    def pin(self, namespace: str, ref: str) -> tuple[str, Optional[str]]:
        """(pinned | already-pinned | failed, why)."""


@dataclass
class ImportRun:
    """One import command's state: the target, the label side, the budget and what it says."""

    target: ImportTarget
    labels: Labels
    request: ImportRequest
    progress: Callable[[str, str], None] = lambda _archive, _state: None
    finished: Callable[[ImportItem], None] = lambda _item: None
    notes: list[str] = field(default_factory=list)
    budget: Optional[Budget] = None
    # How an archive is opened: as given (import), or held to StrictModes (an import directory's).
    opener: Callable[[str], IO[bytes]] = field(default=lambda path: open_archive(path))

    def __post_init__(self) -> None:
        self.budget = self.budget or Budget(self.target, self.request.max_usage)

    def one(self, path: str) -> list[ImportItem]:
        namespace = self.target.namespace
        try:
            handle = self.opener(path)
        except ArchiveRefused as err:
            return [self._done(ImportItem(path, "", namespace, "failed", str(err)))]
        with handle:
            size = tar_size(handle, os.fstat(handle.fileno()).st_size)
            assert self.budget is not None
            refused = self.budget.claim(size)
            if refused:
                return [self._done(ImportItem(path, "", namespace, "failed", refused, size=size))]
            items: list[ImportItem] = []

            def loaded(record: Loaded) -> None:
                action: ImportAction = "imported" if record.changed else "present"
                item = ImportItem(path, record.ref, namespace, action, digest=record.digest,
                                  platforms=record.platforms, size=size)
                items.append(self._done(self._pin(item)))

            try:
                reading = cast(IO[bytes], _Progress(handle, lambda state: self.progress(path, state)))
                self.notes += self.target.load(path, reading, self.request.platform_filter(), self._watch,
                                               lambda state: self.progress(path, state), loaded)
            except PinctlError as err:
                # Records made before the failure stay (each is whole); the rest of the archive is not.
                items.append(self._done(ImportItem(path, "", namespace, "failed", str(err), size=size)))
            finally:
                self.budget.release(size)
        if not items:
            why = "names no image to import" + (f" ({self.notes[-1]})" if self.notes else "")
            items.append(self._done(ImportItem(path, "", namespace, "failed", why, size=size)))
        return items

    def _watch(self, _written: int) -> Optional[str]:
        # What is being written is on the filesystem already: its claim is not counted again.
        used = percent_used(self.target.filesystem())
        if used > self.request.max_usage:
            return (f"no room: the image filesystem reached {used:.0f}% while this was written, past the budget "
                    f"of {self.request.max_usage:g}%")
        return None

    def _pin(self, item: ImportItem) -> ImportItem:
        if not self.request.pin:
            return item
        pin, why = self.labels.pin(item.namespace, item.ref)
        return replace(item, pin=pin, why=why)

    def _done(self, item: ImportItem) -> ImportItem:
        self.finished(item)
        return item


def run(importing: ImportRun, archives: Sequence[str]) -> tuple[list[ImportItem], bool]:
    """Every archive in turn. A SIGINT stops at once: what is being written stays under its
    lease and is never given a record; the archives not reached are reported interrupted."""
    items: list[ImportItem] = []
    for number, path in enumerate(archives):
        try:
            items += importing.one(path)
        except KeyboardInterrupt:
            namespace = importing.target.namespace
            items += [ImportItem(p, "", namespace, "failed", "interrupted") for p in archives[number:]]
            return items, True
    return items, False


def open_archive(path: str) -> IO[bytes]:
    """The archive as a regular file, opened once: what is read is what was checked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as err:
        raise ArchiveRefused(path, "", f"cannot be opened: {(err.strerror or str(err)).lower()}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ArchiveRefused(path, "", "is not a regular file")
    return os.fdopen(fd, "rb", buffering=1024 * 1024)


class _Progress:
    """The archive file, read through: says how far the read has come every few MiB."""

    def __init__(self, inner: IO[bytes], say: Callable[[str], None]) -> None:
        self.inner = inner
        self.say = say
        self.total = os.fstat(inner.fileno()).st_size
        self.read_bytes = 0
        self.said = 0

    def read(self, size: int = -1) -> bytes:
        data = self.inner.read(size)
        self.read_bytes += len(data)
        if self.read_bytes - self.said >= PROGRESS_EVERY:
            self.said = self.read_bytes
            self.say(f"reading {human_size(self.read_bytes)} of {human_size(self.total)}")
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

"""Reading an image archive: a tar (plain, gzip or zstd) holding an OCI image layout or what
`docker save` writes. Pure: no I/O beyond the file object it is handed and the sink it writes
blobs to.

The archive is untrusted input. It is read in one pass, as a stream (a compressed tar cannot be
sought), so memory stays bounded whatever its size: each file goes to the sink in chunks while
its digest is computed. Every entry is checked as it comes: a name outside the archive root, a
link that escapes it, a device or FIFO, an entry named twice, a blob whose content does not
match the digest its name gives, a truncated or corrupt stream, each refuses the whole archive
with one line naming the archive and the entry (ArchiveRefused).
"""

from __future__ import annotations

import gzip
import hashlib
import posixpath
import re
import tarfile
import zlib
from dataclasses import dataclass, field
from typing import IO, Any, Iterator, Optional, Protocol, cast

from pinctl.display import visible
from pinctl.errors import PinctlError

CHUNK = 1024 * 1024
# index.json, manifest.json, oci-layout and repositories are read whole: a few KiB in practice.
METADATA_NAMES = frozenset({"index.json", "manifest.json", "oci-layout", "repositories"})
METADATA_LIMIT = 16 * 1024 * 1024
# Manifests, indexes and configs are JSON documents of a few KiB; each one up to this size is
# kept in memory as it passes, so the plan can read them without a second pass.
DOCUMENT_LIMIT = 4 * 1024 * 1024
DOCUMENTS_TOTAL = 64 * 1024 * 1024
MAX_ENTRIES = 100_000
MAX_LINK_HOPS = 8
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ALGORITHMS = {"sha256": 64, "sha512": 128}
_HEX = re.compile(r"[a-f0-9]+")
# docker save's old format keeps, per layer, a json and a VERSION nothing reads any more.
_DOCKER_LEFTOVERS = ("/json", "/VERSION")
# What a corrupt or truncated stream raises from tarfile, gzip, zlib and zstd.
_STREAM_ERRORS: tuple[type[BaseException], ...] = (tarfile.TarError, EOFError, OSError, zlib.error,
                                                    gzip.BadGzipFile, ValueError)
# zstd's own error joins them once a zstd stream is opened (the module is imported only then).
_ZSTD_ERRORS: list[type[BaseException]] = []


def _errors() -> tuple[type[BaseException], ...]:
    return (*_STREAM_ERRORS, *_ZSTD_ERRORS)


class ArchiveRefused(PinctlError):
    """The archive is refused as a whole: what is wrong, naming the archive and the entry."""

    def __init__(self, archive: str, entry: str, why: str) -> None:
        where = f"{archive}: {entry}" if entry else archive
        # Entry names come from the archive: control characters in them are shown escaped.
        super().__init__(visible(f"{where}: {why}"))
        self.archive = archive
        self.entry = entry
        self.why = why


@dataclass(frozen=True)
class Blob:
    """A file of the archive as it went to the sink: its digest, size and first bytes."""

    entry: str
    digest: str
    size: int
    head: bytes


class BlobSink(Protocol):
    """Where blobs go as they are read. write() consumes the stream and stores it only when
    stream.verified() says so at its end (the stream never raises: see BlobStream)."""

    def has(self, digest: str, size: int) -> bool:
        """The store holds this blob already: it is read (and checked) but not written."""

    def write(self, stream: BlobStream) -> None:
        """Store the blob the stream yields; raise ArchiveRefused (or an engine error) if that fails."""


class BlobStream:
    """One file's content in chunks, hashed as it passes. Iterating never raises, since a sink
    may iterate it on another thread (gRPC's request thread): a read error or a digest that
    does not match is kept in failure, and verified() is False."""

    def __init__(self, archive: str, entry: str, source: IO[bytes], size: int, expected: Optional[str]) -> None:
        self.archive = archive
        self.entry = entry
        self.size = size
        self.expected = expected
        self._source = source
        algorithm = expected.split(":", 1)[0] if expected else "sha256"
        self._hash = hashlib.new(algorithm)
        self.read = 0
        self.head = b""
        self.document: Optional[bytearray] = None
        self.failure: Optional[ArchiveRefused] = None
        self.keep_document = False

    @property
    def digest(self) -> str:
        return f"{self._hash.name}:{self._hash.hexdigest()}"

    def __iter__(self) -> Iterator[bytes]:
        while self.read < self.size:
            try:
                chunk = self._source.read(min(CHUNK, self.size - self.read))
            except _errors() as err:
                self.failure = ArchiveRefused(self.archive, self.entry, f"truncated or corrupt: {_reason(err)}")
                return
            if not chunk:
                self.failure = ArchiveRefused(self.archive, self.entry,
                                              f"truncated: {self.read} of {self.size} bytes")
                return
            if not self.read:
                self.head = chunk[:8]
                if self.keep_document and self.size <= DOCUMENT_LIMIT and chunk[:1] == b"{":
                    self.document = bytearray()
            self.read += len(chunk)
            self._hash.update(chunk)
            if self.document is not None:
                self.document += chunk
            yield chunk
        if self.expected is not None and self.digest != self.expected:
            self.failure = ArchiveRefused(self.archive, self.entry,
                                          f"content does not match its digest (it hashes to {self.digest})")

    def stop(self, why: str) -> None:
        """The sink gave up on this blob (no room): finish() raises why, naming the entry."""
        self.failure = ArchiveRefused(self.archive, self.entry, why)

    def drain(self) -> None:
        for _chunk in self:
            pass

    def verified(self) -> bool:
        """Read to its end, whole, and matching its digest when its name gave one."""
        return self.failure is None and self.read == self.size

    def finish(self) -> str:
        """The digest, once the stream was read through; ArchiveRefused when it is not sound."""
        if self.read < self.size and self.failure is None:
            self.drain()
        if self.failure is not None:
            raise self.failure
        return self.digest


@dataclass
class Archive:
    """What one pass over the archive found: blobs by entry, metadata files, links, documents."""

    name: str
    blobs: dict[str, Blob] = field(default_factory=dict)
    metadata: dict[str, bytes] = field(default_factory=dict)
    # link name -> (target entry, kind)
    links: dict[str, str] = field(default_factory=dict)
    documents: dict[str, bytes] = field(default_factory=dict)
    by_digest: dict[str, Blob] = field(default_factory=dict)
    # The decompressed tar's size.
    bytes_read: int = 0

    def blob_at(self, entry: str) -> Optional[Blob]:
        """The blob an entry names, following links; None when the archive has no such file."""
        name = _clean(entry)
        for _hop in range(MAX_LINK_HOPS + 1):
            if name is None:
                return None
            if name in self.blobs:
                return self.blobs[name]
            if name not in self.links:
                return None
            name = self.links[name]
        raise ArchiveRefused(self.name, entry, f"links more than {MAX_LINK_HOPS} deep (a loop?)")


def decompressed(source: IO[bytes], archive: str) -> IO[bytes]:
    """The tar stream inside a file: gzip and zstd are recognised by their magic numbers."""
    head = _peek(source, 4)
    if head.startswith(GZIP_MAGIC):
        return cast(IO[bytes], gzip.GzipFile(fileobj=source, mode="rb"))
    if head.startswith(ZSTD_MAGIC):
        return zstd_reader(source, archive)
    return source


def zstd_reader(source: IO[bytes], archive: str) -> IO[bytes]:
    """A zstd stream: Python's own compression.zstd (3.14+), else its backport."""
    try:
        from compression import zstd
    except ImportError:
        try:
            from backports import zstd
        except ImportError:
            raise ArchiveRefused(archive, "", "is zstd-compressed, and no zstd module is installed "
                                              "(pip install backports.zstd)") from None
    if zstd.ZstdError not in _ZSTD_ERRORS:
        _ZSTD_ERRORS.append(zstd.ZstdError)
    reader: IO[bytes] = zstd.ZstdFile(source, mode="rb")
    return reader


def _peek(source: IO[bytes], size: int) -> bytes:
    peek = getattr(source, "peek", None)
    if peek is not None:
        return bytes(peek(size)[:size])
    position = source.tell()
    head = source.read(size)
    source.seek(position)
    return head


def read_archive(source: IO[bytes], archive: str, sink: BlobSink) -> Archive:
    """One pass over the archive: every file to the sink (or, for the few metadata files, into
    memory), every entry checked. ArchiveRefused names the first entry that is wrong."""
    found = Archive(archive)
    counter = _Counting(decompressed(source, archive))
    try:
        tar = tarfile.open(fileobj=counter, mode="r|")  # noqa: SIM115 - a stream: closed below
    except _errors() as err:
        raise ArchiveRefused(archive, "", f"not a tar archive, or a corrupt one: {_reason(err)}") from None
    entry = ""
    try:
        for count, member in enumerate(_members(tar), 1):
            entry = member.name
            if count > MAX_ENTRIES:
                raise ArchiveRefused(archive, entry, f"more than {MAX_ENTRIES} entries")
            _take(found, tar, member, sink)
    except _errors() as err:
        raise ArchiveRefused(archive, entry or "(first entry)", f"truncated or corrupt: {_reason(err)}") from None
    finally:
        tar.close()
    found.bytes_read = counter.count
    _check_links(found)
    return found


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while True:
        member = tar.next()
        if member is None:
            return
        yield member


def _take(found: Archive, tar: tarfile.TarFile, member: tarfile.TarInfo, sink: BlobSink) -> None:
    archive = found.name
    if member.isdir() and posixpath.normpath(member.name) == ".":
        return  # the root itself: `tar -C dir -cf layout.tar .` writes it first, as "./"
    name = _clean(member.name)
    if name is None:
        raise ArchiveRefused(archive, member.name, "names a path outside the archive root")
    if name in found.blobs or name in found.links or name in found.metadata:
        raise ArchiveRefused(archive, member.name, "appears twice in the archive")
    if member.isdir():
        return
    if member.issym() or member.islnk():
        found.links[name] = _link_target(archive, member, name)
        return
    if not member.isreg():
        raise ArchiveRefused(archive, member.name, "is a device, FIFO or other special file, which no image holds")
    handle = tar.extractfile(member)
    if handle is None:  # a regular member always has one; kept for the type checker
        raise ArchiveRefused(archive, member.name, "cannot be read")
    if name in METADATA_NAMES:
        if member.size > METADATA_LIMIT:
            raise ArchiveRefused(archive, member.name, f"is {member.size} bytes, over the {METADATA_LIMIT} allowed")
        data = handle.read()
        if len(data) != member.size:
            raise ArchiveRefused(archive, member.name, f"truncated: {len(data)} of {member.size} bytes")
        found.metadata[name] = data
        return
    stream = BlobStream(archive, member.name, handle, member.size, _expected_digest(archive, member.name, name))
    if name.endswith(_DOCKER_LEFTOVERS):
        stream.finish()
        return
    stream.keep_document = sum(len(d) for d in found.documents.values()) + member.size <= DOCUMENTS_TOTAL
    if stream.expected is not None and sink.has(stream.expected, member.size):
        digest = stream.finish()
    else:
        sink.write(stream)
        digest = stream.finish()
    blob = Blob(member.name, digest, member.size, stream.head)
    found.blobs[name] = blob
    found.by_digest.setdefault(digest, blob)
    if stream.document is not None:
        found.documents[digest] = bytes(stream.document)


def _expected_digest(archive: str, raw: str, name: str) -> Optional[str]:
    """blobs/<algorithm>/<hex> names its digest, and so does a docker config <hex>.json."""
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "blobs":
        algorithm, hexdigest = parts[1], parts[2]
        if algorithm not in _ALGORITHMS:
            raise ArchiveRefused(archive, raw, f"uses digest algorithm {algorithm!r}; sha256 or sha512 are read")
        if len(hexdigest) != _ALGORITHMS[algorithm] or not _HEX.fullmatch(hexdigest):
            raise ArchiveRefused(archive, raw, "is not named by a digest (blobs/<algorithm>/<hex>)")
        return f"{algorithm}:{hexdigest}"
    if len(parts) == 1 and name.endswith(".json") and len(name) == 69 and _HEX.fullmatch(name[:64]):
        return f"sha256:{name[:64]}"
    return None


def _clean(name: str) -> Optional[str]:
    """The entry's path relative to the archive root; None when it is absolute or leaves the root."""
    if not name or name.startswith("/") or "\x00" in name:
        return None
    normal = posixpath.normpath(name)
    if normal == "." or normal == ".." or normal.startswith("../"):
        return None
    return normal


def _link_target(archive: str, member: tarfile.TarInfo, name: str) -> str:
    """Where a link points, as an entry name; one that leaves the archive root is refused."""
    target = member.linkname
    if member.issym():
        if target.startswith("/"):
            raise ArchiveRefused(archive, member.name, f"is a symbolic link to an absolute path ({target})")
        target = posixpath.join(posixpath.dirname(name), target)
    resolved = _clean(target)
    if resolved is None:
        raise ArchiveRefused(archive, member.name, f"is a link that escapes the archive root ({member.linkname})")
    return resolved


def _check_links(found: Archive) -> None:
    """Every link ends at a file of the archive (a link to a directory or to nothing names no blob)."""
    for name in found.links:
        if found.blob_at(name) is None and _final(found, name) not in found.metadata:
            raise ArchiveRefused(found.name, name, f"is a link to {found.links[name]}, which the archive does not "
                                                   "hold as a file")


def _final(found: Archive, name: str) -> str:
    for _hop in range(MAX_LINK_HOPS + 1):
        if name not in found.links:
            return name
        name = found.links[name]
    return name


def _reason(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return text.splitlines()[0]


class _Counting:
    """A read-only stream that counts the bytes read through it (the decompressed tar's size)."""

    def __init__(self, inner: IO[bytes]) -> None:
        self.inner = inner
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self.inner.read(size)
        self.count += len(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def tar_size(source: IO[bytes], file_size: int) -> Optional[int]:
    """The tar's size inside a compressed file, when its format tells it without reading it all:
    gzip's trailer (modulo 4 GiB, one member), zstd's frame header. None when it does not."""
    head = _peek(source, 18)
    if head.startswith(GZIP_MAGIC):
        position = source.tell()
        try:
            source.seek(max(0, file_size - 4))
            trailer = source.read(4)
        finally:
            source.seek(position)
        told = int.from_bytes(trailer, "little") if len(trailer) == 4 else 0
        # A trailer smaller than the file is a wrapped size or a second member: not to be trusted.
        return told if told >= file_size else None
    if head.startswith(ZSTD_MAGIC):
        try:
            try:
                from compression import zstd
            except ImportError:
                from backports import zstd
            size = zstd.get_frame_info(head).decompressed_size
        except Exception:  # noqa: BLE001 - no module, or a header it cannot read: the size is not told
            return None
        return int(size) if size is not None and size >= file_size else None
    return file_size

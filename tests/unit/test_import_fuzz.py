"""Fuzzing the archive reader with hypothesis: whatever bytes or entries an archive holds,
reading and planning it either succeeds or raises ArchiveRefused with one line naming the
archive; nothing else escapes, and nothing outside the root is ever accepted.

Seeds are the corpus of broken archives (tests/corpus/archives) and good archives of both
formats; hypothesis mutates them (bit flips, cuts, inserted bytes) and builds archives entry
by entry from hostile names and links.
"""

from __future__ import annotations

import io
import pathlib
import tarfile
from typing import Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pinctl.imports.archive import ArchiveRefused, BlobStream, read_archive
from pinctl.imports.layout import Platforms, plan_import
from tests.harness import archives, images

SEEDS: list[bytes] = [path.read_bytes() for path in sorted(archives.CORPUS.glob("*.tar*"))]


def _good_seeds() -> list[bytes]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        base = pathlib.Path(tmp)
        archives.oci_archive(base / "o.tar", [images.recipe("example.test/fz:1", seed="fz",
                                                            platforms=[images.host_platform(), "linux/s390x"])])
        archives.docker_archive(base / "d.tar", [images.recipe("example.test/fzd:1", seed="fzd")])
        archives.oci_archive(base / "g.tar.gz", [images.recipe("example.test/fzg:1", seed="fzg")], "gzip")
        return [(base / name).read_bytes() for name in ("o.tar", "d.tar", "g.tar.gz")]


SEEDS += _good_seeds()


class Sink:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def has(self, digest: str, size: int) -> bool:
        return False

    def write(self, stream: BlobStream) -> None:
        data = b"".join(stream)
        if stream.verified():
            self.blobs[stream.digest] = data

    def read(self, digest: str, _size: int) -> Optional[bytes]:
        return self.blobs.get(digest)


def attempt(data: bytes) -> Optional[ArchiveRefused]:
    """Read and plan; the refusal, or None when the archive was accepted."""
    sink = Sink()
    try:
        found = read_archive(io.BytesIO(data), "fuzz.tar", sink)
        plan_import(found, sink.read, lambda _d, _s: False, Platforms(everything=True))
    except ArchiveRefused as refused:
        assert str(refused).startswith("fuzz.tar") and "\n" not in str(refused), str(refused)
        return refused
    return None


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "zero"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=64))
        elif data:
            end = min(len(data), at + draw(st.integers(1, 1024)))
            data[at:end] = bytes(end - at)
    return bytes(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_archives_are_read_or_refused_in_one_line(data: bytes) -> None:
    attempt(data)


NAMES = st.one_of(
    st.sampled_from(["index.json", "oci-layout", "manifest.json", "blobs/sha256/" + "a" * 64, "a/layer.tar",
                     "../x", "/abs", "a/../../x", "./ok", "a//b", ".", "..", "blobs/md5/00", "x\x00y"]),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=30),
)
KINDS = st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE])


@st.composite
def built(draw: st.DrawFn) -> tuple[bytes, list[tuple[str, bytes, str]]]:
    entries = draw(st.lists(st.tuples(NAMES, KINDS, NAMES, st.binary(max_size=64)), min_size=1, max_size=8))
    buf = io.BytesIO()
    written = []
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, target, data in entries:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = target if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            try:
                tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
            except (ValueError, UnicodeError):
                continue
            written.append((name, bytes(kind), info.linkname))
    return buf.getvalue(), written


def _escapes(name: str) -> bool:
    import posixpath

    return name.startswith("/") or posixpath.normpath(name).split("/")[0] == ".."


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(built())
def test_hostile_entries_are_never_accepted(archive: tuple[bytes, list[tuple[str, bytes, str]]]) -> None:
    data, entries = archive
    refused = attempt(data)
    if any(_escapes(name) for name, _kind, _target in entries):
        assert refused is not None, entries


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_seed_is_read_or_refused(seed: int) -> None:
    attempt(SEEDS[seed])


def test_the_fuzz_checks_can_fail() -> None:
    """An archive that escapes the root is refused; were it accepted, the property above fails."""
    assert attempt(SEEDS[[p.name for p in sorted(archives.CORPUS.glob("*.tar*"))].index("traversal.tar")]) is not None
    assert _escapes("a/../../x") and not _escapes("a/../x")

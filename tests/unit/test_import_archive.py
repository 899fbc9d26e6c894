"""The archive reader and the import plan, over an in-memory sink: the formats ctr import and
docker load read, platform selection, containerd's GC labels and chain IDs, and every archive
of the corpus (tests/corpus/archives) refused in one line naming its archive and entry."""

from __future__ import annotations

import hashlib
import io
import json
import pathlib
import tarfile
import tracemalloc
from typing import Iterator, Optional

import pytest

from pinctl.errors import UsageError
from pinctl.imports.archive import ArchiveRefused, BlobStream, read_archive, tar_size
from pinctl.imports.layout import (DOCKER_LAYER, DOCKER_MANIFEST, GC_CONTENT, OCI_LAYER_ZSTD, Platforms, host,
                                   parse_platform, plan_import, unpack_manifest)
from tests.harness import archives, images

CORPUS = archives.CORPUS
EXPECTED: dict[str, str] = json.loads((CORPUS / "EXPECTED.json").read_text())
HOST = images.host_platform()
OTHER = "linux/s390x" if HOST != "linux/s390x" else "linux/amd64"


class MemorySink:
    """What containerd's content store does for the reader: keep verified blobs, say which it has."""

    def __init__(self, present: Optional[dict[str, bytes]] = None) -> None:
        self.blobs: dict[str, bytes] = dict(present or {})
        self.skipped: list[str] = []
        self.written = 0

    def has(self, digest: str, size: int) -> bool:
        found = digest in self.blobs and len(self.blobs[digest]) == size
        if found:
            self.skipped.append(digest)
        return found

    def write(self, stream: BlobStream) -> None:
        data = b"".join(stream)
        self.written += len(data)
        if stream.verified():
            self.blobs[stream.digest] = data

    def read(self, digest: str, _size: int) -> Optional[bytes]:
        return self.blobs.get(digest)


def read(path: pathlib.Path, sink: Optional[MemorySink] = None, platforms: Platforms = Platforms()) -> tuple:
    sink = sink or MemorySink()
    with open(path, "rb") as handle:
        found = read_archive(handle, path.name, sink)
    plan = plan_import(found, sink.read, lambda digest, size: sink.has(digest, size), platforms)
    return found, plan, sink


def test_a_layout_packed_as_tar_c_dir_dot_is_read(tmp_path: pathlib.Path) -> None:
    # `tar -C dir -cf layout.tar .` writes the root "./" first and every entry below it as "./x".
    packed = tmp_path / "oci.tar"
    (info,) = archives.oci_archive(packed, [images.recipe("example.test/dot:1", seed="dot")])
    layout = tmp_path / "layout"
    with tarfile.open(packed) as tar:
        tar.extractall(layout, filter="data")
    dotted = tmp_path / "dotted.tar"
    with tarfile.open(dotted, "w") as tar:
        tar.add(layout, arcname=".")
    with tarfile.open(dotted) as tar:
        assert tar.getnames()[0] == "." and all(n == "." or n.startswith("./") for n in tar.getnames())
    _found, plan, _sink = read(dotted)
    assert [tuple(image.names) for image in plan.images] == [tuple(info.refs)]


def test_a_file_at_the_root_itself_is_still_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "root-file.tar"
    with tarfile.open(path, "w") as tar:
        entry = tarfile.TarInfo("./")
        entry.size = 1
        tar.addfile(entry, io.BytesIO(b"x"))
    with pytest.raises(ArchiveRefused, match="outside the archive root"):
        read(path)


@pytest.mark.parametrize("compress", ["", "gzip", "zstd"])
def test_an_oci_layout_in_any_compression_names_each_image_and_its_gc_labels(tmp_path: pathlib.Path,
                                                                             compress: str) -> None:
    path = tmp_path / "oci.tar"
    (one, two) = archives.oci_archive(path, [images.recipe("example.test/a:1", "example.test/a:latest", seed="a"),
                                             images.recipe("example.test/b:2", seed="b")], compress)
    _found, plan, sink = read(path)
    names = {tuple(image.names): image for image in plan.images}
    assert set(names) == {tuple(one.refs), tuple(two.refs)}
    image = names[tuple(one.refs)]
    assert image.target.digest == one.digest
    manifest = image.manifests[0]
    assert manifest.config.digest == one.config_digest
    assert plan.labels[one.digest] == {f"{GC_CONTENT}.config": one.config_digest,
                                       f"{GC_CONTENT}.l.0": manifest.layers[0].digest}
    assert {one.digest, one.config_digest, manifest.layers[0].digest} <= set(sink.blobs)


def test_a_docker_save_archive_gets_a_manifest_pinctl_writes(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "docker.tar"
    (info,) = archives.docker_archive(path, [images.recipe("alpha:1.0", seed="docker-a")])
    found, plan, _sink = read(path)
    (image,) = plan.images
    assert image.names == ["docker.io/library/alpha:1.0"]
    assert image.target.media_type == DOCKER_MANIFEST
    document = json.loads(plan.generated[image.target.digest])
    assert document["config"]["digest"] == info.config_digest
    assert [layer["mediaType"] for layer in document["layers"]] == [DOCKER_LAYER]
    # The duplicate layer docker writes as a symlink resolves to the same blob.
    layer_entry = next(name for name in found.blobs if name.endswith("/layer.tar"))
    assert found.blob_at(layer_entry.replace("/layer.tar", "-dup/layer.tar")) == found.blobs[layer_entry]
    manifest = image.manifests[0]
    assert manifest.chain_ids() == manifest.diff_ids  # one layer: its chain ID is its diff ID
    assert hashlib.sha256(plan.generated[image.target.digest]).hexdigest() == image.target.digest.split(":")[1]


def test_chain_ids_are_containerds() -> None:
    from pinctl.imports.layout import Descriptor, Manifest

    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    manifest = Manifest(Descriptor("m", "sha256:" + "0" * 64, 1), Descriptor("c", "sha256:" + "1" * 64, 1),
                        [], [a, b], None)
    assert manifest.chain_ids() == [a, "sha256:" + hashlib.sha256(f"{a} {b}".encode()).hexdigest()]


def test_zstd_layers_in_a_docker_archive_make_an_oci_manifest(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "docker.tar"
    archives.docker_archive(path, [images.recipe("zed:1", seed="zed")], duplicate_layer=False)
    entries = archives.members(path)
    layer = next(i.name for i, _ in entries if i.name.endswith("layer.tar"))
    raw = dict((i.name, d) for i, d in entries)[layer] or b""
    archives.write_tar(path, [(i, archives.compressed(raw, "zstd") if i.name == layer else d) for i, d in entries])
    _found, plan, _sink = read(path)
    assert [layer.media_type for layer in plan.images[0].manifests[0].layers] == [OCI_LAYER_ZSTD]


def test_platforms_the_hosts_by_default_one_named_or_all(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "multi.tar"
    (info,) = archives.oci_archive(path, [images.recipe("example.test/multi:1", seed="m", platforms=[HOST, OTHER])])
    _found, plan, _sink = read(path)
    assert plan.images[0].platforms == [HOST]
    assert len(plan.labels[info.digest]) == 1  # the index references only what was imported
    _found, plan, _sink = read(path, platforms=Platforms((parse_platform(OTHER),)))
    assert plan.images[0].platforms == [OTHER]
    assert unpack_manifest(plan.images[0]) is None  # another platform is never unpacked here
    _found, plan, _sink = read(path, platforms=Platforms(everything=True))
    assert plan.images[0].platforms == [HOST, OTHER]
    assert plan.images[0].listed_platforms == [HOST, OTHER]


def test_an_index_without_the_hosts_platform_is_refused_naming_what_it_lists(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "foreign.tar"
    archives.oci_archive(path, [images.recipe("example.test/foreign:1", seed="f", platforms=[OTHER, "linux/ppc64le"])])
    with pytest.raises(ArchiveRefused) as refused:
        read(path)
    assert "index.json manifests[0]" in str(refused.value) and OTHER in str(refused.value)
    assert "--all-platforms" in str(refused.value)


def test_a_platform_whose_blobs_are_not_in_the_archive_is_fine_when_not_asked_for(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "partial.tar"
    (info,) = archives.oci_archive(path, [images.recipe("example.test/partial:1", seed="p", platforms=[HOST, OTHER])])
    other_manifest = info.manifest_digests[1].split(":", 1)[1]
    entries = [(i, d) for i, d in archives.members(path) if not i.name.endswith(other_manifest)]
    archives.write_tar(path, entries)
    _found, plan, _sink = read(path)
    assert plan.images[0].platforms == [HOST]
    with pytest.raises(ArchiveRefused, match="which the archive does not hold"):
        read(path, platforms=Platforms(everything=True))


def test_blobs_the_store_holds_are_read_and_checked_but_not_written(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "again.tar"
    archives.oci_archive(path, [images.recipe("example.test/again:1", seed="again", layer_bytes=4096)])
    _found, _plan, first = read(path)
    second = MemorySink(first.blobs)
    read(path, second)
    assert second.written == 0 and set(second.skipped) >= set(first.blobs)


def test_a_blob_the_store_holds_still_refuses_when_the_archive_copy_is_wrong() -> None:
    path = CORPUS / "digest-mismatch.tar"
    good = MemorySink()
    with pytest.raises(ArchiveRefused):
        read(path, good)
    name = EXPECTED["digest-mismatch.tar"]
    size = next(i.size for i, _ in archives.members(path) if i.name == name)
    present = MemorySink({"sha256:" + name.rsplit("/", 1)[1]: b"x" * size})
    with pytest.raises(ArchiveRefused, match="does not match its digest"):
        read(path, present)
    assert present.skipped  # the store's copy was not overwritten: the archive's was only hashed


def test_an_unnamed_entry_is_left_out_and_said(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "unnamed.tar"
    archives.oci_archive(path, [images.recipe("example.test/named:1", seed="u")])
    entries = archives.members(path)
    index = json.loads(dict((i.name, d) for i, d in entries)["index.json"] or b"")
    index["manifests"].append({k: v for k, v in index["manifests"][0].items() if k != "annotations"})
    archives.write_tar(path, [(i, json.dumps(index).encode() if i.name == "index.json" else d) for i, d in entries])
    _found, plan, _sink = read(path)
    assert [image.names for image in plan.images] == [["example.test/named:1"]]
    assert len(plan.unnamed) == 1 and "manifests[1] names no image" in plan.unnamed[0]


def test_a_name_that_is_no_reference_refuses_the_archive(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "badname.tar"
    archives.oci_archive(path, [images.recipe("example.test/ok:1", seed="n")])
    entries = archives.members(path)
    index = json.loads(dict((i.name, d) for i, d in entries)["index.json"] or b"")
    index["manifests"][0]["annotations"]["io.containerd.image.name"] = "Bad Name\n:1"
    archives.write_tar(path, [(i, json.dumps(index).encode() if i.name == "index.json" else d) for i, d in entries])
    with pytest.raises(ArchiveRefused, match="not an image reference"):
        read(path)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_broken_archive_of_the_corpus_is_refused_in_one_line_naming_it(name: str) -> None:
    with pytest.raises(ArchiveRefused) as refused:
        read(CORPUS / name)
    message = str(refused.value)
    assert message.startswith(f"{name}: ") and "\n" not in message
    assert refused.value.entry == EXPECTED[name] or (EXPECTED[name] and EXPECTED[name] in refused.value.entry)


def test_the_corpus_is_what_the_generator_makes(tmp_path: pathlib.Path) -> None:
    """The committed files are the generator's output: a change to either shows here."""
    expected = archives.write_corpus(tmp_path)
    assert expected == EXPECTED
    for name in expected:
        assert (tmp_path / name).read_bytes() == (CORPUS / name).read_bytes(), name


def test_the_tar_size_a_compressed_file_tells(tmp_path: pathlib.Path) -> None:
    raw = b"\0" * 200_000
    for compress in ("gzip", "zstd"):
        data = archives.compressed(raw, compress)
        assert tar_size(io.BytesIO(data), len(data)) == len(raw), compress
    assert tar_size(io.BytesIO(raw), len(raw)) == len(raw)


def test_a_malformed_platform_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        parse_platform("linux")
    assert parse_platform("Linux/ARM64/v8") == type(host())("linux", "arm64", "v8")


class _ZeroTar(io.RawIOBase):
    """An OCI layout tar with one blob of `size` zero bytes, made as it is read: nothing on disk."""

    def __init__(self, size: int) -> None:
        zeros = hashlib.sha256()
        block = b"\0" * (1 << 20)
        for _ in range(size // len(block)):
            zeros.update(block)
        zeros.update(b"\0" * (size % len(block)))
        self.digest = "sha256:" + zeros.hexdigest()
        header = tarfile.TarInfo("blobs/sha256/" + zeros.hexdigest())
        header.size = size
        self.parts: Iterator[bytes] = self._parts(header.tobuf(format=tarfile.USTAR_FORMAT), size)
        self.pending = b""

    def _parts(self, header: bytes, size: int) -> Iterator[bytes]:
        yield header
        left = size
        while left:
            step = min(left, 1 << 20)
            yield b"\0" * step
            left -= step
        yield b"\0" * ((512 - size % 512) % 512) + b"\0" * 1024

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: "bytearray | memoryview") -> int:  # type: ignore[override]
        while not self.pending:
            self.pending = next(self.parts, b"")
            if not self.pending:
                return 0
        n = min(len(buffer), len(self.pending))
        buffer[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n


def test_a_large_blob_streams_in_bounded_memory() -> None:
    """256 MiB through the reader to a sink that keeps nothing: Python's heap stays small."""

    class Counting:
        written = 0

        def has(self, _digest: str, _size: int) -> bool:
            return False

        def write(self, stream: BlobStream) -> None:
            for chunk in stream:
                self.written += len(chunk)

    source = _ZeroTar(256 * 1024 * 1024)
    sink = Counting()
    tracemalloc.start()
    try:
        found = read_archive(io.BufferedReader(source), "big.tar", sink)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sink.written == 256 * 1024 * 1024
    assert found.by_digest[source.digest].size == sink.written
    assert peak < 16 * 1024 * 1024, peak


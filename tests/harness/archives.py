"""Image archives in the formats `pinctl import`, `ctr images import` and `docker load` read, and
broken ones, built in pure Python from tests.harness.images' recipes.

- ``oci_archive``: an OCI image layout only (oci-layout, index.json, blobs/), as skopeo or
  ``docker save`` with the containerd store writes it;
- ``docker_archive``: docker save's classic format (``<id>/layer.tar``, ``<config>.json``,
  ``manifest.json``, ``repositories``), with a duplicate layer as a symlink as docker writes it;
- either compressed with gzip or zstd (``compress``);
- ``BROKEN``: one small archive per way an archive can be wrong, each with the entry the
  refusal must name. ``tests/corpus/archives/`` keeps them as files (``write_corpus``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import pathlib
import tarfile
from collections.abc import Callable, Iterable, Sequence
from typing import Optional

from tests.harness import images

CORPUS = pathlib.Path(__file__).resolve().parent.parent / "corpus" / "archives"
Member = tuple[tarfile.TarInfo, Optional[bytes]]


def members(path: pathlib.Path) -> list[Member]:
    """Every entry of a tar with its data (None for directories and links)."""
    with tarfile.open(path) as tar:
        found: list[Member] = []
        for info in tar.getmembers():
            handle = tar.extractfile(info) if info.isreg() else None
            found.append((info, handle.read() if handle else None))
        return found


def write_tar(path: pathlib.Path, entries: Iterable[Member], compress: str = "") -> pathlib.Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    path.write_bytes(compressed(buf.getvalue(), compress))
    return path


def compressed(raw: bytes, compress: str) -> bytes:
    if compress == "gzip":
        return gzip.compress(raw, mtime=0)
    if compress == "zstd":
        try:
            from compression import zstd
        except ImportError:
            from backports import zstd
        return bytes(zstd.compress(raw))
    return raw


def file(name: str, data: bytes) -> Member:
    info = tarfile.TarInfo(name)
    info.mode = 0o644
    return info, data


def link(name: str, target: str, hard: bool = False) -> Member:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname = target
    return info, None


def oci_archive(path: pathlib.Path, recipes: Sequence[images.ImageRecipe], compress: str = "") -> list[images.ImageInfo]:
    """An OCI image layout alone (no manifest.json)."""
    raw = path.with_suffix(".raw.tar")
    infos = images.build_archive(raw, recipes)
    entries = [(i, d) for i, d in members(raw) if i.name != "manifest.json"]
    raw.unlink()
    write_tar(path, entries, compress)
    return infos


def docker_archive(path: pathlib.Path, recipes: Sequence[images.ImageRecipe], compress: str = "",
                   duplicate_layer: bool = True) -> list[images.ImageInfo]:
    """docker save's classic format: uncompressed layers as <id>/layer.tar, the config as
    <digest>.json; each recipe single-platform. With duplicate_layer a second entry links to the
    first layer (docker writes a symlink for a layer two images share)."""
    raw = path.with_suffix(".raw.tar")
    infos = images.build_archive(raw, [r if not r.compress else _uncompressed(r) for r in recipes])
    blobs = {i.name: d for i, d in members(raw) if d is not None}
    raw.unlink()
    index = json.loads(blobs["index.json"])
    entries: list[Member] = []
    manifest_json = []
    repositories: dict[str, dict[str, str]] = {}
    seen: set[str] = set()
    for entry in index["manifests"]:
        if entry["digest"] in seen:
            continue
        seen.add(entry["digest"])
        manifest = json.loads(blobs["blobs/sha256/" + entry["digest"].split(":", 1)[1]])
        config_hex = manifest["config"]["digest"].split(":", 1)[1]
        layer_hex = manifest["layers"][0]["digest"].split(":", 1)[1]
        layer_dir = hashlib.sha256(f"{config_hex}{layer_hex}".encode()).hexdigest()
        entries += [file(f"{config_hex}.json", blobs[f"blobs/sha256/{config_hex}"]),
                    file(f"{layer_dir}/layer.tar", blobs[f"blobs/sha256/{layer_hex}"]),
                    file(f"{layer_dir}/VERSION", b"1.0"), file(f"{layer_dir}/json", b"{}")]
        layers = [f"{layer_dir}/layer.tar"]
        if duplicate_layer:
            entries.append(link(f"{layer_dir}-dup/layer.tar", f"../{layer_dir}/layer.tar"))
        refs = [e["annotations"][images.ANNOTATION_IMAGE_NAME] for e in index["manifests"]
                if e["digest"] == entry["digest"]]
        tags = [images.familiar_ref(r) for r in refs]
        manifest_json.append({"Config": f"{config_hex}.json", "RepoTags": tags, "Layers": layers})
        for tag in tags:
            repo, _, version = tag.rpartition(":")
            repositories.setdefault(repo, {})[version] = layer_dir
    entries += [file("manifest.json", json.dumps(manifest_json).encode()),
                file("repositories", json.dumps(repositories).encode())]
    write_tar(path, entries, compress)
    return infos


def _uncompressed(r: images.ImageRecipe) -> images.ImageRecipe:
    import dataclasses

    return dataclasses.replace(r, compress=False)


# -- the broken archives ----------------------------------------------------------------------


def _good(tmp: pathlib.Path) -> list[Member]:
    raw = tmp / "good.tar"
    oci_archive(raw, [images.recipe("example.test/corpus/good:1", seed="corpus")])
    found = members(raw)
    raw.unlink()
    return found


def _blob_names(entries: list[Member], kind: str) -> str:
    """The entry of the first blob of a kind: layer (a tar), manifest, config."""
    docs = {i.name: json.loads(d) for i, d in entries if d is not None and i.name.startswith("blobs/")
            and d[:1] == b"{"}
    manifest = next(doc for doc in docs.values() if "layers" in doc)
    digest = {"layer": manifest["layers"][0]["digest"], "config": manifest["config"]["digest"]}.get(kind)
    if kind == "manifest":
        return next(name for name, doc in docs.items() if "layers" in doc)
    assert digest is not None
    return "blobs/sha256/" + digest.split(":", 1)[1]


def _replace(entries: list[Member], name: str, data: bytes) -> list[Member]:
    return [(i, data if i.name == name else d) for i, d in entries]


def _traversal(entries: list[Member]) -> tuple[list[Member], str]:
    return entries + [file("../escape.txt", b"x")], "../escape.txt"


def _absolute(entries: list[Member]) -> tuple[list[Member], str]:
    return entries + [file("/etc/pinctl-escape", b"x")], "/etc/pinctl-escape"


def _symlink_escape(entries: list[Member]) -> tuple[list[Member], str]:
    return entries + [link("blobs/evil", "../../etc/shadow")], "blobs/evil"


def _hardlink_escape(entries: list[Member]) -> tuple[list[Member], str]:
    return entries + [link("blobs/evil", "../outside", hard=True)], "blobs/evil"


def _digest_mismatch(entries: list[Member]) -> tuple[list[Member], str]:
    name = _blob_names(entries, "layer")
    data = dict((i.name, d) for i, d in entries)[name]
    assert data is not None
    return _replace(entries, name, data[:-1] + bytes([data[-1] ^ 0xFF])), name


def _missing_blob(entries: list[Member]) -> tuple[list[Member], str]:
    name = _blob_names(entries, "layer")
    return [(i, d) for i, d in entries if i.name != name], "layers[0]"


def _device(entries: list[Member]) -> tuple[list[Member], str]:
    info = tarfile.TarInfo("blobs/null")
    info.type = tarfile.CHRTYPE
    info.devmajor, info.devminor = 1, 3
    return entries + [(info, None)], "blobs/null"


def _duplicate(entries: list[Member]) -> tuple[list[Member], str]:
    name = _blob_names(entries, "config")
    data = dict((i.name, d) for i, d in entries)[name]
    return entries + [file(name, data or b"")], name


def _bad_index(entries: list[Member]) -> tuple[list[Member], str]:
    return _replace(entries, "index.json", b"{not json"), "index.json"


def _no_layout(entries: list[Member]) -> tuple[list[Member], str]:
    return [(i, d) for i, d in entries if i.name not in ("index.json", "oci-layout")], ""


# Each: (file name, how to break a good archive, what the entry the refusal names is, how it is written).
Breaker = Callable[[list[Member]], tuple[list[Member], str]]
BROKEN: dict[str, Breaker] = {
    "traversal.tar": _traversal,
    "absolute.tar": _absolute,
    "symlink-escape.tar": _symlink_escape,
    "hardlink-escape.tar": _hardlink_escape,
    "digest-mismatch.tar": _digest_mismatch,
    "missing-blob.tar": _missing_blob,
    "device.tar": _device,
    "duplicate.tar": _duplicate,
    "bad-index.tar": _bad_index,
    "no-layout.tar": _no_layout,
}


def write_corpus(directory: pathlib.Path = CORPUS) -> dict[str, str]:
    """Write every broken archive; returns {file name: the entry its refusal names ('' for the archive)}."""
    directory.mkdir(parents=True, exist_ok=True)
    expected: dict[str, str] = {}
    good = _good(directory)
    for name, breaker in BROKEN.items():
        entries, entry = breaker([(_copy(i), d) for i, d in good])
        write_tar(directory / name, entries)
        expected[name] = entry
    whole = write_tar(directory / "good.tar", [(_copy(i), d) for i, d in good]).read_bytes()
    (directory / "good.tar").unlink()
    layer = _blob_names(good, "layer")
    # Cut inside the layer's data: the reader meets the end of the file within that entry.
    cut = whole.index(dict((i.name, d) for i, d in good)[layer] or b"") + 10
    (directory / "truncated.tar").write_bytes(whole[:cut])
    expected["truncated.tar"] = layer
    gz = gzip.compress(whole, mtime=0)
    (directory / "truncated-blob.tar.gz").write_bytes(gz[: len(gz) // 2])
    expected["truncated-blob.tar.gz"] = ""
    corrupt = bytearray(gz)
    corrupt[len(corrupt) // 2] ^= 0xFF
    (directory / "corrupt.tar.gz").write_bytes(bytes(corrupt))
    expected["corrupt.tar.gz"] = ""
    (directory / "garbage.tar").write_bytes(b"this is not a tar archive at all\n" * 40)
    expected["garbage.tar"] = ""
    expected.update(_docker_corpus(directory))
    (directory / "EXPECTED.json").write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")
    return expected


def _docker_corpus(directory: pathlib.Path) -> dict[str, str]:
    """docker save archives whose layer is not what the config says, or is not there."""
    good = directory / "docker-good.tar"
    docker_archive(good, [images.recipe("example.test/corpus/docker:1", seed="corpus-docker")],
                   duplicate_layer=False)
    entries = members(good)
    good.unlink()
    layer = next(i.name for i, _ in entries if i.name.endswith("/layer.tar"))
    data = dict((i.name, d) for i, d in entries)[layer] or b""
    write_tar(directory / "docker-diffid.tar", _replace(entries, layer, data[:-1] + b"\x01"))
    write_tar(directory / "docker-missing-layer.tar", [(i, d) for i, d in entries if i.name != layer])
    write_tar(directory / "docker-loop.tar", [(i, d) for i, d in entries if i.name != layer]
              + [link(layer, "other.tar"), link(layer.replace("layer.tar", "other.tar"), "layer.tar")])
    return {"docker-diffid.tar": layer, "docker-missing-layer.tar": "Layers[0]", "docker-loop.tar": layer}


def _copy(info: tarfile.TarInfo) -> tarfile.TarInfo:
    import copy

    return copy.copy(info)


if __name__ == "__main__":
    for name, entry in sorted(write_corpus().items()):
        print(f"{name}: {entry or '(the archive)'}")


# -- a large archive, made as a stream ----------------------------------------------------------


def _pattern_chunks(size: int, seed: bytes) -> "Iterable[bytes]":
    """size bytes of a repeating, non-zero pattern (a tmpfs stores it all: nothing sparse)."""
    block = (hashlib.sha256(seed).digest() * (1 << 15))[: 1 << 20]
    left = size
    while left:
        step = min(left, len(block))
        yield block[:step]
        left -= step


def _layer_chunks(size: int, seed: bytes) -> "Iterable[bytes]":
    """An uncompressed layer tar holding one file of size bytes."""
    info = tarfile.TarInfo("pinctl-big.bin")
    info.size, info.mode = size, 0o644
    yield info.tobuf(format=tarfile.USTAR_FORMAT)
    yield from _pattern_chunks(size, seed)
    yield b"\0" * ((512 - size % 512) % 512) + b"\0" * 1024


def _entry(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, 0o644
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _pad(size: int) -> bytes:
    return b"\0" * ((512 - size % 512) % 512)


def big_archive(path: pathlib.Path, ref: str, size: int) -> images.ImageInfo:
    """An OCI layout whose one uncompressed layer holds a file of size bytes, written as a stream
    (the layer is generated twice, once to hash it, so memory stays a few MiB whatever the size)."""
    seed = ref.encode()
    layer_hash = hashlib.sha256()
    layer_size = 0
    for chunk in _layer_chunks(size, seed):
        layer_hash.update(chunk)
        layer_size += len(chunk)
    layer_digest = "sha256:" + layer_hash.hexdigest()
    config = json.dumps({"architecture": images.host_platform().split("/")[1], "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": [layer_digest]}, "config": {}},
                        sort_keys=True, separators=(",", ":")).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": images.OCI_MANIFEST,
                           "config": {"mediaType": images.OCI_CONFIG, "digest": config_digest, "size": len(config)},
                           "layers": [{"mediaType": images.OCI_LAYER, "digest": layer_digest, "size": layer_size}]},
                          sort_keys=True, separators=(",", ":")).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    index = json.dumps({"schemaVersion": 2, "mediaType": images.OCI_INDEX, "manifests": [
        {"mediaType": images.OCI_MANIFEST, "digest": manifest_digest, "size": len(manifest),
         "annotations": {images.ANNOTATION_IMAGE_NAME: images.normalize_ref(ref)}}]}).encode()
    with open(path, "wb") as out:
        out.write(_entry("blobs/sha256/" + layer_digest.split(":")[1], layer_size))
        for chunk in _layer_chunks(size, seed):
            out.write(chunk)
        out.write(_pad(layer_size))
        for name, data in (("blobs/sha256/" + config_digest.split(":")[1], config),
                           ("blobs/sha256/" + manifest_digest.split(":")[1], manifest),
                           ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)):
            out.write(_entry(name, len(data)) + data + _pad(len(data)))
        out.write(b"\0" * 1024)
    return images.ImageInfo((images.normalize_ref(ref),), manifest_digest, images.OCI_MANIFEST, config_digest,
                            len(manifest) + len(config) + layer_size, (images.host_platform(),), (manifest_digest,), {})

"""Runnable images for real pods: busybox plus a payload of known size, as an OCI layout archive.

Images built by ``tests/harness/images.py`` hold no binaries; :func:`runnable_recipe` images
carry Debian's static busybox in one layer shared by all of them (so ``sleep``/``true`` run)
plus a payload layer of a chosen, incompressible size stored uncompressed, so each image's
size is known to the byte.

:class:`PodsUnavailable` is defined here, the lowest module that raises it (no static busybox),
so ``tests/harness/pods.py`` can use this module's images without an import cycle.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import pathlib
import random
import tarfile
import uuid
from typing import Optional

from tests.harness import cri, images
from tests.harness.containerd import ContainerdDaemon

BUSYBOX_PATHS = (pathlib.Path("/bin/busybox"), pathlib.Path("/usr/bin/busybox"))
FIXED_MTIME = 0
PT_INTERP = 3


class PodsUnavailable(RuntimeError):
    """Something this host lacks for running pods (runc, busybox, mount privileges)."""


# --- runnable images ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunnableRecipe:
    """An image a container can run: busybox plus ``payload_bytes`` of incompressible data."""

    refs: tuple[str, ...]
    seed: str
    payload_bytes: int = 4096
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    entrypoint: tuple[str, ...] = ("/bin/busybox", "sleep", "3600")


def runnable_recipe(
    *refs: str, seed: str = "", payload_bytes: int = 4096, labels: Optional[dict[str, str]] = None
) -> RunnableRecipe:
    """Shorthand like ``images.recipe``: refs are normalized, the seed defaults to the first ref."""
    normalized = tuple(images.normalize_ref(ref) for ref in refs)
    return RunnableRecipe(normalized, seed or normalized[0], payload_bytes, dict(labels or {}))


@dataclasses.dataclass(frozen=True)
class _Blob:
    media_type: str
    data: bytes

    @functools.cached_property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self, **extra: object) -> dict[str, object]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data), **extra}

    @property
    def path(self) -> str:
        return "blobs/sha256/" + self.digest.split(":", 1)[1]


def _tar(entries: list[tarfile.TarInfo], contents: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for entry in entries:
            entry.mtime = FIXED_MTIME
            data = contents.get(entry.name)
            tar.addfile(entry, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _entry(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    entry = tarfile.TarInfo(name)
    entry.type, entry.mode, entry.size, entry.linkname = kind, mode, size, link
    return entry


def busybox_path() -> pathlib.Path:
    for path in BUSYBOX_PATHS:
        if path.is_file() and _is_static_elf(path.read_bytes()):
            return path
    raise PodsUnavailable(
        "no static busybox: install Debian's busybox-static package (scripts/test-packages.txt lists it)"
    )


def _is_static_elf(data: bytes) -> bool:
    """A 64-bit little-endian ELF without a PT_INTERP program header needs no dynamic loader."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return False
    def number(start: int, width: int) -> int:
        return int.from_bytes(data[start : start + width], "little")

    phoff, phentsize, phnum = number(32, 8), number(54, 2), number(56, 2)
    types = (number(phoff + i * phentsize, 4) for i in range(phnum))
    return PT_INTERP not in types


@functools.lru_cache(maxsize=1)
def busybox_layer() -> bytes:
    """One uncompressed layer: /bin/busybox and the applets the harness runs, as symlinks."""
    binary = busybox_path().read_bytes()
    entries = [_entry("bin", tarfile.DIRTYPE, 0o755), _entry("bin/busybox", tarfile.REGTYPE, 0o755, len(binary))]
    entries += [_entry(f"bin/{name}", tarfile.SYMTYPE, 0o777, link="busybox") for name in ("sh", "sleep", "true")]
    entries += [_entry(name, tarfile.DIRTYPE, 0o755) for name in ("etc", "tmp", "proc", "sys", "dev")]
    return _tar(entries, {"bin/busybox": binary})


def _payload_layer(seed: str, size: int) -> bytes:
    data = random.Random(hashlib.sha256(seed.encode()).digest()).randbytes(size)
    return _tar([_entry("payload.bin", tarfile.REGTYPE, 0o644, size)], {"payload.bin": data})


def _build_runnable(recipe: RunnableRecipe) -> tuple[images.ImageInfo, list[_Blob], _Blob]:
    payload = _payload_layer(recipe.seed, recipe.payload_bytes)
    layers = [_Blob(images.OCI_LAYER, busybox_layer()), _Blob(images.OCI_LAYER, payload)]
    platform = images.host_platform().split("/")
    config_doc = {
        "os": platform[0],
        "architecture": platform[1],
        "created": images.CREATED,
        "config": {"Entrypoint": list(recipe.entrypoint), "Labels": recipe.labels},
        "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]},
    }
    config = _Blob(images.OCI_CONFIG, _canonical(config_doc))
    manifest_doc = {
        "schemaVersion": 2,
        "mediaType": images.OCI_MANIFEST,
        "config": config.descriptor(),
        "layers": [layer.descriptor() for layer in layers],
    }
    manifest = _Blob(images.OCI_MANIFEST, _canonical(manifest_doc))
    blobs = [manifest, config, *layers]
    info = images.ImageInfo(
        refs=recipe.refs,
        digest=manifest.digest,
        media_type=images.OCI_MANIFEST,
        config_digest=config.digest,
        size=sum(len(blob.data) for blob in blobs),
        platforms=(images.host_platform(),),
        manifest_digests=(manifest.digest,),
        labels=dict(recipe.labels),
    )
    return info, blobs, manifest


def _canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def build_runnable_archive(path: pathlib.Path, recipes: list[RunnableRecipe]) -> list[images.ImageInfo]:
    """An OCI layout tarball holding every recipe's image, one index entry per ref."""
    built = [_build_runnable(recipe) for recipe in recipes]
    index_entries = [
        manifest.descriptor(annotations={images.ANNOTATION_IMAGE_NAME: ref})
        for info, _, manifest in built
        for ref in info.refs
    ]
    index = {"schemaVersion": 2, "mediaType": images.OCI_INDEX, "manifests": index_entries}
    written: set[str] = set()
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for blob in (blob for _, blobs, _ in built for blob in blobs):
            if blob.digest not in written:
                written.add(blob.digest)
                _add_file(tar, blob.path, blob.data)
        _add_file(tar, "oci-layout", _canonical({"imageLayoutVersion": "1.0.0"}))
        _add_file(tar, "index.json", _canonical(index))
    return [info for info, _, _ in built]


def _add_file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size, member.mode = len(data), 0o644
    tar.addfile(member, io.BytesIO(data))


def load_runnable(
    daemon: ContainerdDaemon, work_dir: pathlib.Path, recipes: list[RunnableRecipe]
) -> list[images.ImageInfo]:
    """Build, import unpacked into ``k8s.io`` (containers start without unpacking), wait for the CRI."""
    work_dir.mkdir(parents=True, exist_ok=True)
    tar_path = work_dir / f"runnable-{uuid.uuid4().hex[:8]}.tar"
    infos = build_runnable_archive(tar_path, recipes)
    try:
        images.import_images(daemon, tar_path, cri.NAMESPACE, unpack=True, wait=False)
    finally:
        tar_path.unlink()
    images.wait_for_cri(daemon, infos)
    return infos


SANDBOX_SEED = "pinctl-runnable-sandbox-image"
# What a pause process does: wait, and exit at once on SIGTERM or SIGINT. A bare ``sleep`` as PID 1
# ignores SIGTERM, so cri-dockerd, which stops a sandbox with SIGTERM and a 10 s grace, waited the
# whole grace for every pod (containerd and CRI-O kill a sandbox outright).
PAUSE_ENTRYPOINT = ("/bin/busybox", "sh", "-c", "trap 'exit 0' TERM INT; sleep 86400 & wait")


def sandbox_recipe(ref: str) -> RunnableRecipe:
    """The runnable sandbox (pause) image under ``ref``: one content everywhere, by SANDBOX_SEED."""
    return RunnableRecipe((ref,), SANDBOX_SEED, 64, {}, PAUSE_ENTRYPOINT)


def ensure_runnable_sandbox_image(daemon: ContainerdDaemon) -> images.ImageInfo:
    """Import the configured sandbox (pause) image, built to run: every pod starts it first.

    ``images.ensure_sandbox_image`` builds one without a binary, which the CRI refuses to run
    ("invalid empty entrypoint and cmd"); this one waits, as a pause process does.
    """
    recipe = sandbox_recipe(daemon.sandbox_image)
    (info,) = load_runnable(daemon, daemon.base_dir / "sandbox-image", [recipe])
    return info

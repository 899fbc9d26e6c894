"""Small, deterministic OCI images built in pure Python.

An archive is an OCI image layout (``oci-layout``, ``index.json``,
``blobs/sha256/*``) plus a docker ``manifest.json`` for the single-platform
images. containerd's importer prefers the OCI layout when ``oci-layout`` is
present; docker's classic loader reads ``manifest.json``. Every ref gets its
own ``index.json`` entry annotated with ``io.containerd.image.name`` (the full
ref, which ``ctr images import`` uses verbatim) and
``org.opencontainers.image.ref.name`` (the tag, as docker writes it).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import pathlib
import platform as host
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from pinctl import refs
from tests.harness import cri

if TYPE_CHECKING:
    from tests.harness.containerd import ContainerdDaemon

CRI_NAMESPACE = cri.NAMESPACE

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"

ANNOTATION_IMAGE_NAME = "io.containerd.image.name"
ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"
# A fixed timestamp keeps digests stable across runs.
CREATED = "2024-01-01T00:00:00Z"

_ARCH_ALIASES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}


def host_platform() -> str:
    """The platform containerd matches by default here, as ``os/arch``."""
    machine = host.machine()
    return f"linux/{_ARCH_ALIASES.get(machine, machine)}"


def normalize_ref(ref: str) -> str:
    """Fully qualify a ref the way pinctl and the Docker CLI do (short names get the default registry)."""
    return refs.normalize(ref)


def familiar_ref(ref: str) -> str:
    """The short form ``docker save`` writes into ``manifest.json`` RepoTags."""
    for prefix in (f"{refs.DEFAULT_DOMAIN}/{refs.OFFICIAL_PREFIX}", f"{refs.DEFAULT_DOMAIN}/"):
        if ref.startswith(prefix):
            return ref[len(prefix) :]
    return ref


@dataclasses.dataclass(frozen=True)
class ImageRecipe:
    """What to build: refs share one manifest (or one index if several platforms)."""

    refs: tuple[str, ...]
    seed: str = ""
    platforms: tuple[str, ...] = ()
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    layer_bytes: int = 64
    compress: bool = True
    docker_media_types: bool = False
    force_index: bool = False

    @property
    def effective_seed(self) -> str:
        return self.seed or (self.refs[0] if self.refs else "anonymous")

    @property
    def effective_platforms(self) -> tuple[str, ...]:
        return self.platforms or (host_platform(),)

    @property
    def is_index(self) -> bool:
        return self.force_index or len(self.effective_platforms) > 1


def recipe(
    *refs: str,
    seed: str = "",
    platforms: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
    layer_bytes: int = 64,
    compress: bool = True,
    docker_media_types: bool = False,
    force_index: bool = False,
) -> ImageRecipe:
    """Shorthand: ``recipe("alpha:1.0", "alpha:latest", seed="a")``; refs are normalized."""
    return ImageRecipe(
        refs=tuple(normalize_ref(r) for r in refs),
        seed=seed,
        platforms=tuple(platforms),
        labels=dict(labels or {}),
        layer_bytes=layer_bytes,
        compress=compress,
        docker_media_types=docker_media_types,
        force_index=force_index,
    )


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    """What was built, as containerd and the CRI will report it."""

    refs: tuple[str, ...]
    # The target: the manifest, or the index for a multi-platform image.
    digest: str
    media_type: str
    # The host platform's config digest, which the CRI reports as the image id.
    config_digest: str
    # containerd's (and the CRI's) size: target + host manifest + config + layers,
    # compressed. Docker reports the uncompressed layer size instead.
    size: int
    platforms: tuple[str, ...]
    # One per platform, in ``platforms`` order (the target itself when single-platform).
    manifest_digests: tuple[str, ...]
    labels: Mapping[str, str]

    @property
    def image_id(self) -> str:
        """The id the CRI reports: the host platform's config digest."""
        return self.config_digest


@dataclasses.dataclass(frozen=True)
class _Blob:
    media_type: str
    data: bytes
    digest: str

    @classmethod
    def of(cls, media_type: str, data: bytes) -> _Blob:
        return cls(media_type, data, "sha256:" + hashlib.sha256(data).hexdigest())

    def descriptor(self, **extra: object) -> dict[str, object]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data), **extra}


@dataclasses.dataclass
class _Built:
    info: ImageInfo
    target: _Blob
    blobs: list[_Blob]
    # (config path, layer paths) for manifest.json; None for an index.
    docker_entry: tuple[str, list[str]] | None


def _canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _layer_tar(seed: str, size: int) -> bytes:
    """A one-file tar whose content is derived from the seed."""
    pad = hashlib.sha256(seed.encode()).hexdigest().encode()
    content = (seed.encode() + b"\n" + pad * (size // len(pad) + 1))[: max(size, len(seed) + 1)]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        member = tarfile.TarInfo("pinctl-seed.txt")
        member.size = len(content)
        member.mode = 0o644
        tar.addfile(member, io.BytesIO(content))
    return buf.getvalue()


def _platform_dict(plat: str) -> dict[str, str]:
    parts = plat.split("/")
    result = {"os": parts[0], "architecture": parts[1]}
    if len(parts) > 2:
        result["variant"] = parts[2]
    return result


def _build_manifest(r: ImageRecipe, plat: str) -> tuple[_Blob, list[_Blob]]:
    """One platform's manifest; returns (manifest, [config, layer])."""
    docker = r.docker_media_types
    raw = _layer_tar(f"{r.effective_seed}|{plat}", r.layer_bytes)
    diff_id = "sha256:" + hashlib.sha256(raw).hexdigest()
    if r.compress:
        layer = _Blob.of(DOCKER_LAYER_GZIP if docker else OCI_LAYER_GZIP, gzip.compress(raw, mtime=0))
    else:
        layer = _Blob.of(DOCKER_LAYER if docker else OCI_LAYER, raw)
    config_doc: dict[str, object] = {
        **_platform_dict(plat),
        "created": CREATED,
        "config": {"Labels": dict(r.labels)} if r.labels else {},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": CREATED, "created_by": "pinctl test harness"}],
    }
    config = _Blob.of(DOCKER_CONFIG if docker else OCI_CONFIG, _canonical_json(config_doc))
    manifest_doc = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST if docker else OCI_MANIFEST,
        "config": config.descriptor(),
        "layers": [layer.descriptor()],
    }
    manifest = _Blob.of(str(manifest_doc["mediaType"]), _canonical_json(manifest_doc))
    return manifest, [config, layer]


def _build(r: ImageRecipe) -> _Built:
    plats = r.effective_platforms
    per_platform = [_build_manifest(r, p) for p in plats]
    blobs = [b for m, parts in per_platform for b in (m, *parts)]
    host_index = plats.index(host_platform()) if host_platform() in plats else 0
    host_manifest, (host_config, host_layer) = per_platform[host_index]
    host_size = len(host_manifest.data) + len(host_config.data) + len(host_layer.data)
    if r.is_index:
        target = _index_blob(r, plats, [m for m, _ in per_platform])
        blobs.append(target)
        size = host_size + len(target.data)
        docker_entry = None
    else:
        target, size = host_manifest, host_size
        docker_entry = (_blob_path(host_config), [_blob_path(host_layer)])
    info = ImageInfo(
        refs=r.refs,
        digest=target.digest,
        media_type=target.media_type,
        config_digest=host_config.digest,
        size=size,
        platforms=plats,
        manifest_digests=tuple(m.digest for m, _ in per_platform),
        labels=dict(r.labels),
    )
    return _Built(info, target, blobs, docker_entry)


def _index_blob(r: ImageRecipe, plats: Sequence[str], manifests: Sequence[_Blob]) -> _Blob:
    media_type = DOCKER_LIST if r.docker_media_types else OCI_INDEX
    doc = {
        "schemaVersion": 2,
        "mediaType": media_type,
        "manifests": [m.descriptor(platform=_platform_dict(p)) for p, m in zip(plats, manifests)],
    }
    return _Blob.of(media_type, _canonical_json(doc))


def _blob_path(blob: _Blob) -> str:
    return "blobs/sha256/" + blob.digest.split(":", 1)[1]


def _index_entries(built: _Built) -> list[dict[str, object]]:
    entries = []
    for ref in built.info.refs:
        annotations = {ANNOTATION_IMAGE_NAME: ref}
        tail = ref.rsplit("/", 1)[-1]
        if ":" in tail and "@" not in tail:
            annotations[ANNOTATION_REF_NAME] = tail.rsplit(":", 1)[1]
        entries.append(built.target.descriptor(annotations=annotations))
    return entries


def _docker_manifest(built: Sequence[_Built]) -> list[dict[str, object]]:
    result: list[dict[str, object]] = []
    for b in built:
        if b.docker_entry is None:
            continue
        tags = [familiar_ref(ref) for ref in b.info.refs if "@" not in ref]
        config_path, layer_paths = b.docker_entry
        result.append({"Config": config_path, "RepoTags": tags, "Layers": layer_paths})
    return result


def _add_file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(data)
    member.mode = 0o644
    tar.addfile(member, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    member = tarfile.TarInfo(name)
    member.type = tarfile.DIRTYPE
    member.mode = 0o755
    tar.addfile(member)


def build_archive(path: pathlib.Path, recipes: Iterable[ImageRecipe]) -> list[ImageInfo]:
    """Write one tarball holding every recipe's image; returns their descriptions."""
    built = [_build(r) for r in recipes]
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
    index["manifests"] = [e for b in built for e in _index_entries(b)]
    seen: set[str] = set()
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        _add_dir(tar, "blobs")
        _add_dir(tar, "blobs/sha256")
        for blob in (blob for b in built for blob in (*b.blobs, b.target)):
            if blob.digest not in seen:
                seen.add(blob.digest)
                _add_file(tar, _blob_path(blob), blob.data)
        _add_file(tar, "oci-layout", _canonical_json({"imageLayoutVersion": "1.0.0"}))
        _add_file(tar, "index.json", _canonical_json(index))
        _add_file(tar, "manifest.json", _canonical_json(_docker_manifest(built)))
    return [b.info for b in built]


SANDBOX_SEED = "pinctl-sandbox-image"


def ensure_sandbox_image(daemon: ContainerdDaemon) -> ImageInfo:
    """Import the daemon's configured sandbox (pause) image, built locally, into ``k8s.io``.

    Nothing can be pulled here, so the ref the CRI config names is faked with
    a small image; the CRI treats it like the real pause image (1.7 pins it).
    """
    tar_path = daemon.base_dir / "sandbox-image.tar"
    (info,) = build_archive(tar_path, [recipe(daemon.sandbox_image, seed=SANDBOX_SEED)])
    import_images(daemon, tar_path, CRI_NAMESPACE)
    return info


def numbered_recipes(count: int, prefix: str = "example.test/bench", compress: bool = True) -> list[ImageRecipe]:
    """``count`` distinct images ``<prefix>-<i>:1.0`` (for benchmarks)."""
    return [recipe(f"{prefix}-{i}:1.0", seed=f"{prefix}-{i}", compress=compress) for i in range(count)]


def archive_refs(tar_path: pathlib.Path) -> list[str]:
    """The refs an archive's ``index.json`` names (what ``ctr images import`` creates)."""
    with tarfile.open(tar_path) as tar:
        handle = tar.extractfile("index.json")
        if handle is None:
            raise ValueError(f"{tar_path} has no index.json")
        index = json.load(handle)
    names = (m.get("annotations", {}).get(ANNOTATION_IMAGE_NAME) for m in index["manifests"])
    return [name for name in names if name]


def import_images(
    daemon: ContainerdDaemon,
    tar_path: pathlib.Path,
    namespace: str = CRI_NAMESPACE,
    *,
    unpack: bool = False,
    wait: bool = True,
) -> None:
    """``ctr images import --all-platforms`` into ``namespace``.

    Unpacking is off by default: neither containerd nor the CRI's image list
    needs snapshots, and skipping it keeps 1,000-image imports fast. In
    ``k8s.io`` this waits until the CRI lists every ref, because the CRI
    adopts imported images asynchronously (adds ``io.cri-containerd.image=managed``
    and a ``sha256:<config digest>`` ref) and tests must not race that.
    """
    args = ["images", "import", "--all-platforms"]
    args += ["--snapshotter", "native"] if unpack else ["--no-unpack"]
    if unpack and daemon.config_version >= 3:
        # ctr 2.x imports through the transfer service, which unpacks no platform when given
        # --all-platforms ("no unpack platforms defined"); its local import still does.
        args.append("--local")
    daemon.ctr(*args, str(tar_path), namespace=namespace, timeout=600)
    if wait and namespace == CRI_NAMESPACE:
        cri.wait_for_refs(daemon.address, archive_refs(tar_path))


def load_images(
    daemon: ContainerdDaemon,
    work_dir: pathlib.Path,
    recipes: Iterable[ImageRecipe],
    namespace: str = CRI_NAMESPACE,
    *,
    unpack: bool = False,
    wait: bool = True,
) -> list[ImageInfo]:
    """Build an archive in ``work_dir`` and import it; returns the image descriptions."""
    work_dir.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix="images-", suffix=".tar", dir=work_dir)
    os.close(handle)
    tar_path = pathlib.Path(name)
    infos = build_archive(tar_path, recipes)
    import_images(daemon, tar_path, namespace, unpack=unpack, wait=False)
    tar_path.unlink()
    if wait and namespace == CRI_NAMESPACE:
        wait_for_cri(daemon, infos)
    return infos


def wait_for_cri(daemon: ContainerdDaemon, infos: Iterable[ImageInfo], timeout: float = 60.0) -> None:
    """Wait until the CRI maps every ref to its expected image id.

    Stronger than waiting for the refs to appear: a re-imported ref that
    moved to a new image would otherwise match its stale entry at once.
    """
    wanted = {ref: info.image_id for info in infos for ref in info.refs}

    def settled(listed: list[cri.CriImage]) -> bool:
        tags = cri.by_tag(listed)
        return all(ref in tags and tags[ref].id == image_id for ref, image_id in wanted.items())

    cri.wait_for(daemon.address, settled, timeout)

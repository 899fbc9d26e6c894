"""From what the archive held to what to import: the images it names, their manifests for the
platforms asked for, and what containerd needs to keep them (its GC reference labels, the
layers' chain IDs for unpacking). Pure: documents are read through the callables given.

Two layouts, as `ctr images import` and `docker load` read them:

- an OCI image layout (oci-layout, index.json, blobs/<alg>/<hex>): each index.json entry is an
  image, named by its io.containerd.image.name annotation (else a full reference in
  org.opencontainers.image.ref.name); preferred when both are there, as containerd does;
- docker save's manifest.json: each entry a config and layer files, named by its RepoTags.
  pinctl writes the image manifest it implies (Docker's schema 2, or OCI's with zstd layers).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from pinctl import refs
from pinctl.backends import oci
from pinctl.errors import UsageError
from pinctl.imports.archive import GZIP_MAGIC, ZSTD_MAGIC, Archive, ArchiveRefused, Blob

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
NAME_ANNOTATION = "io.containerd.image.name"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
# containerd's GC follows these labels from an image's target down to its blobs and snapshots.
GC_CONTENT = "containerd.io/gc.ref.content"
GC_SNAPSHOT = "containerd.io/gc.ref.snapshot"
UNCOMPRESSED = "containerd.io/uncompressed"
MAX_DEPTH = 4

ReadDocument = Callable[[str, int], Optional[bytes]]
Present = Callable[[str, int], bool]


@dataclass(frozen=True)
class Platform:
    os: str
    architecture: str
    variant: str = ""

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


@dataclass(frozen=True)
class Platforms:
    """Which manifests of an index to import: the host's (the default), those named, or all."""

    wanted: tuple[Platform, ...] = ()
    everything: bool = False

    def matches(self, platform: Optional[Platform]) -> bool:
        if self.everything or platform is None:
            return True
        wanted = self.wanted or (host(),)
        return any(_platform_matches(w, platform) for w in wanted)


def host() -> Platform:
    return Platform(*oci.host_platform())


def parse_platform(text: str) -> Platform:
    """os/arch[/variant], as ctr's --platform takes it."""
    parts = text.strip().lower().split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise UsageError(f"malformed platform {text!r}", "give os/arch or os/arch/variant, like linux/amd64")
    return Platform(*parts)


def _platform_matches(want: Platform, have: Platform) -> bool:
    if (want.os, want.architecture) != (have.os, have.architecture):
        return False
    # An unstated variant is the architecture's default (arm64 is v8), as containerd normalises it.
    return not want.variant or not have.variant or want.variant == have.variant


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int

    def as_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass
class Manifest:
    """One image manifest to import: its config, its layers and their uncompressed digests."""

    descriptor: Descriptor
    config: Descriptor
    layers: list[Descriptor]
    diff_ids: list[str]
    platform: Optional[Platform]

    def chain_ids(self) -> list[str]:
        """The snapshot names of the layer chain, bottom first, as containerd computes them."""
        chain: list[str] = []
        for diff_id in self.diff_ids:
            chain.append(diff_id if not chain else
                         "sha256:" + hashlib.sha256(f"{chain[-1]} {diff_id}".encode()).hexdigest())
        return chain


@dataclass
class Image:
    """A target to import and the names to give it."""

    names: list[str]
    target: Descriptor
    manifests: list[Manifest]
    # An index's platforms, as listed (also those not imported).
    listed_platforms: list[str] = field(default_factory=list)

    @property
    def platforms(self) -> list[str]:
        return [str(m.platform) for m in self.manifests if m.platform is not None]


@dataclass
class Plan:
    """Everything to write beside the archive's blobs, and the images to create."""

    images: list[Image] = field(default_factory=list)
    # Documents pinctl made (docker save's manifests), by digest.
    generated: dict[str, bytes] = field(default_factory=dict)
    # containerd's GC labels for each blob that references others.
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    # Index entries or manifest.json entries that name no image: why, each.
    unnamed: list[str] = field(default_factory=list)


def plan_import(archive: Archive, read: ReadDocument, present: Present, platforms: Platforms) -> Plan:
    """The images an archive names and what importing them takes; ArchiveRefused when the
    archive does not hold what its index or manifests name."""
    planner = _Planner(archive, read, present, platforms)
    if "index.json" in archive.metadata and "oci-layout" in archive.metadata:
        planner.oci_layout()
    elif "manifest.json" in archive.metadata:
        planner.docker_save()
    else:
        raise ArchiveRefused(archive.name, "", "is neither an OCI image layout (oci-layout, index.json) nor a "
                                               "docker save archive (manifest.json)")
    return planner.plan


class _Planner:
    def __init__(self, archive: Archive, read: ReadDocument, present: Present, platforms: Platforms) -> None:
        self.archive = archive
        self.read = read
        self.present = present
        self.platforms = platforms
        self.plan = Plan()

    def refuse(self, entry: str, why: str) -> ArchiveRefused:
        return ArchiveRefused(self.archive.name, entry, why)

    def metadata(self, name: str) -> Any:
        try:
            return json.loads(self.archive.metadata[name])
        except ValueError as err:
            raise self.refuse(name, f"is not valid JSON: {err}") from None

    # -- OCI image layout --------------------------------------------------------------

    def oci_layout(self) -> None:
        layout = self.metadata("oci-layout")
        if not isinstance(layout, dict) or layout.get("imageLayoutVersion") != "1.0.0":
            raise self.refuse("oci-layout", "is not an OCI image layout of version 1.0.0")
        index = self.metadata("index.json")
        entries = index.get("manifests") if isinstance(index, dict) else None
        if not isinstance(entries, list):
            raise self.refuse("index.json", "has no list of manifests")
        images: dict[str, Image] = {}
        for number, entry in enumerate(entries):
            where = f"index.json manifests[{number}]"
            descriptor = self.descriptor(entry, where)
            name = self.image_name(entry, where)
            if name is None:
                continue
            image = images.get(descriptor.digest)
            if image is None:
                image = images[descriptor.digest] = self.walk_target(descriptor, where)
            if name not in image.names:
                image.names.append(name)
        self.plan.images.extend(images.values())

    def image_name(self, entry: dict[str, Any], where: str) -> Optional[str]:
        annotations = entry.get("annotations") or {}
        if not isinstance(annotations, dict):
            raise self.refuse(where, "has annotations that are not an object")
        name = annotations.get(NAME_ANNOTATION)
        ref_name = annotations.get(REF_NAME_ANNOTATION)
        if not name and isinstance(ref_name, str) and ("/" in ref_name or ":" in ref_name):
            name = ref_name
        if not isinstance(name, str) or not name:
            self.plan.unnamed.append(f"{self.archive.name}: {where} names no image ({NAME_ANNOTATION} or a full "
                                     f"{REF_NAME_ANNOTATION}): not imported")
            return None
        return self.reference(name, where)

    def reference(self, name: str, where: str) -> str:
        try:
            return refs.normalize(name)
        except UsageError as err:
            raise self.refuse(where, f"names {name!r}, which is not an image reference ({err.message})") from None

    def walk_target(self, descriptor: Descriptor, where: str) -> Image:
        image = Image([], descriptor, [])
        self.walk(descriptor, None, image, where, 0)
        if not image.manifests:
            wanted = ", ".join(str(p) for p in self.platforms.wanted) or f"this node's platform ({host()})"
            raise self.refuse(where, f"has no manifest for {wanted}; listed: "
                                     f"{', '.join(image.listed_platforms) or 'none'} (--all-platforms or --platform)")
        return image

    def walk(self, descriptor: Descriptor, platform: Optional[Platform], image: Image, where: str,
             depth: int) -> None:
        if depth > MAX_DEPTH:
            raise self.refuse(where, f"nests indexes more than {MAX_DEPTH} deep")
        if descriptor.media_type in INDEX_TYPES:
            self.walk_index(descriptor, image, where, depth)
        elif descriptor.media_type in MANIFEST_TYPES:
            image.manifests.append(self.manifest(descriptor, platform, where))
        else:
            raise self.refuse(where, f"names {descriptor.digest} of media type {descriptor.media_type!r}, which is "
                                     "neither an image index nor an image manifest")

    def walk_index(self, descriptor: Descriptor, image: Image, where: str, depth: int) -> None:
        document = self.document(descriptor, where)
        children = document.get("manifests")
        if not isinstance(children, list):
            raise self.refuse(where, f"index {descriptor.digest} has no list of manifests")
        labels = self.plan.labels.setdefault(descriptor.digest, {})
        for number, child in enumerate(children):
            child_where = f"{where} -> {descriptor.digest} manifests[{number}]"
            child_descriptor = self.descriptor(child, child_where)
            platform = _platform_of(child.get("platform"))
            if depth == 0 and platform is not None:
                image.listed_platforms.append(str(platform))
            if not self.platforms.matches(platform):
                continue
            labels[f"{GC_CONTENT}.m.{number}"] = child_descriptor.digest
            self.walk(child_descriptor, platform, image, child_where, depth + 1)

    def manifest(self, descriptor: Descriptor, platform: Optional[Platform], where: str) -> Manifest:
        document = self.document(descriptor, where)
        config = self.descriptor(document.get("config"), f"{where} config")
        layers_raw = document.get("layers")
        if not isinstance(layers_raw, list):
            raise self.refuse(where, f"manifest {descriptor.digest} has no list of layers")
        layers = [self.descriptor(layer, f"{where} layers[{i}]") for i, layer in enumerate(layers_raw)]
        labels = self.plan.labels.setdefault(descriptor.digest, {})
        labels[f"{GC_CONTENT}.config"] = config.digest
        for i, layer in enumerate(layers):
            labels[f"{GC_CONTENT}.l.{i}"] = layer.digest
            self.require(layer, f"{where} layers[{i}]")
        config_doc = self.document(config, f"{where} config")
        diff_ids = _diff_ids(config_doc)
        if diff_ids is not None and len(diff_ids) != len(layers):
            raise self.refuse(where, f"manifest {descriptor.digest} lists {len(layers)} layers and its config "
                                     f"{len(diff_ids)} diff_ids")
        return Manifest(descriptor, config, layers, diff_ids or [], platform or _config_platform(config_doc))

    def require(self, descriptor: Descriptor, where: str) -> None:
        """A blob the image needs: in the archive with the size the descriptor says, or stored already."""
        blob = self.archive.by_digest.get(descriptor.digest)
        if blob is not None:
            if blob.size != descriptor.size:
                raise self.refuse(blob.entry, f"is {blob.size} bytes; {where} says {descriptor.size}")
            return
        if descriptor.digest in self.plan.generated or self.present(descriptor.digest, descriptor.size):
            return
        raise self.refuse(where, f"names blob {descriptor.digest}, which the archive does not hold")

    def document(self, descriptor: Descriptor, where: str) -> dict[str, Any]:
        self.require(descriptor, where)
        raw = self.plan.generated.get(descriptor.digest) or self.archive.documents.get(descriptor.digest)
        if raw is None:
            raw = self.read(descriptor.digest, descriptor.size)
        if raw is None:
            raise self.refuse(where, f"names {descriptor.digest} ({descriptor.size} bytes), which is too large "
                                     "for an image document")
        try:
            document = json.loads(raw)
        except ValueError as err:
            raise self.refuse(where, f"{descriptor.digest} is not valid JSON: {err}") from None
        if not isinstance(document, dict):
            raise self.refuse(where, f"{descriptor.digest} is not a JSON object")
        return document

    def descriptor(self, raw: Any, where: str) -> Descriptor:
        if not isinstance(raw, dict):
            raise self.refuse(where, "is not a descriptor (an object with mediaType, digest and size)")
        media_type, digest, size = raw.get("mediaType"), raw.get("digest"), raw.get("size")
        if not isinstance(media_type, str) or not isinstance(digest, str) or not _is_digest(digest):
            raise self.refuse(where, "has no valid mediaType and digest")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise self.refuse(where, f"gives {digest} no valid size")
        return Descriptor(media_type, digest, size)

    # -- docker save ---------------------------------------------------------------------

    def docker_save(self) -> None:
        entries = self.metadata("manifest.json")
        if not isinstance(entries, list):
            raise self.refuse("manifest.json", "is not a list of images")
        for number, entry in enumerate(entries):
            where = f"manifest.json [{number}]"
            if not isinstance(entry, dict):
                raise self.refuse(where, "is not an object")
            tags = entry.get("RepoTags") or []
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                raise self.refuse(where, "has RepoTags that are not a list of names")
            image = self.docker_image(entry, where)
            names = list(dict.fromkeys(self.reference(tag, where) for tag in tags))
            if not names:
                self.plan.unnamed.append(f"{self.archive.name}: {where} has no RepoTags: not imported")
                continue
            image.names = names
            self.plan.images.append(image)

    def docker_file(self, path: Any, where: str) -> Blob:
        if not isinstance(path, str):
            raise self.refuse(where, "names no file")
        blob = self.archive.blob_at(path)
        if blob is None:
            raise self.refuse(where, f"names {path}, which the archive does not hold")
        return blob

    def docker_image(self, entry: dict[str, Any], where: str) -> Image:
        config_blob = self.docker_file(entry.get("Config"), f"{where} Config")
        layer_paths = entry.get("Layers")
        if not isinstance(layer_paths, list):
            raise self.refuse(where, "has no list of Layers")
        layer_blobs = [self.docker_file(path, f"{where} Layers[{i}]") for i, path in enumerate(layer_paths)]
        zstd = any(blob.head.startswith(ZSTD_MAGIC) for blob in layer_blobs)
        config = Descriptor(OCI_CONFIG if zstd else DOCKER_CONFIG, config_blob.digest, config_blob.size)
        config_doc = self.document(config, f"{where} Config")
        diff_ids = _diff_ids(config_doc) or []
        if len(diff_ids) != len(layer_blobs):
            raise self.refuse(config_blob.entry, f"lists {len(diff_ids)} diff_ids for {len(layer_blobs)} layers")
        layers = []
        for i, (blob, diff_id) in enumerate(zip(layer_blobs, diff_ids)):
            media_type = _layer_type(blob.head, zstd)
            if media_type in (DOCKER_LAYER, OCI_LAYER) and blob.digest != diff_id:
                raise self.refuse(blob.entry, f"does not match layer {i}'s diff_id in the config ({diff_id}); it "
                                              f"hashes to {blob.digest}")
            layers.append(Descriptor(media_type, blob.digest, blob.size))
        document = {"schemaVersion": 2, "mediaType": OCI_MANIFEST if zstd else DOCKER_MANIFEST,
                    "config": config.as_json(), "layers": [layer.as_json() for layer in layers]}
        raw = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
        descriptor = Descriptor(str(document["mediaType"]), "sha256:" + hashlib.sha256(raw).hexdigest(), len(raw))
        self.plan.generated[descriptor.digest] = raw
        labels = self.plan.labels.setdefault(descriptor.digest, {f"{GC_CONTENT}.config": config.digest})
        labels.update({f"{GC_CONTENT}.l.{i}": layer.digest for i, layer in enumerate(layers)})
        manifest = Manifest(descriptor, config, layers, diff_ids, _config_platform(config_doc))
        return Image([], descriptor, [manifest])


def _layer_type(head: bytes, oci_types: bool) -> str:
    if head.startswith(ZSTD_MAGIC):
        return OCI_LAYER_ZSTD
    if head.startswith(GZIP_MAGIC):
        return OCI_LAYER_GZIP if oci_types else DOCKER_LAYER_GZIP
    return OCI_LAYER if oci_types else DOCKER_LAYER


def _diff_ids(config: dict[str, Any]) -> Optional[list[str]]:
    rootfs = config.get("rootfs")
    if not isinstance(rootfs, dict):
        return None
    diff_ids = rootfs.get("diff_ids")
    if not isinstance(diff_ids, list) or not all(isinstance(d, str) and _is_digest(d) for d in diff_ids):
        return None
    return list(diff_ids)


def _platform_of(raw: Any) -> Optional[Platform]:
    if not isinstance(raw, dict):
        return None
    os_name, arch, variant = raw.get("os"), raw.get("architecture"), raw.get("variant") or ""
    if not isinstance(os_name, str) or not isinstance(arch, str) or not isinstance(variant, str):
        return None
    return Platform(os_name, arch, variant)


def _config_platform(config: dict[str, Any]) -> Optional[Platform]:
    return _platform_of(config) if "architecture" in config else None


def _is_digest(text: str) -> bool:
    algorithm, _, hexdigest = text.partition(":")
    return algorithm in ("sha256", "sha512") and len(hexdigest) in (64, 128) and all(
        c in "0123456789abcdef" for c in hexdigest)


def unpack_manifest(image: Image, platform: Optional[Platform] = None) -> Optional[Manifest]:
    """The manifest the runtime would run here: the one unpacked (ctr imports all platforms asked
    for and unpacks the host's only)."""
    want = platform or host()
    for manifest in image.manifests:
        if manifest.platform is None or _platform_matches(want, manifest.platform):
            return manifest
    return None


"""What import works through: containerd's content, snapshot, diff and image services for
Kubernetes' images (namespace k8s.io), or Docker's API (namespace moby)."""

from __future__ import annotations

import os
from typing import IO, TYPE_CHECKING, Callable, Optional, Sequence

from pinctl.backends.containerd_import import ContainerdImporter, Unpacked, read_cri_snapshotter
from pinctl.backends.cri import socket_path
from pinctl.errors import EngineError, UsageError
from pinctl.imports.archive import DOCUMENT_LIMIT, Archive, ArchiveRefused, BlobStream, read_archive
from pinctl.imports.layout import (GC_SNAPSHOT, UNCOMPRESSED, Image, Manifest, Plan, Platforms, plan_import,
                                   unpack_manifest)
from pinctl.imports.run import Loaded, Watch
from pinctl.landing.runtimes import CriTarget, DockerTarget, docker_destination
from pinctl.model import ALL_NAMESPACES, CRI_NAMESPACE, DOCKER_NAMESPACE

if TYPE_CHECKING:
    from pinctl.backends.cri import CriRuntime, RuntimeVersion
    from pinctl.backends.docker import DockerEngine
    from pinctl.gc.model import ImageFs
    from pinctl.imports.run import ImportTarget
    from pinctl.node.sources import Node


class ContainerdImportTarget:
    """containerd's own services, in k8s.io; the image filesystem as the CRI reports it."""

    def __init__(self, address: str, timeout: float, write_timeout: float, snapshotter: str,
                 cri: CriTarget) -> None:
        self.address = address
        self.timeout = timeout
        self.write_timeout = write_timeout
        self.snapshotter = snapshotter
        self.cri = cri
        self.namespace = CRI_NAMESPACE
        # The content goes to containerd's own socket, which is most often the CRI's too: name it
        # only when it is another one.
        same = socket_path(cri.runtime.endpoint) == address
        self.name = f"{cri.name} ({'' if same else f'containerd at {address}, '}snapshotter {snapshotter})"

    def filesystem(self) -> ImageFs:
        return self.cri.filesystem()

    def load(self, archive: str, source: IO[bytes], platforms: Platforms, watch: Watch,
             progress: Callable[[str], None], loaded: Callable[[Loaded], None]) -> list[str]:
        with ContainerdImporter(self.address, self.namespace, self.timeout, self.write_timeout,
                                self.snapshotter) as importer:
            importer.watch = watch
            found = read_archive(source, archive, importer)
            plan = plan_import(found, lambda digest, size: importer.read(digest, size, DOCUMENT_LIMIT),
                               importer.has, platforms)
            progress("labelling blobs")
            for digest, raw in plan.generated.items():
                importer.write_document(digest, raw, plan.labels.get(digest, {}))
            importer.set_labels_many([(digest, labels) for digest, labels in plan.labels.items()
                                      if digest not in plan.generated])
            # Every image is unpacked before any gets a record: a layer that does not unpack
            # refuses the archive while nothing of it is named yet.
            unpacked: list[tuple[str, dict[str, str]]] = []
            for image in plan.images:
                manifest = unpack_manifest(image)
                if manifest is not None:
                    unpacked += self._unpack(importer, found, manifest, progress)
            importer.set_labels_many(unpacked)
            named = [(name, image) for image in plan.images for name in image.names]
            changes = importer.put_images([(name, (image.target.media_type, image.target.digest, image.target.size))
                                           for name, image in named])
            for (name, image), changed in zip(named, changes):
                loaded(Loaded(name, changed, image.target.digest, tuple(image.platforms)))
            return plan.unnamed

    def _unpack(self, importer: ContainerdImporter, found: Archive, manifest: Manifest,
                progress: Callable[[str], None]) -> list[tuple[str, dict[str, str]]]:
        """Each layer unpacked that is not yet; the labels that then tie the blobs to the
        snapshots (set by the caller, in one window for the whole archive)."""
        if len(manifest.diff_ids) != len(manifest.layers):
            raise ArchiveRefused(found.name, _entry(found, manifest.config.digest),
                                 "is an image config without rootfs.diff_ids for its layers")
        chain = manifest.chain_ids()
        parent = ""
        labels: list[tuple[str, dict[str, str]]] = []
        for number, (layer, diff_id, chain_id) in enumerate(zip(manifest.layers, manifest.diff_ids, chain), 1):
            if not importer.snapshot_exists(chain_id):
                progress(f"unpacking layer {number} of {len(chain)} for {self.snapshotter}")
                try:
                    importer.unpack_layer((layer.media_type, layer.digest, layer.size), diff_id, chain_id, parent)
                except Unpacked as err:
                    raise ArchiveRefused(found.name, _entry(found, layer.digest), err.message) from None
                except EngineError as err:
                    raise ArchiveRefused(found.name, _entry(found, layer.digest),
                                         f"did not unpack: {err.message}") from None
            labels.append((layer.digest, {UNCOMPRESSED: diff_id}))
            parent = chain_id
        if chain:
            labels.append((manifest.config.digest, {f"{GC_SNAPSHOT}.{self.snapshotter}": chain[-1]}))
        return labels


def _entry(found: Archive, digest: str) -> str:
    blob = found.by_digest.get(digest)
    return blob.entry if blob is not None else digest


class _Verifying:
    """A sink that stores nothing: the archive is read through and checked, for Docker to load after."""

    def has(self, digest: str, size: int) -> bool:
        return False

    def write(self, stream: BlobStream) -> None:
        stream.drain()


class DockerImportTarget:
    """Docker's load, after pinctl read the whole archive and found it sound (Docker then reads
    the same open file from its start)."""

    def __init__(self, engine: DockerEngine, write_timeout: float) -> None:
        self.engine = engine
        self.write_timeout = write_timeout
        self.docker = DockerTarget(engine)
        self.name = self.docker.name
        self.namespace = DOCKER_NAMESPACE

    def filesystem(self) -> ImageFs:
        return self.docker.filesystem()

    def load(self, archive: str, source: IO[bytes], platforms: Platforms, watch: Watch,
             progress: Callable[[str], None], loaded: Callable[[Loaded], None]) -> list[str]:
        before = os.fstat(source.fileno())
        found = read_archive(source, archive, _Verifying())
        plan = plan_import(found, lambda _digest, _size: None, lambda _digest, _size: False, platforms)
        why = watch(found.bytes_read)
        if why:
            raise ArchiveRefused(archive, "", why)
        ids = {name: self.engine.image_present(name) for image in plan.images for name in image.names}
        progress("loading into Docker")
        source.seek(0)
        self.engine.load_archive(source, self.write_timeout)
        after = os.fstat(source.fileno())
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            raise ArchiveRefused(archive, "", "changed while it was imported: check what Docker loaded")
        _report(self.engine, plan, ids, loaded)
        return plan.unnamed


def _report(engine: DockerEngine, plan: Plan, ids: dict[str, Optional[str]], loaded: Callable[[Loaded], None]) -> None:
    image: Image
    for image in plan.images:
        for name in image.names:
            now = engine.image_present(name)
            if now is None:
                raise EngineError(f"Docker loaded the archive but has no image {name}",
                                  "is it Docker's classic store with an image it cannot take (an index)?")
            loaded(Loaded(name, now != ids.get(name), image.target.digest, tuple(image.platforms)))


def choose_import_target(node: Node, namespaces: Sequence[str], address: str, timeout: float, write_timeout: float,
                         snapshotter: Optional[str], containerd_config: Optional[str],
                         open_runtime: Callable[[], tuple[CriRuntime, RuntimeVersion]]) -> ImportTarget:
    """Docker for -n moby or a node where only Docker answers; else containerd's k8s.io. CRI-O
    has no import: its CRI can only pull, and its store is its own."""
    crio = node.crio()
    if crio is not None:
        raise UsageError(f"{crio.describe()} has no way to import an archive: its CRI only pulls",
                         "push the archive to a registry CRI-O reaches (skopeo copy oci-archive:FILE "
                         "docker://REGISTRY/NAME:TAG), then pinctl pull --pin NAME:TAG")
    engine = docker_destination(node, namespaces, "imports")
    if engine is not None:
        return DockerImportTarget(engine, write_timeout)
    wanted = set(namespaces)
    if wanted and not wanted & {CRI_NAMESPACE, ALL_NAMESPACES}:
        raise UsageError(f"import cannot import into namespace {', '.join(sorted(wanted))}",
                         "import goes into containerd's k8s.io (-n k8s.io, the default) or Docker (-n moby)")
    cri = CriTarget(*open_runtime())
    return ContainerdImportTarget(address, timeout, write_timeout,
                                  snapshotter or read_cri_snapshotter(containerd_config), cri)

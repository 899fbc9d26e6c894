"""Filling the watcher's index (watch.index) from a full sync's views and from the records an
event batch read, and which runtime a containerd namespace stands for in the journal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator, Optional, Sequence

from pinctl import refs as refnames
from pinctl.backends import ImageEvent

from pinctl.model import DOCKER_NAMESPACE, PIN_LABEL, PIN_VALUE, RUNTIME_CONTAINERD, RUNTIME_CRIO, RUNTIME_DOCKER, StoredImage
from pinctl.node import docker as docker_service
from pinctl.node.sources import DockerSource
from pinctl.pins import crio as crio_pins
from pinctl.watch.index import CRI_PINNED, Gone, ImageIndex, digest_of

if TYPE_CHECKING:
    from pinctl.backends import ImageStore
    from pinctl.backends.cri import CriImage
    from pinctl.backends.docker import DockerImage, DockerImageEvents
    from pinctl.node.sources import Node
    from pinctl.pins.plans import NamespaceView


def runtime_of(namespace: str) -> str:
    """Docker keeps its images in containerd's namespace moby (its containerd image store)."""
    return RUNTIME_DOCKER if namespace == DOCKER_NAMESPACE else RUNTIME_CONTAINERD


def index_view(index: ImageIndex, view: NamespaceView) -> list[Gone]:
    """The namespace as the full sync listed it; returns the references the index held that are
    gone. Only targets the index lacks are resolved (from the manifests, as kept by digest), and
    into the index alone: no listing rows are built for the whole namespace."""
    records = view.by_name.values()
    config = {pin.ref: pin.where for pin in view.config_pins}
    missing = index.replace(view.namespace, ((r.name, r.target.digest, r.labels) for r in records), config)
    _resolve(index, view.store, view.namespace, records)
    return missing


def note_records(index: ImageIndex, namespace: str, records: Sequence[StoredImage]) -> None:
    """Records an event batch read: their names, targets and labels. Their new targets are
    resolved later (resolve), when no event waits: a manifest read per new image would hold up
    the pins of the next batch of a burst."""
    for record in records:
        index.put(namespace, record.name, record.target.digest, record.labels)


def resolve(index: ImageIndex, store: ImageStore, namespace: str, records: Iterable[StoredImage]) -> None:
    _resolve(index, store, namespace, records)


def _resolve(index: ImageIndex, store: ImageStore, namespace: str, records: Iterable[StoredImage]) -> None:
    """Image ID and size (the target's own bytes and what it resolves to, as ls counts) of each
    target the index lacks."""
    sizes = {record.target.digest: record.target.size for record in records}
    unresolved = index.unresolved(sizes)
    if not unresolved:
        return
    for digest, target in store.resolve_targets(namespace, unresolved).items():
        if target.error is None:
            index.resolved(digest, target.image_id, sizes[digest] + target.size)


# -- Docker's classic store: no containerd records, its own events -------------------------------

DOCKER_CLASSIC = "docker"  # the index's namespace for Docker's own store (no containerd namespace holds it)
DOCKER_TOPIC = "/docker/"  # the topic of Docker's events in the watcher's queue: /docker/untag, /docker/delete


class DockerTopics:
    """Docker's image events as the watcher's queue carries containerd's: the image ID in the name's place."""

    def __init__(self, stream: DockerImageEvents) -> None:
        self.stream = stream

    def cancel(self) -> None:
        self.stream.cancel()

    def __iter__(self) -> Iterator[ImageEvent]:
        for action, image_id in self.stream:
            yield DOCKER_CLASSIC, DOCKER_TOPIC + action, image_id, {}


def docker_classic(node: Node) -> Optional[DockerSource]:
    """Docker on its classic store (a graph driver): the one source whose deletions no containerd sees."""
    for source in node.sources:
        if isinstance(source, DockerSource) and not source.view.store.containerd:
            return source
    return None


def _docker_records(source: DockerSource, image: DockerImage) -> list[tuple[str, str, dict[str, str]]]:
    rules = docker_service.parse_label_rules(source.label_rules)
    pinned = bool(rules and docker_service.label_reasons(image.labels, rules))
    labels = {PIN_LABEL: PIN_VALUE} if pinned else {}
    return [(name, image.image_id, labels) for name in source.view.names_of(image)]


def index_docker(index: ImageIndex, source: DockerSource) -> list[Gone]:
    """Docker's images as its list gives them; returns the references the index held that are gone."""
    images = source.view.engine.list_images()
    config = _sandbox_names(source, images)
    missing = index.replace(DOCKER_CLASSIC, (r for image in images for r in _docker_records(source, image)), config)
    for image in images:
        index.resolved(image.image_id, image.image_id, image.size)
    return missing


def docker_changed(index: ImageIndex, source: DockerSource, image_id: str) -> list[Gone]:
    """An image event of Docker's (it names the image alone): the references of that image the
    index held and Docker no longer has; the ones it has now are known from here on."""
    image = source.view.engine.image(image_id) if image_id else None
    current = _docker_records(source, image) if image is not None else []
    names = {name for name, _, _ in current}
    held = [ref for ref, entry in index.refs(DOCKER_CLASSIC).items() if digest_of(entry) == image_id and ref not in names]
    gone = [item for ref in held if (item := index.take(DOCKER_CLASSIC, ref)) is not None]
    for name, digest, labels in current:
        index.put(DOCKER_CLASSIC, name, digest, labels)
    if image is not None:
        index.resolved(image.image_id, image.image_id, image.size)
    return gone


def _sandbox_names(source: DockerSource, images: Sequence[DockerImage]) -> dict[str, str]:
    """cri-dockerd pins its sandbox image itself: its names, and where that is set."""
    if not source.sandbox_image:
        return {}
    where = "cri-dockerd --pod-infra-container-image"
    return {name: where for image in images for name in source.view.names_of(image)
            if refnames.familiar(name) == source.sandbox_image}


# -- CRI-O: no events, its CRI's list read again ------------------------------------------------

CRIO = "cri-o"  # the index's namespace for CRI-O's images


def index_crio(index: ImageIndex, images: Sequence[CriImage]) -> list[Gone]:
    """CRI-O's images as its CRI lists them (IDs come bare: given their sha256: prefix); returns
    the references the index held that the list lacks. The first list of a session finds none."""
    records = []
    for image in images:
        image_id = image.id if image.id.startswith("sha256:") else f"sha256:{image.id}"
        flags = {CRI_PINNED: "true"} if image.pinned else {}
        records += [(name, image_id, flags) for name in crio_pins.names_of(image) or [image_id]]
    missing = index.replace(CRIO, records)
    for image in images:
        image_id = image.id if image.id.startswith("sha256:") else f"sha256:{image.id}"
        index.resolved(image_id, image_id, image.size)
    return missing

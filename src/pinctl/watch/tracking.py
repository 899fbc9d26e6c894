"""Filling the watcher's index (watch.index) from a full sync's views and from the records an
event batch read, and which runtime a containerd namespace stands for in the journal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from pinctl.model import DOCKER_NAMESPACE, StoredImage
from pinctl.watch.index import Gone, ImageIndex

if TYPE_CHECKING:
    from pinctl.backends import ImageStore
    from pinctl.pins.plans import NamespaceView

RUNTIME_CONTAINERD = "containerd"
RUNTIME_DOCKER = "docker"
RUNTIME_CRIO = "cri-o"


def runtime_of(namespace: str) -> str:
    """Docker keeps its images in containerd's namespace moby (its containerd image store)."""
    return RUNTIME_DOCKER if namespace == DOCKER_NAMESPACE else RUNTIME_CONTAINERD


def index_view(index: ImageIndex, view: NamespaceView) -> list[Gone]:
    """The namespace as the full sync listed it (image IDs from the manifests, as kept by digest);
    returns the references the index held that are gone."""
    rows = view.rows
    config = {pin.ref: pin.where for pin in view.config_pins}
    missing = index.replace(view.namespace, ((row.ref, row.target.digest, row.labels) for row in rows), config)
    for row in rows:
        index.resolved(row.target.digest, row.image_id, row.size)
    return missing


def index_records(index: ImageIndex, store: ImageStore, namespace: str, records: Sequence[StoredImage]) -> None:
    """Records an event batch read: their names, targets and labels; new targets resolved."""
    for record in records:
        index.put(namespace, record.name, record.target.digest, record.labels)
    sizes = {record.target.digest: record.target.size for record in records}
    unresolved = index.unresolved(sizes)
    if not unresolved:
        return
    for digest, target in store.resolve_targets(namespace, unresolved).items():
        if target.error is None:
            index.resolved(digest, target.image_id, sizes[digest] + target.size)

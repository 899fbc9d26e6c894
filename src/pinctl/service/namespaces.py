"""Which containerd namespaces a command looks at."""

from __future__ import annotations

from typing import Sequence

from pinctl.backends import ImageRecords

# containerd's CRI plugin reads only this namespace; Docker's containerd image store uses the other.
CRI_NAMESPACE = "k8s.io"
DOCKER_NAMESPACE = "moby"
DEFAULT_NAMESPACES = (CRI_NAMESPACE, DOCKER_NAMESPACE)
ALL = "all"


def select_namespaces(store: ImageRecords, requested: Sequence[str]) -> list[str]:
    """Requested namespaces (checked to exist), every one for `all`, else the defaults present."""
    if ALL in requested:
        return store.namespaces()
    if requested:
        wanted = list(dict.fromkeys(requested))
        store.require_namespaces(wanted)
        return wanted
    present = set(store.namespaces())
    return [ns for ns in DEFAULT_NAMESPACES if ns in present]

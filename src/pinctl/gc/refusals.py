"""Deletes a runtime will refuse the kubelet's GC: which images, and why, from what the node shows.

The kubelet's GC skips only what the CRI lists as in use or pinned; it asks the runtime's
``RemoveImage`` for the rest, and some runtimes refuse (kubelet v1.37.2 then ends its run before
the threshold step, when the refusal comes in the maximum-age step: gc/model.py). Read from each
runtime's ``RemoveImage``:

- cri-dockerd (v0.4.3, ``core/image.go``) removes each of the image's tags and digests, then its
  ID, through Docker's API without ``force``. dockerd (25 and 26, both image stores) refuses to
  remove an image's last name, or the image by ID, while a container, running or stopped, was
  made from it: "conflict: unable to remove repository reference ... (must force) - container
  ... is using its referenced image ...". cri-dockerd lists only its own containers
  (``io.kubernetes.docker.type=container``) to the kubelet, so a `docker run` container, even
  one long exited, keeps its image from the kubelet's GC by failing it. The tags before the last
  are removed before the refusal: the image stays with one name.
- CRI-O (v1.34.0, ``server/image_remove.go``) deletes an image by ID through containers/storage
  (v1.58, ``store.go`` ``DeleteImage``), which refuses while any container of the store was made
  from it: "image used by <id>: image is in use by a container". CRI-O lists only its own
  containers to the kubelet, and never its pods' infra containers; a container of another
  program sharing the store (podman, buildah), or a pod's infra container of a pause image the
  configuration no longer names (so no longer pinned), makes the delete fail. (CRI-O's own check
  of image volumes concerns images the kubelet already counts in use.)
- containerd's CRI (1.7, 2.4.2: ``internal/cri/server/images/image_remove.go``) deletes each
  reference whatever uses the image: nothing to predict.

No I/O here: gc/plan.py lists Docker's containers and reads CRI-O's store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Optional, Protocol

from pinctl.model import RUNTIME_CONTAINERD, RUNTIME_CRIO, RUNTIME_DOCKER

if TYPE_CHECKING:
    from pinctl.backends.docker import DockerContainer
    from pinctl.gc.estimate import ObservedImage


class StorageContainer(Protocol):
    """A container of CRI-O's containers/storage, as gc/plan.py reads it (node.crio_storage's
    StorageContainer is one): typed here, since this pure logic sits below the node."""

    @property
    def id(self) -> str: ...

    @property
    def image_id(self) -> str: ...

    @property
    def name(self) -> str: ...


NO_CRIO_STORE = "not read: CRI-O's containers/storage files are not readable here"
NO_DOCKER_API = ("not read: Docker's API is not one of pinctl's sources here (--docker-host), so containers "
                 "outside Kubernetes, which make Docker refuse a delete, are not seen")
CONTAINERD_NONE = "none: containerd's CRI deletes an image whatever uses it"


def predicted(runtime: str, images: Sequence[ObservedImage], *, docker: Optional[Sequence[DockerContainer]] = None,
              storage: Optional[Sequence[StorageContainer]] = None, where: str = "") -> tuple[dict[str, str], str]:
    """Image IDs -> why the runtime will refuse to delete them, and where that was looked for.

    The containers the CRI does not list: ``docker``, Docker's on cri-dockerd (``where``: its
    host); ``storage``, containers/storage's on CRI-O (``where``: the store's directory); None
    when they could not be read."""
    if runtime == RUNTIME_DOCKER:
        if docker is None:
            return {}, NO_DOCKER_API
        return docker_refusals(images, docker), f"Docker's containers at {where}, outside the CRI's"
    if runtime == RUNTIME_CRIO:
        if storage is None:
            return {}, NO_CRIO_STORE
        return crio_refusals(images, storage), f"containers/storage's containers in {where}, outside the CRI's"
    if runtime == RUNTIME_CONTAINERD:
        return {}, CONTAINERD_NONE
    return {}, f"not read: pinctl knows no refusal of {runtime}'s RemoveImage"


def docker_refusals(images: Sequence[ObservedImage], outside: Sequence[DockerContainer]) -> dict[str, str]:
    """Images Docker will not delete for cri-dockerd: a container Kubernetes does not see was made
    from it (dockerd compares the container's image ID; one without an ID names its image)."""
    known = {image.id for image in images}
    by_name = {ref: image.id for image in images for ref in image.refs}
    users: dict[str, list[str]] = {}
    for container in outside:
        image_id = container.image_id if container.image_id else by_name.get(container.image, "")
        if image_id in known:
            users.setdefault(image_id, []).append(f"{container.name or container.id[:12]} ({container.state})")
    return {image_id: _docker_reason(sorted(names)) for image_id, names in users.items()}


def _docker_reason(names: Sequence[str]) -> str:
    many = len(names) > 1
    # Not Kubernetes' (`docker run`), or a pod's sandbox: the CRI lists neither as a container.
    return (f"Docker refuses to delete it: {'containers' if many else 'container'} {', '.join(names)} "
            f"{'use' if many else 'uses'} it and {'are' if many else 'is'} none of the CRI's containers "
            "(cri-dockerd does not force)")


def crio_refusals(images: Sequence[ObservedImage], outside: Sequence[StorageContainer]) -> dict[str, str]:
    """Images CRI-O's store will not delete: a container of the store that the CRI does not list
    (another program's, or a pod's infra container) was made from it (by image ID)."""
    known = {image.id for image in images}
    users: dict[str, list[str]] = {}
    for container in outside:
        if container.image_id in known:
            users.setdefault(container.image_id, []).append(container.name or container.id[:12])
    return {image_id: (f"CRI-O's store refuses to delete it: storage "
                       f"{'containers' if len(names) > 1 else 'container'} {', '.join(sorted(names))} "
                       f"{'use' if len(names) > 1 else 'uses'} it, which the CRI does not list as containers "
                       "(another program's, as podman's, or a pod's infra container)")
            for image_id, names in users.items()}

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
- containerd's CRI (1.7, 2.4.2: ``internal/cri/server/images/image_remove.go``) deletes each
  reference whatever uses the image: nothing to predict.

No I/O here: gc/plan.py lists Docker's containers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Optional

if TYPE_CHECKING:
    from pinctl.backends.docker import DockerContainer
    from pinctl.gc.estimate import ObservedImage

# How the CRI's Version call names the runtimes here.
DOCKER: Final = "docker"
CONTAINERD: Final = "containerd"
NO_DOCKER_API = ("not read: Docker's API is not one of pinctl's sources here (--docker-host), so containers "
                 "outside Kubernetes, which make Docker refuse a delete, are not seen")
CONTAINERD_NONE = "none: containerd's CRI deletes an image whatever uses it"


def predicted(runtime: str, images: Sequence[ObservedImage], outside: Optional[Sequence[DockerContainer]],
              docker_host: str = "") -> tuple[dict[str, str], str]:
    """Image IDs -> why the runtime will refuse to delete them, and where that was looked for.

    ``outside``: on cri-dockerd, Docker's containers the CRI does not list (None: Docker's API
    could not be asked)."""
    if runtime == DOCKER:
        if outside is None:
            return {}, NO_DOCKER_API
        return docker_refusals(images, outside), f"Docker's containers at {docker_host}, outside the CRI's"
    if runtime == CONTAINERD:
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
    return (f"Docker refuses to delete it: {'containers' if many else 'container'} {', '.join(names)} outside "
            f"Kubernetes {'use' if many else 'uses'} it (cri-dockerd does not force)")

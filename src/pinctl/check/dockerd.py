"""check's quirks of cri-dockerd (the CRI for Docker, which names itself "docker"): what its
release can pin, the fix that works for that release, and the pins it makes on its own.

Up to 0.4.6 cri-dockerd pins its sandbox image only (--pod-infra-container-image, by exact
match against Docker's names); from 0.4.7 also what --pinned-images and --pinned-image-labels
name. It never reads containerd's labels in moby, nor pinctl's patterns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from pinctl.model import REASON_DOCKER_LABEL, REASON_LABEL, REASON_SANDBOX, ImageRow, Reason, ReasonKind
from pinctl.pins.dockerd import Selectors

if TYPE_CHECKING:
    from pinctl.backends.cri import CriImage
    from pinctl.backends.cri_dockerd import CriDockerd

NAME = "cri-dockerd"
PROXY_SOCKET = "/run/pinctl/cri-proxy.sock"
EXPORT = "pinctl config export --for cri-dockerd"


def cause(kinds: set[ReasonKind], frontend: Optional[CriDockerd], endpoint: str) -> tuple[str, str, str]:
    """(mismatch, cause, fix) for an image pinctl wants kept that cri-dockerd does not pin."""
    who = frontend.describe() if frontend else "cri-dockerd"
    selectors = frontend.has_selectors if frontend else None
    proxy = (f"serve the kubelet through pinctl cri-proxy: pinctl cri-proxy --listen {PROXY_SOCKET} -r {endpoint}, "
             f"and point the kubelet's --container-runtime-endpoint at unix://{PROXY_SOCKET}")
    flags = f"{EXPORT} (its --pinned-images and --pinned-image-labels), and start {who} with them"
    if selectors is False:
        why = "pins only its sandbox image: it reads no labels, patterns or config labels"
        return _kind(kinds), f"{who} {why}", proxy
    if selectors is None:
        why = "(release unknown) pins its sandbox image, and from 0.4.7 what --pinned-images/--pinned-image-labels name"
        return _kind(kinds), f"{who} {why}", f"on 0.4.7 or later: {flags}; before 0.4.7: {proxy}"
    if REASON_DOCKER_LABEL in kinds:
        return "config-label-unread", f"{who} does not pin by these config labels", flags
    if REASON_LABEL in kinds:
        return ("labels-ignored", f"the runtime ignores labels: {who} pins only its sandbox image and what "
                "--pinned-images/--pinned-image-labels name", flags)
    return "pattern-only", f"pattern known only to pinctl: {who} does not read pinctl's config", flags


def _kind(kinds: set[ReasonKind]) -> str:
    if REASON_LABEL in kinds:
        return "labels-ignored"
    return "config-label-unread" if REASON_DOCKER_LABEL in kinds else "pattern-only"


def own_pin(cri: CriImage, rows: Sequence[ImageRow], frontend: Optional[CriDockerd]) -> Reason:
    """Why cri-dockerd pins an image pinctl does not ask it to keep: its sandbox image, or one of
    its own selectors. Without its process to read, the pin is taken as its own all the same:
    nothing else can make cri-dockerd report one."""
    names = (*cri.repo_tags, *cri.repo_digests)
    generic = Reason(REASON_SANDBOX, f"the runtime's own pin: {frontend.describe() if frontend else NAME} pins its "
                                     "sandbox image (and from 0.4.7 what --pinned-images/--pinned-image-labels name)")
    if frontend is None:
        return generic
    if frontend.sandbox_image and frontend.sandbox_image in cri.repo_tags:
        return Reason(REASON_SANDBOX, f"{frontend.sandbox_image} ({frontend.describe()} --pod-infra-container-image)")
    labels = next((row.config_labels for row in rows if row.config_labels), None) or {}
    selectors = Selectors.parse(frontend.pinned_images, frontend.pinned_image_labels)
    selected = selectors.match(cri.repo_tags, cri.repo_digests, labels)
    if selected:
        return Reason(REASON_SANDBOX, f"{frontend.describe()} {selected}")
    if frontend.sandbox_image is None and not selectors:
        shown = names[0] if names else cri.id
        return Reason(REASON_SANDBOX, f"{shown} ({frontend.describe()}'s default sandbox image: it pins nothing else)")
    return generic

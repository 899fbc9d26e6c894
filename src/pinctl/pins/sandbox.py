"""The runtime's sandbox (pause) image: by which rule each runtime keeps it, and what is left to
say when it does not. pinctl wants it kept on every runtime (check, gc plan, prune and cri-proxy
count it); whether the runtime keeps it is the runtime's rule, read from its source and checked
against the real programs (tests/integration/test_sandbox_image.py; docs/sandbox-image.md's table says the same):

- containerd 1.x, from the releases whose CRI reports pins (1.6.25, 1.7.10): pinned while one of
  the image's records carries the pin label, as any image. Its CRI puts the label on every record
  of the image when it pulls the configured ``sandbox_image`` (PullImage, or RunPodSandbox pulling
  it because it is absent) and, from 1.6.29 and 1.7.14, when it first takes in a record of that
  name that it does not manage yet (``ctr images import``, any client's create). Never at any other
  time: not after an unpin, not at a restart, and not for a record made already marked as the
  CRI's (``ctr images tag`` of an image the CRI manages). Names are compared normalised.
- containerd 2.x: labels the record named exactly as ``pinned_images.sandbox`` has it (a version 2
  config's ``sandbox_image`` is migrated there) at start and on every change to that record, so an
  unpin is undone at once; a record of any other spelling is never labelled (containerd issue 13314).
- cri-dockerd (0.4.x): reports pinned every image one of whose Docker names equals its
  ``--pod-infra-container-image`` as written (node/docker.py); labels play no part.
- CRI-O: pins its ``pause_image`` by name (pins/crio.py, node/crio.py).
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from pinctl import refs
from pinctl.errors import UsageError
from pinctl.model import REASON_SANDBOX, SOURCE_DOCKER, Reason
from pinctl.pins import labels as pin_labels

# From these releases the 1.x CRI also labels a record of the sandbox image's name that it takes in
# (an import); before them, only its own pull does (the fix cherry-picked as "make sure cri image is
# pinned when it is pulled outside cri").
FIRST_LABELLING_IMPORTS = ((1, 6, 29), (1, 7, 14))
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def _parsed(version: str) -> Optional[tuple[int, int, int]]:
    match = _VERSION.match(version.strip())
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def unlabelled_rule(version: str, entry: Optional[str], names: Sequence[str]) -> Optional[str]:
    """The rule by which containerd `version` leaves its sandbox image without the pin label once
    it has lost it (or never had it); None when it labels it again (2.x, an entry naming one of
    the image's `names` exactly: at once, on every change).

    entry is 2.x's pinned_images.sandbox as written (for 1.x, its sandbox_image)."""
    parsed = _parsed(version)
    if parsed is None:
        return f"containerd {version} pins it only by the pin label"
    if parsed[0] >= 2:
        if entry in names:
            return None
        return f"containerd {version} labels only the record named exactly as pinned_images.sandbox has it ({entry})"
    on_import = parsed >= FIRST_LABELLING_IMPORTS[0] if parsed[:2] == (1, 6) else parsed >= FIRST_LABELLING_IMPORTS[1]
    when = "its CRI pulls it or first takes in a record of its name" if on_import else "its CRI pulls it"
    return f"containerd {version} labels it only when {when}"


def names_sandbox(name: str, sandbox: Optional[str]) -> bool:
    """Whether record `name` is the sandbox image containerd's config names (compared
    normalised, as the CRI finds its sandbox image)."""
    return bool(sandbox) and _normalized(name) == _normalized(sandbox or "")


def unpin_warning(version: str, entry: Optional[str], name: str) -> Optional[str]:
    """What unpinning record `name`, containerd's sandbox image, means when that containerd will
    not label it again; None otherwise (2.x relabelling it: repinned_warning says so; a CRI that
    reports no pins: nothing changes for the kubelet)."""
    if not pin_labels.cri_honours_pins(version):
        return None
    rule = unlabelled_rule(version, entry, [name])
    if rule is None:
        return None
    return f"it is the CRI sandbox image and {rule}: the kubelet's GC may delete it now (pinctl pin {name} keeps it)"


def docker_unpin_warning(name: str, reasons: Sequence[Reason], source: str) -> Optional[str]:
    """cri-dockerd's sandbox image stays pinned whatever its labels: one line saying so."""
    if source == SOURCE_DOCKER and any(reason.kind == REASON_SANDBOX for reason in reasons):
        return f"{name}: cri-dockerd keeps it anyway: it pins its sandbox image (--pod-infra-container-image) by name"
    return None


def _normalized(name: str) -> str:
    try:
        return refs.normalize(name)
    except UsageError:
        return name

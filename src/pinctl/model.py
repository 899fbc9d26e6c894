"""Plain data passed between the layers. No I/O here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

PIN_LABEL = "io.cri-containerd.pinned"
PIN_VALUE = "pinned"
# Marks a pin that `pinctl sync` added, so `sync --prune` never removes a pin someone else set.
MANAGED_LABEL = "io.pinctl.managed"
MANAGED_VALUE = "true"

LabelChange = dict[str, Optional[str]]


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int


@dataclass(frozen=True)
class StoredImage:
    """One image record (one reference) as the engine stores it."""

    name: str
    labels: dict[str, str]
    target: Descriptor
    # When the engine created the record (seconds since the epoch), where it says.
    created: Optional[float] = None


@dataclass(frozen=True)
class ResolvedTarget:
    """What the manifest behind a target says.

    image_id is the config digest of the host platform's manifest. size counts the blobs below
    the target for that platform (manifest, config, layers) but not the target itself, so that
    target size plus this is what the CRI plugin reports to the kubelet.
    """

    image_id: Optional[str]
    size: int
    error: Optional[str] = None


@dataclass(frozen=True)
class Reason:
    kind: str
    detail: str
    source: Optional[str] = None

    def as_dict(self) -> dict[str, str]:
        found = {"kind": self.kind, "detail": self.detail}
        if self.source is not None:
            found["source"] = self.source
        return found


@dataclass
class ImageRow:
    """One row of `pinctl ls`: a reference in a namespace and whether the runtime will keep it.

    namespace is None for an image in Docker's classic store, which has no namespaces.
    """

    namespace: Optional[str]
    ref: str
    image_id: Optional[str]
    target: Descriptor
    size: int
    labels: dict[str, str]
    pinned: bool = False
    reasons: list[Reason] = field(default_factory=list)
    drift: Optional[str] = None
    source: str = "containerd"
    config_labels: Optional[dict[str, str]] = None
    cri_pinned: Optional[bool] = None
    created: Optional[float] = None

    @property
    def digest(self) -> str:
        return self.target.digest

    @property
    def group_key(self) -> str:
        """Refs sharing this key are one image to the CRI plugin."""
        return self.image_id or self.digest


# The record a write was planned for now holds another image, or its pin labels were changed
# by someone else: pinctl left it alone (or undid its write) and says so.
CHANGED_UNDER_US = "changed-under-us"


@dataclass(frozen=True)
class ItemResult:
    """The outcome of one pin or unpin on one reference."""

    namespace: str
    ref: str
    action: str
    error: Optional[str] = None

    @property
    def failed(self) -> bool:
        return self.action == "failed"

    @property
    def done(self) -> bool:
        """Whether the reference ended as asked: neither failed nor changed under pinctl."""
        return self.action not in ("failed", CHANGED_UNDER_US)


@dataclass(frozen=True)
class WriteOutcome:
    """What one guarded label write did: written, already (nothing to do by the time it ran),
    moved (the record changed after planning; detail says how) or failed (detail says why)."""

    verdict: str
    detail: Optional[str] = None
    # The daemon stopped answering: writes after this one are not even tried.
    stalled: bool = False

"""Plain data passed between the layers. No I/O here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Final, Literal, Optional

PIN_LABEL = "io.cri-containerd.pinned"
PIN_VALUE = "pinned"
# Marks a pin that `pinctl sync` added, so `sync --prune` never removes a pin someone else set.
MANAGED_LABEL = "io.pinctl.managed"
MANAGED_VALUE = "true"

LabelChange = dict[str, Optional[str]]

# Which engine an ImageRow's source is; Docker's rows show Docker's image IDs (ImageRow.engine_id).
SOURCE_CONTAINERD: Final = "containerd"
SOURCE_DOCKER: Final = "docker"
# CRI-O, read through the CRI alone: it has no namespaces and no labels (ImageRow.namespace is None).
SOURCE_CRIO: Final = "cri-o"
# How the CRI's Version call names the runtimes (RuntimeVersion.name): cri-dockerd answers as docker.
RUNTIME_CONTAINERD: Final = "containerd"
RUNTIME_CRIO: Final = "cri-o"
RUNTIME_DOCKER: Final = "docker"
# What an image ID in ls is (JSON id_kind): Docker's image ID, or the config digest the CRI reports.
IdKind = Literal["docker", "config"]
ID_DOCKER: Final = "docker"
ID_CONFIG: Final = "config"
# A log line of the long-running commands: log(level, message, **fields). render.log writes it.
LogFn = Callable[..., None]

# containerd's CRI plugin reads only this namespace; Docker's containerd image store uses the other.
CRI_NAMESPACE = "k8s.io"
DOCKER_NAMESPACE = "moby"
DEFAULT_NAMESPACES = (CRI_NAMESPACE, DOCKER_NAMESPACE)
ALL_NAMESPACES = "all"

# -- closed vocabularies ----------------------------------------------------------------------
# Each is a Literal type, so mypy refuses any other spelling, with one constant per value for
# code to name it by. The values are plain strings: JSON carries them as they are (docs/json.md).

# Why the runtime keeps an image, or pinctl thinks it should (Reason.kind).
ReasonKind = Literal["label", "sandbox", "unlabelled-sandbox", "containerd-config", "pattern", "docker-label",
                     "ineffective-label", "ignored", "crio-config", "crio-pin"]
REASON_LABEL: Final = "label"  # a reference of the image carries the pin label; detail names it
# The CRI's sandbox (pause) image: pinctl wants it kept. Whether the runtime keeps it is the
# runtime's own rule (pins/sandbox.py): cri-dockerd and CRI-O by its name, containerd by the label.
REASON_SANDBOX: Final = "sandbox"
# containerd's sandbox image without the pin label, where nothing will put it back (1.x labels it
# only when its CRI pulls or first takes it in; 2.x only a record named as pinned_images.sandbox
# has it): the kubelet may delete it. detail says which rule of that containerd left it so.
REASON_UNLABELLED_SANDBOX: Final = "unlabelled-sandbox"
# An entry of containerd 2.x's own pinned_images names a reference of the image: containerd labels
# it itself (at start and on every change to it); detail names the entry and its file.
REASON_CONTAINERD_CONFIG: Final = "containerd-config"
REASON_PATTERN: Final = "pattern"  # a policy pattern covers the image; source says where it came from
REASON_DOCKER_LABEL: Final = "docker-label"  # a config label docker_pinned_image_labels names
REASON_INEFFECTIVE_LABEL: Final = "ineffective-label"  # looks like a pin, but the CRI does not count it
REASON_IGNORED: Final = "ignored"  # this containerd's CRI reports no pins at all
# An item of CRI-O's effective pinned_images that one of the image's names matches, written by the
# site (detail: the item; source: FILE:LINE). CRI-O pins by it itself: no label is involved.
REASON_CRIO_CONFIG: Final = "crio-config"
# The same, for an item pinctl wrote into its own CRI-O drop-in (pin or sync): pinctl's pin on CRI-O.
REASON_CRIO_PIN: Final = "crio-pin"
# The reasons that say pinctl wants the image kept (check and gc plan): an ineffective label still
# says what the operator meant.
WANTED_KINDS: tuple[ReasonKind, ...] = (REASON_LABEL, REASON_PATTERN, REASON_DOCKER_LABEL, REASON_SANDBOX,
                                        REASON_INEFFECTIVE_LABEL, REASON_CRIO_CONFIG, REASON_CRIO_PIN)

# What a pin, unpin or sync did to one reference (ItemResult.action).
Action = Literal["pinned", "unpinned", "pruned", "adopted", "already-pinned", "already-unpinned",
                 "changed-under-us", "failed"]
ACTION_PINNED: Final = "pinned"
ACTION_UNPINNED: Final = "unpinned"
ACTION_PRUNED: Final = "pruned"
# pin on a reference sync had pinned: the pin stays, sync's mark goes, so prune leaves it.
ACTION_ADOPTED: Final = "adopted"
ACTION_ALREADY_PINNED: Final = "already-pinned"
ACTION_ALREADY_UNPINNED: Final = "already-unpinned"
# The record a write was planned for now holds another image, or its pin labels were changed
# by someone else: pinctl left it alone (or undid its write) and says so.
ACTION_CHANGED_UNDER_US: Final = "changed-under-us"
ACTION_FAILED: Final = "failed"

# How a pin, unpin or sync ended as a whole (ChangeReport.status).
Status = Literal["success", "partial", "error"]
STATUS_SUCCESS: Final = "success"  # every reference ended as asked
STATUS_PARTIAL: Final = "partial"
STATUS_ERROR: Final = "error"  # every reference failed

# What one guarded label write did (WriteOutcome.verdict).
Verdict = Literal["written", "already", "moved", "failed"]
VERDICT_WRITTEN: Final = "written"
VERDICT_ALREADY: Final = "already"  # nothing to do by the time it ran
VERDICT_MOVED: Final = "moved"  # the record changed after planning
VERDICT_FAILED: Final = "failed"

# Where labels and policy disagree (ImageRow.drift).
Drift = Literal["unlabelled", "uncovered"]
DRIFT_UNLABELLED: Final = "unlabelled"  # a pattern covers the image, no label pins it
DRIFT_UNCOVERED: Final = "uncovered"  # a label pins the image, no pattern covers it

# What -o/--output asks a command to write.
OutputFormat = Literal["table", "wide", "json"]
FORMAT_TABLE: Final = "table"
FORMAT_WIDE: Final = "wide"
FORMAT_JSON: Final = "json"
OUTPUT_FORMATS: tuple[OutputFormat, ...] = (FORMAT_TABLE, FORMAT_WIDE, FORMAT_JSON)


@dataclass(frozen=True, slots=True)
class Descriptor:
    media_type: str
    digest: str
    size: int


@dataclass(frozen=True, slots=True)
class StoredImage:
    """One image record (one reference) as the engine stores it."""

    name: str
    labels: dict[str, str]
    target: Descriptor
    # When the engine created the record (seconds since the epoch), where it says.
    created: Optional[float] = None


@dataclass(frozen=True, slots=True)
class ResolvedTarget:
    """What the manifest behind a target says.

    image_id is the config digest of the host platform's manifest. size counts the blobs below
    the target for that platform (manifest, config, layers) but not the target itself, so that
    target size plus this is what the CRI plugin reports to the kubelet.
    """

    image_id: Optional[str]
    size: int
    error: Optional[str] = None


@dataclass(frozen=True, slots=True)
class Reason:
    kind: ReasonKind
    detail: str
    source: Optional[str] = None

    def as_dict(self) -> dict[str, str]:
        found = {"kind": self.kind, "detail": self.detail}
        if self.source is not None:
            found["source"] = self.source
        return found


@dataclass(frozen=True, slots=True)
class ConfigPin:
    """One entry of containerd 2.x's ``pinned_images`` table: containerd puts the pin label on the
    record whose name equals ``ref`` exactly, whenever its CRI starts or sees that record change."""

    name: str
    ref: str
    path: str  # the file that set it: the config or one of its imports
    line: Optional[int] = None

    @property
    def place(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path

    @property
    def where(self) -> str:
        return f"pinned_images.{self.name} in {self.place}"

    @property
    def is_sandbox(self) -> bool:
        """2.x's entry for the sandbox image (1.x's sandbox_image), named so by containerd."""
        return self.name == "sandbox"


@dataclass(slots=True)
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
    drift: Optional[Drift] = None
    source: str = SOURCE_CONTAINERD
    config_labels: Optional[dict[str, str]] = None
    cri_pinned: Optional[bool] = None
    created: Optional[float] = None

    @property
    def digest(self) -> str:
        return self.target.digest

    @property
    def engine_id(self) -> Optional[str]:
        """The image's ID as the engine that owns it shows it: Docker's for Docker's images (with
        its containerd image store, the digest of the record's target; in the classic store, the
        config digest), the config digest (what containerd's CRI reports) otherwise."""
        if self.source == SOURCE_DOCKER and self.namespace is not None:
            return self.digest
        return self.image_id

    @property
    def id_kind(self) -> IdKind:
        return ID_DOCKER if self.source == SOURCE_DOCKER else ID_CONFIG

    @property
    def group_key(self) -> str:
        """Refs sharing this key are one image to the CRI plugin."""
        return self.image_id or self.digest


@dataclass(frozen=True, slots=True)
class ItemResult:
    """The outcome of one pin or unpin on one reference."""

    namespace: str
    ref: str
    action: Action
    error: Optional[str] = None
    # What containerd does after this item although it ended as asked: label it again (its own
    # pinned_images), or never again (1.x's sandbox image, which the kubelet may then delete).
    warning: Optional[str] = None
    # Not tried because of a SIGINT (Ctrl-C): the command then exits 130.
    interrupted: bool = False

    @property
    def failed(self) -> bool:
        return self.action == ACTION_FAILED

    @property
    def done(self) -> bool:
        """Whether the reference ended as asked: neither failed nor changed under pinctl."""
        return self.action not in (ACTION_FAILED, ACTION_CHANGED_UNDER_US)


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """What one guarded label write did (see Verdict); detail says how a moved record changed,
    or why a write failed."""

    verdict: Verdict
    detail: Optional[str] = None
    # The daemon stopped answering: writes after this one are not even tried.
    stalled: bool = False
    # A SIGINT came before this write was sent: nothing was written, and nothing after it is tried.
    interrupted: bool = False

"""The image GC model's data: what goes in (settings, the image filesystem, images, containers)
and what comes out (the deletion order, what is kept and why, ties, the plan). No logic beyond
the kubelet's own arithmetic on its figures; gc/model.py decides, gc/ties.py reads the ties."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from fractions import Fraction
from typing import Literal, Optional, Union

from pinctl.errors import ConfigError

DEFAULT_HIGH_THRESHOLD_PERCENT = 85
DEFAULT_LOW_THRESHOLD_PERCENT = 80
DEFAULT_MIN_AGE = timedelta(minutes=2)
# 0 switches the maximum-age step off (the kubelet's default).
DEFAULT_MAX_AGE = timedelta(0)

ContainerState = Literal["created", "running", "exited", "unknown"]
GcMode = Literal["threshold", "all_unused"]
Percent = Union[int, float, Fraction]


class GcSettingsError(ConfigError):
    """Image GC settings the kubelet itself would refuse to start with."""


class Protection(str, Enum):
    """Why the kubelet will not delete an image (now)."""

    IN_USE = "in_use"  # a container the runtime lists, in any state, uses it
    PINNED = "pinned"  # the runtime reports it pinned (CRI Image.pinned)
    TOO_YOUNG = "too_young"  # first detected less than the minimum age ago


class Fate(str, Enum):
    """What happens to an image in the eviction order at this GC run."""

    DELETED_AGE = "deleted_age"  # unused for longer than the maximum age
    DELETED_SPACE = "deleted_space"  # deleted to bring usage down to the low threshold
    TOO_YOUNG = "too_young"  # skipped: younger than the minimum age
    USED_NOW = "used_now"  # skipped: last used at (or after) the GC time
    NOT_REACHED = "not_reached"  # enough was freed (or nothing needed) before its turn
    # The kubelet asks the runtime to delete it and the runtime refuses (RemoveImage fails): in
    # the maximum-age step that ends the run; in the threshold step the walk goes on past it.
    REFUSED_AGE = "refused_age"
    REFUSED_SPACE = "refused_space"

    @property
    def deleted(self) -> bool:
        return self in (Fate.DELETED_AGE, Fate.DELETED_SPACE)

    @property
    def refused(self) -> bool:
        """The kubelet tries to delete it, and the runtime refuses."""
        return self in (Fate.REFUSED_AGE, Fate.REFUSED_SPACE)


class Outcome(str, Enum):
    """How the GC run ends."""

    DISABLED = "disabled"  # high threshold 100 and no maximum age: the kubelet never runs image GC
    INVALID_CAPACITY = "invalid_capacity"  # capacity 0: an error after the maximum-age step
    BELOW_THRESHOLD = "below_threshold"  # usage under the high threshold: nothing (more) to free
    FREED_ENOUGH = "freed_enough"  # the threshold step reached the low threshold
    SHORTFALL = "shortfall"  # the threshold step could not free enough: FreeDiskSpaceFailed
    ALL_UNUSED = "all_unused"  # DeleteUnusedImages (eviction manager): every eligible image goes
    # The runtime refuses a delete of the maximum-age step: freeOldImages returns an error and
    # GarbageCollect ends there, before the threshold step (whatever the usage).
    AGE_STEP_REFUSED = "age_step_refused"
    # The runtime refuses a delete of the threshold step: freeSpace goes on with the next image and
    # the run ends with an error, whatever it freed (no FreeDiskSpaceFailed event, no post-GC hooks).
    SPACE_STEP_REFUSED = "space_step_refused"


# --- inputs -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GcSettings:
    """The kubelet's image GC policy (KubeletConfiguration field names in the comments)."""

    high_threshold_percent: int = DEFAULT_HIGH_THRESHOLD_PERCENT  # imageGCHighThresholdPercent
    low_threshold_percent: int = DEFAULT_LOW_THRESHOLD_PERCENT  # imageGCLowThresholdPercent
    min_age: timedelta = DEFAULT_MIN_AGE  # imageMinimumGCAge
    max_age: timedelta = DEFAULT_MAX_AGE  # imageMaximumGCAge; 0 = off

    @property
    def image_gc_disabled(self) -> bool:
        """The kubelet does not start image GC at all (``StartGarbageCollection``)."""
        return self.high_threshold_percent == 100 and self.max_age == timedelta(0)

    def problems(self) -> list[str]:
        """What the kubelet's config validation would reject, one line each, naming the field."""
        found = []
        for name, value in (("imageGCHighThresholdPercent", self.high_threshold_percent),
                            ("imageGCLowThresholdPercent", self.low_threshold_percent)):
            if not 0 <= value <= 100:
                found.append(f"{name} {value} must be between 0 and 100")
        if self.low_threshold_percent >= self.high_threshold_percent:
            found.append(
                f"imageGCLowThresholdPercent {self.low_threshold_percent} must be less than "
                f"imageGCHighThresholdPercent {self.high_threshold_percent}"
            )
        if self.min_age < timedelta(0):
            found.append(f"imageMinimumGCAge {self.min_age} must not be negative")
        if self.max_age < timedelta(0):
            found.append(f"imageMaximumGCAge {self.max_age} must not be negative")
        elif self.max_age > timedelta(0) and self.max_age <= self.min_age:
            found.append(f"imageMaximumGCAge {self.max_age} must be greater than imageMinimumGCAge {self.min_age}")
        return found

    def validate(self) -> GcSettings:
        problems = self.problems()
        if problems:
            raise GcSettingsError(f"invalid image GC settings: {problems[0]}")
        return self


@dataclass(frozen=True)
class ImageFs:
    """The image filesystem as the kubelet reads it: statfs capacity and available bytes."""

    capacity_bytes: int
    available_bytes: int

    @property
    def available(self) -> int:
        """Available bytes clamped to [0, capacity], as the kubelet clamps them."""
        return max(0, min(self.available_bytes, self.capacity_bytes))

    @property
    def usage_percent(self) -> int:
        """The kubelet's integer usage: ``100 - available*100 // capacity`` (so 84.1% counts as 85)."""
        if self.capacity_bytes <= 0:
            return 100
        return 100 - self.available * 100 // self.capacity_bytes

    def at_usage(self, percent: Percent) -> ImageFs:
        """The same filesystem filled to ``percent`` (the kubelet's usage figure then equals it)."""
        wanted = Fraction(str(percent)) if isinstance(percent, float) else Fraction(percent)
        if not 0 <= wanted <= 100:
            raise ValueError(f"simulated usage {percent}% must be between 0 and 100")
        return ImageFs(self.capacity_bytes, math.ceil(self.capacity_bytes * (100 - wanted) / 100))


@dataclass(frozen=True)
class GcImage:
    """One image as the kubelet's GC records it (``imageRecord``), keyed by the runtime's image id."""

    id: str
    size: int
    first_detected: datetime
    # None: not seen in use since the kubelet started (the kubelet's zero time).
    last_used: Optional[datetime] = None
    refs: tuple[str, ...] = ()
    pinned: bool = False

    @property
    def kubelet_rank(self) -> tuple[bool, datetime, datetime]:
        """What the kubelet sorts by (``byLastUsedAndDetected``): images equal on it are a tie."""
        # (False, ...) sorts before (True, ...): the zero time is older than any real time.
        return (self.last_used is not None, self.last_used or self.first_detected, self.first_detected)


@dataclass(frozen=True)
class GcContainer:
    """One container from the runtime's container list (CRI ``Container``)."""

    id: str
    image_ref: str
    state: ContainerState = "running"
    # CRI 1.30+ ``Container.image_id``; the kubelet prefers it over image_ref when set.
    image_id: str = ""
    image: str = ""
    name: str = ""
    pod: str = ""
    # Images it mounts as volumes (CRI ``Mount.image.image`` in its status): in use too (1.35+).
    image_mounts: tuple[str, ...] = ()

    @property
    def kubelet_image_id(self) -> str:
        """The string the kubelet compares with image ids (``toKubeContainer``)."""
        return self.image_id or self.image_ref


# --- outputs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OrderEntry:
    """An image the kubelet may delete, at its place in the eviction order."""

    position: int  # 1-based place in the kubelet's eviction order
    image: GcImage
    fate: Fate
    # Deleted images only: their turn among deletions (age step first), the freed total and
    # the projected available bytes once this one is gone.
    sequence: Optional[int] = None
    running_total: Optional[int] = None
    available_after: Optional[int] = None
    # Equal lastUsed and firstDetected to a neighbour: the kubelet may swap them.
    tie: bool = False
    # Why the runtime will refuse to delete it (its RemoveImage fails), whatever its fate this run.
    refused_because: Optional[str] = None


@dataclass(frozen=True)
class ProtectedImage:
    """An image this GC run keeps, and every reason it does."""

    image: GcImage
    reasons: tuple[Protection, ...]
    containers: tuple[GcContainer, ...] = ()
    eligible_at: Optional[datetime] = None  # too young: when the minimum age has passed


@dataclass(frozen=True)
class AtRisk:
    """An image someone wants kept (``wanted``) that the runtime does not pin."""

    image: GcImage
    wanted_because: str
    position: Optional[int]  # in the eviction order; None while a container uses it
    fate: Optional[Fate]
    protected_now_by: tuple[Protection, ...] = ()
    # In a tie the threshold step stops inside: the kubelet may delete it, or keep it, whatever
    # the plan's own pick (``fate``) says.
    may_go: bool = False

    @property
    def deleted(self) -> bool:
        """Deleted at this GC run (the current or simulated usage), by the plan's pick."""
        return self.fate is not None and self.fate.deleted

    @property
    def lost(self) -> bool:
        """Deleted by the plan's pick, or possibly by the kubelet's pick within a tie."""
        return self.deleted or self.may_go


@dataclass(frozen=True)
class TieGroup:
    """Neighbours in the order the kubelet ranks equal (the same lastUsed and firstDetected).

    The kubelet builds its list from a Go map and sorts it with an unstable sort, so it walks a
    tie in an order no one can know beforehand. Where its threshold step stops inside a tie
    (``straddled``), how many of the tie go and what they free is a range, and which of them go
    is chance; elsewhere the whole tie goes or stays, whatever the order.
    """

    number: int  # 1-based, in order of position
    positions: tuple[int, ...]  # consecutive places in the order
    image_ids: tuple[str, ...]
    total_bytes: int
    straddled: bool
    deleted_min: int  # how many of the tie go, at the fewest and the most
    deleted_max: int
    freed_min: int  # the bytes those deletions free, at the least and the most
    freed_max: int

    @property
    def size(self) -> int:
        return len(self.image_ids)


@dataclass(frozen=True)
class SkippedThreshold:
    """The threshold step a refused delete of the maximum-age step kept from running this round:
    what it would have read and freed (the kubelet tries again 5 minutes on, and fails the same
    way while the refusal lasts)."""

    usage_percent: int
    amount_to_free: int
    would_delete: tuple[str, ...]  # image IDs, in the order it would have deleted them
    would_free_bytes: int
    # Its would-be walk reached the low threshold (False: it too would have fallen short).
    enough: bool


@dataclass(frozen=True)
class UnmatchedContainer:
    """A container whose image id matches no image: it protects nothing."""

    container: GcContainer
    # An image one of whose refs is the container's image_ref or image; the kubelet compares ids
    # only, so that image is NOT protected by this container.
    ref_of: Optional[str] = None


@dataclass(frozen=True)
class GcPlan:
    """The result of one modelled GC run."""

    mode: GcMode
    settings: GcSettings
    fs: ImageFs  # as used: the simulated figures when usage was simulated
    simulated: bool
    now: datetime
    outcome: Outcome
    usage_percent: int  # before this run
    threshold_usage_percent: Optional[int]  # after the maximum-age step, what the threshold step sees
    amount_to_free: Optional[int]  # the threshold step's target; None when it does not run
    order: tuple[OrderEntry, ...]
    protected: tuple[ProtectedImage, ...]
    at_risk: tuple[AtRisk, ...] = ()
    wanted_missing: tuple[str, ...] = ()
    unmatched_containers: tuple[UnmatchedContainer, ...] = ()
    kubelet_message: Optional[str] = None
    ties: tuple[TieGroup, ...] = ()
    # Set when a refused delete in the maximum-age step (outcome age_step_refused) keeps a
    # threshold step that the usage calls for from running.
    skipped_threshold: Optional[SkippedThreshold] = None

    @property
    def straddled_tie(self) -> Optional[TieGroup]:
        """The tie the threshold step stops inside, if it does (at most one: the walk stops once)."""
        return next((tie for tie in self.ties if tie.straddled), None)

    @property
    def deletions(self) -> tuple[OrderEntry, ...]:
        """Deleted images in the order the kubelet deletes them."""
        deleted = [entry for entry in self.order if entry.sequence is not None]
        return tuple(sorted(deleted, key=lambda entry: entry.sequence or 0))

    @property
    def freed_bytes(self) -> int:
        return sum(entry.image.size for entry in self.deletions)

    @property
    def freed_bounds(self) -> tuple[int, int]:
        """What the run frees at the least and the most over the kubelet's orders: ``freed_bytes``
        both, unless its threshold step stops inside a tie."""
        tie = self.straddled_tie
        if tie is None:
            return self.freed_bytes, self.freed_bytes
        rest = sum(entry.image.size for entry in self.deletions if entry.position not in tie.positions)
        return rest + tie.freed_min, rest + tie.freed_max

    @property
    def space_freed_bytes(self) -> int:
        """What the threshold step freed: the kubelet's ``freed`` in its shortfall check."""
        return sum(entry.image.size for entry in self.order if entry.fate is Fate.DELETED_SPACE)

    @property
    def enough(self) -> bool:
        """False when the threshold step ran and fell short, or would have run and cannot."""
        if self.outcome is Outcome.SPACE_STEP_REFUSED:
            return self.amount_to_free is not None and self.space_freed_bytes >= self.amount_to_free
        if self.outcome is Outcome.AGE_STEP_REFUSED:
            return self.skipped_threshold is None
        return self.outcome is not Outcome.SHORTFALL

    @property
    def refused(self) -> tuple[OrderEntry, ...]:
        """Images the kubelet tries to delete this run and the runtime refuses, in the order tried."""
        return tuple(entry for entry in self.order if entry.fate is Fate.REFUSED_AGE) + tuple(
            entry for entry in self.order if entry.fate is Fate.REFUSED_SPACE)

    @property
    def projected_available(self) -> int:
        """Available bytes after the run, crediting each deleted image with its CRI size."""
        return min(self.fs.capacity_bytes, self.fs.available + self.freed_bytes)

    @property
    def wanted_deleted(self) -> tuple[AtRisk, ...]:
        """Wanted images this run deletes, or may delete (the kubelet's pick within a tie)."""
        return tuple(risk for risk in self.at_risk if risk.lost)



"""The kubelet's image garbage collector as a pure function: what it deletes next, in what order, why.

No I/O, no clock: the caller passes the runtime's images and containers, the settings, the image
filesystem's figures and ``now``. Read from the kubelet's ``pkg/kubelet/images/image_gc_manager.go``
(Kubernetes 1.30 to 1.37; functions named below), ``pkg/kubelet/kubelet.go``
(``StartGarbageCollection``) and the v1beta1 config defaults and validation; docs/gc-model.md
says each step and what a real kubelet 1.37 did in the tests.

``GarbageCollect`` (every 5 minutes): ``imagesInEvictionOrder`` runs ``detectImages`` (every
container of every pod in ANY state uses the image whose id equals its ``image_id``, else its
``image_ref``, and, from 1.35, every image it mounts as a volume, ``Mount.image``); in-use and
pinned images are left out and the rest sorted by lastUsed, ties by firstDetected (Go's
unstable sort: equal images come in no defined order). ``freeOldImages`` (when
``imageMaximumGCAge`` is set and the kubelet has run longer) deletes what was last used longer
ago than it, minimum age not consulted. Then the image fs figures, cadvisor's sample from
before those deletions (so they are not counted): capacity 0 is an error;
``usage = 100 - available*100 // capacity``; at ``usage >= high`` ``freeSpace`` walks the list,
skipping images used at the GC time or younger than ``imageMinimumGCAge``, until the CRI sizes
freed reach ``capacity*(100 - low) // 100 - available``; less is ``FreeDiskSpaceFailed``.
High 100 with no maximum age switches image GC off. The eviction manager's
``DeleteUnusedImages`` is ``freeSpace`` with no limit and no age step (``mode="all_unused"``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
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
SHORTFALL_EVENT_REASON = "FreeDiskSpaceFailed"
# The event's text from kubelet 1.35 on (usage before the threshold step, capacity as formatSize).
SHORTFALL_MESSAGE = (
    "Insufficient free disk space on the node's image filesystem ({usage}% of {capacity} used). "
    "Failed to free sufficient space by deleting unused images (freed {freed} bytes). "
    "Investigate disk usage, as it could be used by active images, logs, volumes, or other data."
)
# Up to 1.34 (the same condition).
SHORTFALL_MESSAGE_BEFORE_1_35 = (
    "Failed to garbage collect required amount of images. "
    "Attempted to free {amount} bytes, but only found {freed} bytes eligible to free."
)
INVALID_CAPACITY_MESSAGE = "invalid capacity 0 on image filesystem"

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

    @property
    def deleted(self) -> bool:
        return self in (Fate.DELETED_AGE, Fate.DELETED_SPACE)


class Outcome(str, Enum):
    """How the GC run ends."""

    DISABLED = "disabled"  # high threshold 100 and no maximum age: the kubelet never runs image GC
    INVALID_CAPACITY = "invalid_capacity"  # capacity 0: an error after the maximum-age step
    BELOW_THRESHOLD = "below_threshold"  # usage under the high threshold: nothing (more) to free
    FREED_ENOUGH = "freed_enough"  # the threshold step reached the low threshold
    SHORTFALL = "shortfall"  # the threshold step could not free enough: FreeDiskSpaceFailed
    ALL_UNUSED = "all_unused"  # DeleteUnusedImages (eviction manager): every eligible image goes


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

    @property
    def deleted(self) -> bool:
        """Deleted at this GC run (the current or simulated usage)."""
        return self.fate is not None and self.fate.deleted


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

    @property
    def deletions(self) -> tuple[OrderEntry, ...]:
        """Deleted images in the order the kubelet deletes them."""
        deleted = [entry for entry in self.order if entry.sequence is not None]
        return tuple(sorted(deleted, key=lambda entry: entry.sequence or 0))

    @property
    def freed_bytes(self) -> int:
        return sum(entry.image.size for entry in self.deletions)

    @property
    def space_freed_bytes(self) -> int:
        """What the threshold step freed: the kubelet's ``freed`` in its shortfall check."""
        return sum(entry.image.size for entry in self.order if entry.fate is Fate.DELETED_SPACE)

    @property
    def enough(self) -> bool:
        """False only when the threshold step ran and fell short."""
        return self.outcome is not Outcome.SHORTFALL

    @property
    def projected_available(self) -> int:
        """Available bytes after the run, crediting each deleted image with its CRI size."""
        return min(self.fs.capacity_bytes, self.fs.available + self.freed_bytes)

    @property
    def wanted_deleted(self) -> tuple[AtRisk, ...]:
        return tuple(risk for risk in self.at_risk if risk.deleted)


# --- the model ------------------------------------------------------------------------------------


def plan_gc(
    images: Iterable[GcImage],
    containers: Iterable[GcContainer],
    settings: GcSettings,
    fs: ImageFs,
    now: datetime,
    *,
    kubelet_started: Optional[datetime] = None,
    wanted: Optional[Mapping[str, str]] = None,
    simulated_usage: Optional[Percent] = None,
    mode: GcMode = "threshold",
) -> GcPlan:
    """Model one kubelet GC run (``GarbageCollect``, or ``DeleteUnusedImages`` for ``all_unused``).

    ``kubelet_started`` gates the maximum-age step (the kubelet waits until it has run longer than
    the maximum age); unknown means assume it has. ``wanted`` maps image ids to why they should
    stay (pinctl labels, policy): those the runtime does not pin are reported in ``at_risk``.
    ``simulated_usage`` replaces the filesystem's available bytes so usage is that percent.
    """
    settings.validate()
    listed = _unique(images)
    containers = tuple(containers)
    users = _users_by_image(containers, listed)
    used_fs = fs.at_usage(simulated_usage) if simulated_usage is not None else fs
    run = _Run(settings, used_fs, now, kubelet_started, mode)
    candidates = eviction_order(listed.values(), users)
    fates = run.fates(candidates)
    order = _order_entries(candidates, fates, used_fs)
    protected = _protections(listed.values(), users, order, settings, now)
    at_risk, missing = _at_risk(wanted or {}, listed, users, order, protected)
    return GcPlan(
        mode=mode,
        settings=settings,
        fs=used_fs,
        simulated=simulated_usage is not None,
        now=now,
        outcome=run.outcome,
        usage_percent=used_fs.usage_percent,
        threshold_usage_percent=run.threshold_usage,
        amount_to_free=run.amount_to_free,
        order=order,
        protected=protected,
        at_risk=at_risk,
        wanted_missing=missing,
        unmatched_containers=_unmatched(containers, listed),
        kubelet_message=run.message,
    )


def eviction_order(images: Iterable[GcImage], users: Mapping[str, Sequence[GcContainer]]) -> list[GcImage]:
    """Images neither in use nor pinned, oldest lastUsed first, ties by firstDetected.

    Never-used images (``last_used`` None, the kubelet's zero time) come first. Images equal on
    both have no defined order in the kubelet; here the image id decides, for stable output.
    """
    eligible = [image for image in images if image.id not in users and not image.pinned]
    return sorted(eligible, key=eviction_key)


def eviction_key(image: GcImage) -> tuple[bool, datetime, datetime, str]:
    """Where an image comes in the kubelet's order; prune lists the images it keeps by it too."""
    # (False, ...) sorts before (True, ...): the zero time is older than any real time.
    return (image.last_used is not None, image.last_used or image.first_detected, image.first_detected, image.id)


def _unique(images: Iterable[GcImage]) -> dict[str, GcImage]:
    listed: dict[str, GcImage] = {}
    for image in images:
        if image.id in listed:
            raise ValueError(f"image id {image.id} listed twice: the kubelet keys its records by id")
        listed[image.id] = image
    return listed


def _users_by_image(
    containers: Iterable[GcContainer], listed: Mapping[str, GcImage]
) -> dict[str, tuple[GcContainer, ...]]:
    users: dict[str, list[GcContainer]] = {}
    for container in containers:
        # handleImageVolumes compares a mount's image with image ids exactly, as for the container's own.
        for image_id in dict.fromkeys((container.kubelet_image_id, *container.image_mounts)):
            if image_id in listed:
                users.setdefault(image_id, []).append(container)
    return {image_id: tuple(found) for image_id, found in users.items()}


class _Run:
    """The decisions of one GC run over the ordered candidates (maximum-age step, then threshold step)."""

    def __init__(
        self, settings: GcSettings, fs: ImageFs, now: datetime, kubelet_started: Optional[datetime], mode: GcMode
    ) -> None:
        self.settings, self.fs, self.now, self.kubelet_started, self.mode = settings, fs, now, kubelet_started, mode
        self.outcome = Outcome.ALL_UNUSED if mode == "all_unused" else Outcome.BELOW_THRESHOLD
        self.threshold_usage: Optional[int] = None
        self.amount_to_free: Optional[int] = None
        self.message: Optional[str] = None

    def fates(self, candidates: Sequence[GcImage]) -> dict[str, Fate]:
        fates = {image.id: Fate.NOT_REACHED for image in candidates}
        if self.mode == "threshold" and self.settings.image_gc_disabled:
            self.outcome = Outcome.DISABLED
        else:
            self._decide(candidates, fates)
        for image in candidates:
            if fates[image.id] is Fate.NOT_REACHED:
                fates[image.id] = self._skip_reason(image) or Fate.NOT_REACHED
        return fates

    def _decide(self, candidates: Sequence[GcImage], fates: dict[str, Fate]) -> None:
        aged = self._age_step(candidates) if self.mode == "threshold" else []
        fates.update({image.id: Fate.DELETED_AGE for image in aged})
        remaining = [image for image in candidates if fates[image.id] is Fate.NOT_REACHED]
        bytes_to_free = self._threshold_target()
        if bytes_to_free is not None or self.mode == "all_unused":
            fates.update(self._free_space(remaining, bytes_to_free))

    def _skip_reason(self, image: GcImage) -> Optional[Fate]:
        """Why ``freeSpace`` passes over an image: used at the GC time, or younger than the minimum age."""
        if image.last_used is not None and image.last_used >= self.now:
            return Fate.USED_NOW
        if _too_young(image, self.settings, self.now):
            return Fate.TOO_YOUNG
        return None

    def _age_step(self, candidates: Sequence[GcImage]) -> list[GcImage]:
        """``freeOldImages``: past the maximum age by lastUsed, minimum age not consulted."""
        max_age = self.settings.max_age
        if max_age <= timedelta(0):
            return []
        if self.kubelet_started is not None and self.now - self.kubelet_started <= max_age:
            return []
        return [image for image in candidates if image.last_used is None or self.now - image.last_used > max_age]

    def _threshold_target(self) -> Optional[int]:
        """The threshold step's ``amountToFree``, or None when it does not run (sets the outcome)."""
        if self.mode == "all_unused":
            return None
        capacity = self.fs.capacity_bytes
        if capacity <= 0:
            self.outcome, self.message = Outcome.INVALID_CAPACITY, INVALID_CAPACITY_MESSAGE
            return None
        # cadvisor's sample (every 10-15 s) predates the age step: its deletions are not seen.
        available = min(capacity, self.fs.available)
        self.threshold_usage = ImageFs(capacity, available).usage_percent
        if self.threshold_usage < self.settings.high_threshold_percent:
            return None
        self.amount_to_free = capacity * (100 - self.settings.low_threshold_percent) // 100 - available
        return self.amount_to_free

    def _free_space(self, remaining: Sequence[GcImage], bytes_to_free: Optional[int]) -> dict[str, Fate]:
        """``freeSpace``: skip used-now and too-young images, stop once the freed total reaches the target."""
        fates: dict[str, Fate] = {}
        freed = 0
        for image in remaining:
            skip = self._skip_reason(image)
            if skip is not None:
                fates[image.id] = skip
                continue
            fates[image.id] = Fate.DELETED_SPACE
            freed += image.size
            if bytes_to_free is not None and freed >= bytes_to_free:
                break
        if bytes_to_free is not None:
            self._judge(bytes_to_free, freed)
        return fates

    def _judge(self, bytes_to_free: int, freed: int) -> None:
        if freed >= bytes_to_free:
            self.outcome = Outcome.FREED_ENOUGH
        else:
            self.outcome = Outcome.SHORTFALL
            capacity = format_size(self.fs.capacity_bytes)
            self.message = SHORTFALL_MESSAGE.format(usage=self.threshold_usage, capacity=capacity, freed=freed)


def format_size(size: int) -> str:
    """The kubelet's ``formatSize``: B below 1 KiB, else one decimal of the largest unit up to TiB."""
    if size < 1024:
        return f"{size} B"
    for unit, scale in (("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)):
        if size < scale * 1024:
            return f"{size / scale:.1f} {unit}"
    return f"{size / (1 << 40):.1f} TiB"


def _too_young(image: GcImage, settings: GcSettings, now: datetime) -> bool:
    return now - image.first_detected < settings.min_age


# A deleted image's turn, the freed total after it, and the available bytes after it.
_Turn = tuple[Optional[int], Optional[int], Optional[int]]


def _order_entries(candidates: Sequence[GcImage], fates: Mapping[str, Fate], fs: ImageFs) -> tuple[OrderEntry, ...]:
    turns = _deletion_turns(candidates, fates, fs)
    entries = []
    for position, image in enumerate(candidates, start=1):
        turn: _Turn = turns.get(image.id, (None, None, None))
        tie = _tied(candidates, position - 1)
        entries.append(OrderEntry(position, image, fates[image.id], *turn, tie=tie))
    return tuple(entries)


def _deletion_turns(candidates: Sequence[GcImage], fates: Mapping[str, Fate], fs: ImageFs) -> dict[str, _Turn]:
    """Per deleted image: its turn (the age step deletes first), the freed total and available bytes after it."""
    deleted = [image for image in candidates if fates[image.id] is Fate.DELETED_AGE]
    deleted += [image for image in candidates if fates[image.id] is Fate.DELETED_SPACE]
    turns: dict[str, _Turn] = {}
    total = 0
    for turn, image in enumerate(deleted, start=1):
        total += image.size
        turns[image.id] = (turn, total, min(fs.capacity_bytes, fs.available + total))
    return turns


def _tied(candidates: Sequence[GcImage], index: int) -> bool:
    key = eviction_key(candidates[index])[:3]
    neighbours = [candidates[i] for i in (index - 1, index + 1) if 0 <= i < len(candidates)]
    return any(eviction_key(other)[:3] == key for other in neighbours)


def _protections(
    images: Iterable[GcImage],
    users: Mapping[str, tuple[GcContainer, ...]],
    order: Sequence[OrderEntry],
    settings: GcSettings,
    now: datetime,
) -> tuple[ProtectedImage, ...]:
    fates = {entry.image.id: entry.fate for entry in order}
    protected = []
    for image in images:
        fate = fates.get(image.id)
        if fate is not None and fate.deleted:
            continue
        reasons = _reasons(image, users, fate, settings, now)
        if reasons:
            eligible_at = image.first_detected + settings.min_age if Protection.TOO_YOUNG in reasons else None
            protected.append(ProtectedImage(image, reasons, users.get(image.id, ()), eligible_at))
    return tuple(protected)


def _reasons(
    image: GcImage,
    users: Mapping[str, tuple[GcContainer, ...]],
    fate: Optional[Fate],
    settings: GcSettings,
    now: datetime,
) -> tuple[Protection, ...]:
    found = []
    if image.id in users or fate is Fate.USED_NOW:
        found.append(Protection.IN_USE)
    if image.pinned:
        found.append(Protection.PINNED)
    if _too_young(image, settings, now):
        found.append(Protection.TOO_YOUNG)
    return tuple(found)


def _at_risk(
    wanted: Mapping[str, str],
    listed: Mapping[str, GcImage],
    users: Mapping[str, tuple[GcContainer, ...]],
    order: Sequence[OrderEntry],
    protected: Sequence[ProtectedImage],
) -> tuple[tuple[AtRisk, ...], tuple[str, ...]]:
    by_id = {entry.image.id: entry for entry in order}
    reasons = {item.image.id: item.reasons for item in protected}
    risks = []
    for image_id, because in wanted.items():
        image = listed.get(image_id)
        if image is None or image.pinned:
            continue
        entry = by_id.get(image_id)
        shield = tuple(reason for reason in reasons.get(image_id, ()) if reason is not Protection.PINNED)
        risks.append(AtRisk(image, because, entry.position if entry else None, entry.fate if entry else None, shield))
    risks.sort(key=lambda risk: (risk.position is None, risk.position or 0, risk.image.id))
    missing = tuple(sorted(image_id for image_id in wanted if image_id not in listed))
    return tuple(risks), missing


def _unmatched(containers: Iterable[GcContainer], listed: Mapping[str, GcImage]) -> tuple[UnmatchedContainer, ...]:
    refs = {ref: image.id for image in listed.values() for ref in image.refs}
    found = []
    for container in containers:
        if container.kubelet_image_id in listed:
            continue
        ref_of = refs.get(container.image_ref) or refs.get(container.image)
        found.append(UnmatchedContainer(container, ref_of))
    return tuple(found)

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

A delete the runtime refuses (``refusals``: its ``RemoveImage`` fails, say Docker's conflict
with a container outside Kubernetes): ``freeOldImages`` tries every image past the maximum
age, then returns the errors, and ``GarbageCollect`` returns before its threshold step;
``freeSpace`` goes on with the next image, counts nothing for the refused one, and returns the
errors at its end, so the run ends in that error instead of ``FreeDiskSpaceFailed``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Optional

# The model's data lives in gc/records.py; its names are the model's vocabulary, so they are
# importable from here too.
from pinctl.gc.records import (
    DEFAULT_HIGH_THRESHOLD_PERCENT,
    DEFAULT_LOW_THRESHOLD_PERCENT,
    DEFAULT_MAX_AGE,
    DEFAULT_MIN_AGE,
    AtRisk,
    ContainerState,
    Fate,
    GcContainer,
    GcImage,
    GcMode,
    GcPlan,
    GcSettings,
    GcSettingsError,
    ImageFs,
    OrderEntry,
    Outcome,
    Percent,
    ProtectedImage,
    Protection,
    SkippedThreshold,
    UnmatchedContainer,
)
from pinctl.gc.ties import tie_groups

# The FreeDiskSpaceFailed event's text from kubelet 1.35 on (usage before the threshold step, capacity
# as formatSize); docs/gc-model.md has the text before 1.35.
SHORTFALL_MESSAGE = (
    "Insufficient free disk space on the node's image filesystem ({usage}% of {capacity} used). "
    "Failed to free sufficient space by deleting unused images (freed {freed} bytes). "
    "Investigate disk usage, as it could be used by active images, logs, volumes, or other data."
)
INVALID_CAPACITY_MESSAGE = "invalid capacity 0 on image filesystem"
# The errors GarbageCollect returns when the runtime refuses a delete; the runtime's own error
# texts follow the colon (each RemoveImage's, joined by the kubelet's aggregate).
AGE_REFUSED_MESSAGE = "wanted to free images older than {max_age}, encountered errors in image deletion: "
SPACE_REFUSED_MESSAGE = "wanted to free {amount} bytes, but freed {freed} bytes space with errors in image deletion: "
# DeleteUnusedImages asks freeSpace for math.MaxInt64 bytes.
ALL_UNUSED_AMOUNT = (1 << 63) - 1


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
    refusals: Optional[Mapping[str, str]] = None,
) -> GcPlan:
    """Model one kubelet GC run (``GarbageCollect``, or ``DeleteUnusedImages`` for ``all_unused``).

    ``kubelet_started`` gates the maximum-age step (the kubelet waits until it has run longer than
    the maximum age); unknown means assume it has. ``wanted`` maps image ids to why they should
    stay (pinctl labels, policy): those the runtime does not pin are reported in ``at_risk``.
    ``simulated_usage`` replaces the filesystem's available bytes so usage is that percent.
    ``refusals`` maps image ids to why the runtime will refuse to delete them.
    """
    settings.validate()
    listed = _unique(images)
    containers = tuple(containers)
    users = _users_by_image(containers, listed)
    used_fs = fs.at_usage(simulated_usage) if simulated_usage is not None else fs
    refused = refusals or {}
    run = _Run(settings, used_fs, now, kubelet_started, mode, refused)
    candidates = eviction_order(listed.values(), users)
    fates = run.fates(candidates)
    order = _order_entries(candidates, fates, used_fs, refused)
    ties = tie_groups(order, run.amount_to_free)
    tied = {image_id for tie in ties for image_id in tie.image_ids}
    if tied:  # most nodes have none: no pass over the order then
        order = tuple(replace(entry, tie=True) if entry.image.id in tied else entry for entry in order)
    protected = _protections(listed.values(), users, order, settings, now)
    may_go = {image_id for tie in ties if tie.straddled for image_id in tie.image_ids}
    at_risk, missing = _at_risk(wanted or {}, listed, users, order, protected, may_go)
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
        ties=ties,
        skipped_threshold=run.skipped,
    )


def eviction_order(images: Iterable[GcImage], users: Mapping[str, Sequence[GcContainer]]) -> list[GcImage]:
    """Images neither in use nor pinned, oldest lastUsed first, ties by firstDetected.

    Never-used images (``last_used`` None, the kubelet's zero time) come first. Images equal on
    both have no defined order in the kubelet; here the image id decides, for stable output.
    """
    eligible = [image for image in images if image.id not in users and not image.pinned]
    return sorted(eligible, key=eviction_key)


def eviction_key(image: GcImage) -> tuple[bool, datetime, datetime, int, str]:
    """Where an image comes in the kubelet's order; prune lists the images it keeps by it too.

    Within a tie (equal ``kubelet_rank``) the kubelet's order is chance; pinctl's pick, the one
    ``prune`` makes, is the largest image first (the fewest deletions for the space), then the
    image id."""
    return (*image.kubelet_rank, -image.size, image.id)


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
        self, settings: GcSettings, fs: ImageFs, now: datetime, kubelet_started: Optional[datetime], mode: GcMode,
        refusals: Mapping[str, str],
    ) -> None:
        self.settings, self.fs, self.now, self.kubelet_started, self.mode = settings, fs, now, kubelet_started, mode
        self.refusals = refusals
        self.outcome = Outcome.ALL_UNUSED if mode == "all_unused" else Outcome.BELOW_THRESHOLD
        self.threshold_usage: Optional[int] = None
        self.amount_to_free: Optional[int] = None
        self.message: Optional[str] = None
        self.skipped: Optional[SkippedThreshold] = None

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
        fates.update({image.id: Fate.REFUSED_AGE if image.id in self.refusals else Fate.DELETED_AGE for image in aged})
        # freeOldImages hands on what it did not delete: the refused images too.
        remaining = [image for image in candidates if fates[image.id] in (Fate.NOT_REACHED, Fate.REFUSED_AGE)]
        if any(image.id in self.refusals for image in aged):
            self._age_step_refused(remaining)
            return
        bytes_to_free = self._threshold_target()
        if bytes_to_free is not None or self.mode == "all_unused":
            fates.update(self._free_space(remaining, bytes_to_free))

    def _age_step_refused(self, remaining: Sequence[GcImage]) -> None:
        """The run ends with the age step's error: no disk figures are read, no threshold step
        runs. What that step would have done, had the usage called for it, is kept apart."""
        self.outcome = Outcome.AGE_STEP_REFUSED
        self.message = AGE_REFUSED_MESSAGE.format(max_age=go_duration(self.settings.max_age))
        figures = _Run(self.settings, self.fs, self.now, self.kubelet_started, self.mode, self.refusals)
        bytes_to_free = figures._threshold_target()
        if bytes_to_free is None or figures.threshold_usage is None:
            return
        would = figures._free_space(remaining, bytes_to_free)
        deleted = [image for image in remaining if would.get(image.id) is Fate.DELETED_SPACE]
        freed = sum(image.size for image in deleted)
        self.skipped = SkippedThreshold(figures.threshold_usage, bytes_to_free, tuple(image.id for image in deleted),
                                        freed, freed >= bytes_to_free)

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
        refused = False
        for image in remaining:
            skip = self._skip_reason(image)
            if skip is not None:
                fates[image.id] = skip
                continue
            if image.id in self.refusals:  # tried, refused, not counted: on to the next
                fates[image.id] = Fate.REFUSED_SPACE
                refused = True
                continue
            fates[image.id] = Fate.DELETED_SPACE
            freed += image.size
            if bytes_to_free is not None and freed >= bytes_to_free:
                break
        if refused:
            # The error ends the run before the shortfall check: no FreeDiskSpaceFailed.
            if bytes_to_free is not None:
                self.outcome = Outcome.SPACE_STEP_REFUSED
            amount = ALL_UNUSED_AMOUNT if bytes_to_free is None else bytes_to_free
            self.message = SPACE_REFUSED_MESSAGE.format(amount=amount, freed=freed)
        elif bytes_to_free is not None:
            self._judge(bytes_to_free, freed)
        return fates

    def _judge(self, bytes_to_free: int, freed: int) -> None:
        if freed >= bytes_to_free:
            self.outcome = Outcome.FREED_ENOUGH
        else:
            self.outcome = Outcome.SHORTFALL
            capacity = format_size(self.fs.capacity_bytes)
            self.message = SHORTFALL_MESSAGE.format(usage=self.threshold_usage, capacity=capacity, freed=freed)


def go_duration(value: timedelta) -> str:
    """Go's ``time.Duration.String``, as the kubelet's messages print a duration: 4m0s, 1h0m0s, 1m30s, 1.5s."""
    micros = abs(value // timedelta(microseconds=1))
    sign = "-" if value < timedelta(0) else ""
    if micros == 0:
        return "0s"
    if micros < 1_000_000:
        unit, scale = ("ms", 1000) if micros >= 1000 else ("µs", 1)
        return sign + _decimal(micros, scale) + unit
    hours, rest = divmod(micros, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    seconds = _decimal(rest, 1_000_000) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    return f"{sign}{minutes}m{seconds}" if minutes else sign + seconds


def _decimal(value: int, scale: int) -> str:
    whole, fraction = divmod(value, scale)
    if not fraction:
        return str(whole)
    digits = len(str(scale)) - 1
    return f"{whole}.{fraction:0{digits}d}".rstrip("0")


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


def _order_entries(candidates: Sequence[GcImage], fates: Mapping[str, Fate], fs: ImageFs,
                   refusals: Mapping[str, str]) -> tuple[OrderEntry, ...]:
    turns = _deletion_turns(candidates, fates, fs)
    entries = []
    for position, image in enumerate(candidates, start=1):
        turn: _Turn = turns.get(image.id, (None, None, None))
        entries.append(OrderEntry(position, image, fates[image.id], *turn,  # ties: gc/ties.py
                                  refused_because=refusals.get(image.id)))
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
    may_go: Collection[str] = (),
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
        risks.append(AtRisk(image, because, entry.position if entry else None, entry.fate if entry else None, shield,
                            may_go=image_id in may_go))
    risks.sort(key=lambda risk: (risk.position is None, risk.position or 0, risk.image.id))
    missing = tuple(sorted(image_id for image_id in wanted if image_id not in listed))
    return tuple(risks), missing


def _unmatched(containers: Iterable[GcContainer], listed: Mapping[str, GcImage]) -> tuple[UnmatchedContainer, ...]:
    alone = [container for container in containers if container.kubelet_image_id not in listed]
    if not alone:  # most nodes: no index of every name needed
        return ()
    refs = {ref: image.id for image in listed.values() for ref in image.refs}
    return tuple(UnmatchedContainer(container, refs.get(container.image_ref) or refs.get(container.image))
                 for container in alone)

"""The kubelet's eviction manager on disk signals: whether it calls ``DeleteUnusedImages`` now.

Pure: the caller passes the kubelet config's eviction maps and the filesystems' statfs figures.
Read from kubelet v1.37 (``pkg/kubelet/eviction``, ``cmd/kubelet/app/server.go``); docs/gc-model.md
says each step:

* thresholds: ``evictionHard`` from the config file; absent (or null) it is the Linux defaults
  (``defaults_linux.go``); a map that is set replaces them unless ``mergeDefaultEvictionSettings``
  is true (``loadConfigFile``). ``evictionSoft`` needs a grace period per signal
  (``ParseThresholdConfig``). ``0%`` and ``100%`` are ignored; other percentages are float32;
* every 10 s (``evictionMonitoringPeriod``) a threshold is met when the signal's available
  bytes (or inodes) are less than it (``thresholdsMet``): a percentage of the capacity, as
  ``int64(float64(capacity) * float64(percentage))``, or a quantity;
* what a met threshold reclaims (``buildSignalToNodeReclaimFuncs``): imagefs signals delete
  dead containers, then every unused image (``DeleteUnusedImages``); nodefs signals do the same
  only when the image filesystem is the root dir's (no dedicated imagefs), else they delete no
  image. A soft threshold acts once it has held for its grace period.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from fractions import Fraction
from typing import Any, Callable, Optional, Sequence

from pinctl.errors import ConfigError
from pinctl.gc.model import AtRisk, GcImage, GcPlan, Protection

# pkg/kubelet/eviction/defaults_linux.go: what a config file without evictionHard gets.
DEFAULT_EVICTION_HARD: Mapping[str, str] = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
    "imagefs.inodesFree": "5%",
}
IMAGEFS, NODEFS = "imagefs", "nodefs"
# Disk signals -> (filesystem, measure): what pinctl evaluates.
DISK_SIGNALS = {
    "imagefs.available": (IMAGEFS, "bytes"),
    "imagefs.inodesFree": (IMAGEFS, "inodes"),
    "nodefs.available": (NODEFS, "bytes"),
    "nodefs.inodesFree": (NODEFS, "inodes"),
}
# Valid signals pinctl does not evaluate: memory and pids free no image; containerfs takes the
# imagefs or nodefs thresholds and figures on containerd (UpdateContainerFsThresholds).
OTHER_SIGNALS = ("memory.available", "allocatableMemory.available", "pid.available", "containerfs.available",
                 "containerfs.inodesFree")
_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


@dataclass(frozen=True)
class EvictionConfig:
    """The kubelet config's eviction fields as written (None: not set) and where they came from."""

    hard: Any = None  # evictionHard
    soft: Any = None  # evictionSoft
    grace: Any = None  # evictionSoftGracePeriod
    merge_defaults: Any = False  # mergeDefaultEvictionSettings
    where: str = ""  # the config file, or "" when none was read


@dataclass(frozen=True)
class Threshold:
    signal: str
    text: str  # as written: 15%, 100Mi
    percentage: Optional[float]  # the kubelet's float32 fraction (0.15), or None for a quantity
    quantity: Optional[Fraction]  # bytes or inodes
    grace: Optional[timedelta]  # None: hard
    source: str

    @property
    def hard(self) -> bool:
        return self.grace is None

    def value(self, capacity: int) -> Fraction:
        """The threshold in bytes (or inodes) for this capacity (``GetThresholdQuantity``)."""
        if self.quantity is not None:
            return self.quantity
        return Fraction(int(float(capacity) * float(self.percentage or 0.0)))


@dataclass(frozen=True)
class FsFigures:
    """One filesystem as cadvisor reads it (statfs): bytes and inodes, and its device."""

    capacity_bytes: int
    available_bytes: int
    inodes: Optional[int] = None  # None: not read
    inodes_free: Optional[int] = None
    device: Optional[int] = None
    source: str = ""

    def measure(self, what: str) -> Optional[tuple[int, int]]:
        """(available, capacity) of bytes or inodes; None when not read."""
        if what == "inodes":
            return None if self.inodes is None or self.inodes_free is None else (self.inodes_free, self.inodes)
        return max(0, min(self.available_bytes, self.capacity_bytes)), self.capacity_bytes


@dataclass(frozen=True)
class SignalCheck:
    """One threshold against its filesystem now."""

    threshold: Threshold
    filesystem: str  # imagefs or nodefs
    available: Optional[int]  # None: the filesystem was not measured
    capacity: Optional[int]
    threshold_value: Optional[int]
    met: bool
    reclaims_images: bool  # a met one makes the eviction manager call DeleteUnusedImages
    fs_source: str

    @property
    def inodes(self) -> bool:
        return DISK_SIGNALS[self.threshold.signal][1] == "inodes"

    @property
    def headroom(self) -> Optional[int]:
        """How far above the threshold the signal is (negative: past it)."""
        if self.available is None or self.threshold_value is None:
            return None
        return self.available - self.threshold_value


@dataclass(frozen=True)
class EvictionCheck:
    """Every disk threshold, and whether the eviction manager deletes unused images because of one."""

    signals: tuple[SignalCheck, ...]
    dedicated_imagefs: Optional[bool]  # None: the root dir's filesystem is unknown
    config_source: str

    @property
    def deletes_now(self) -> bool:
        """A hard threshold that reclaims images is met: DeleteUnusedImages at the next check."""
        return any(s.met and s.reclaims_images and s.threshold.hard for s in self.signals)

    @property
    def met(self) -> bool:
        """Some threshold that reclaims images is met (a soft one: once it holds for its grace)."""
        return any(s.met and s.reclaims_images for s in self.signals)

    @property
    def grace(self) -> Optional[timedelta]:
        """The shortest grace period among met soft thresholds that reclaim images."""
        periods = [s.threshold.grace for s in self.signals if s.met and s.reclaims_images and s.threshold.grace]
        return min(periods) if periods else None

    @property
    def closest(self) -> Optional[SignalCheck]:
        """The image-reclaiming threshold nearest to (or furthest past) being met."""
        measured = [s for s in self.signals if s.reclaims_images and s.headroom is not None and s.capacity]
        return min(measured, key=lambda s: Fraction(s.headroom or 0, s.capacity or 1), default=None)


def parse_quantity(text: str) -> Fraction:
    """A Kubernetes quantity: 100Mi, 1.5Gi, 500M, 2e3, 1024."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a quantity; write it like 100Mi, 2Gi or 500M")
    number, suffix = Fraction(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return number * 1024 ** _BINARY[suffix]
    exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])
    return number * Fraction(10) ** exponent


def _float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def parse_threshold(signal: str, text: str, grace: Optional[timedelta], source: str) -> Optional[Threshold]:
    """One statement (``parseThresholdStatement``); None for what the kubelet ignores (0%, 100%)."""
    value = text.strip()
    if value.endswith("%"):
        if value in ("0%", "100%"):
            return None
        try:
            # strconv.ParseFloat(s, 32), then float32(value) / 100 in float32.
            percentage = _float32(_float32(float(value[:-1])) / 100)
        except ValueError:
            raise ValueError(f"{text!r} is not a percentage") from None
        if not 0 <= percentage <= 1:
            raise ValueError(f"{text!r} must be between 0% and 100%")
        return Threshold(signal, value, percentage, None, grace, source)
    quantity = parse_quantity(value)
    if quantity <= 0:
        raise ValueError(f"{text!r} must be positive")
    return Threshold(signal, value, None, quantity, grace, source)


def thresholds(config: EvictionConfig, parse_duration: Callable[[str], timedelta]) -> list[Threshold]:
    """The disk thresholds the kubelet runs with, hard then soft, each with where it came from.
    parse_duration: Go durations (pinctl.gc.kubelet's), passed in to keep imports pointing down."""
    where = config.where
    hard = _statements(config.hard, "evictionHard", where)
    if config.hard is None:
        hard = {signal: (value, "kubelet default") for signal, value in DEFAULT_EVICTION_HARD.items()}
    elif config.merge_defaults is True:
        defaults = {s: (v, "kubelet default (mergeDefaultEvictionSettings)") for s, v in DEFAULT_EVICTION_HARD.items()}
        hard = {**defaults, **hard}
    soft = _statements(config.soft, "evictionSoft", where)
    graces = _statements(config.grace, "evictionSoftGracePeriod", where)
    found: list[Threshold] = []
    for kind, statements in (("evictionHard", hard), ("evictionSoft", soft)):
        for signal, (text, source) in sorted(statements.items()):
            grace = None
            if kind == "evictionSoft":
                if signal not in graces:
                    raise ConfigError(f"kubelet config {where}: evictionSoft {signal} has no evictionSoftGracePeriod",
                                      "give it one, as the kubelet requires")
                grace = _grace(graces[signal][0], signal, where, parse_duration)
            threshold = _parse(signal, text, grace, source, kind, where)
            if threshold is not None and signal in DISK_SIGNALS:
                found.append(threshold)
    return found


def _statements(raw: Any, key: str, where: str) -> dict[str, tuple[str, str]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(isinstance(v, str) for v in raw.values()):
        raise ConfigError(f"kubelet config {where}: {key} must map signals to strings like \"15%\", got {raw!r}",
                          "fix the file")
    return {str(signal): (value, f"{where} {key}") for signal, value in raw.items()}


def _parse(signal: str, text: str, grace: Optional[timedelta], source: str, key: str,
           where: str) -> Optional[Threshold]:
    if signal not in DISK_SIGNALS and signal not in OTHER_SIGNALS:
        raise ConfigError(f"kubelet config {where}: {key} has an unknown eviction signal {signal!r}",
                          "the kubelet refuses it: fix the file")
    try:
        return parse_threshold(signal, text, grace, source)
    except ValueError as err:
        raise ConfigError(f"kubelet config {where}: {key} {signal}: {err}", "fix the file") from None


def _grace(text: str, signal: str, where: str, parse_duration: Callable[[str], timedelta]) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as err:
        raise ConfigError(f"kubelet config {where}: evictionSoftGracePeriod {signal}: {err}", "fix the file") from None


def check(found: Sequence[Threshold], imagefs: FsFigures, nodefs: Optional[FsFigures], nodefs_why: str = "",
          config_source: str = "") -> EvictionCheck:
    """Each threshold against its filesystem. nodefs: the kubelet's root dir's filesystem, None
    when it could not be read (nodefs_why says why)."""
    dedicated = None
    if nodefs is not None and imagefs.device is not None and nodefs.device is not None:
        dedicated = imagefs.device != nodefs.device
    signals = []
    for threshold in found:
        filesystem, measure = DISK_SIGNALS[threshold.signal]
        figures = imagefs if filesystem == IMAGEFS else nodefs
        # Without a dedicated imagefs, nodefs pressure deletes unused images too.
        reclaims = filesystem == IMAGEFS or dedicated is False
        measured = figures.measure(measure) if figures is not None else None
        if figures is None or measured is None:
            why = nodefs_why if figures is None else f"{figures.source}: no inode figures"
            signals.append(SignalCheck(threshold, filesystem, None, None, None, False, reclaims, why))
            continue
        available, capacity = measured
        value = threshold.value(capacity)
        signals.append(SignalCheck(threshold, filesystem, available, capacity, int(value), value > available,
                                   reclaims, figures.source))
    return EvictionCheck(tuple(signals), dedicated, config_source)


@dataclass(frozen=True)
class EvictionReport:
    """The thresholds now, and what ``DeleteUnusedImages`` deletes when one that reclaims images is met."""

    check: EvictionCheck
    plan: Optional[GcPlan] = None  # mode all_unused; None while no such threshold is met

    @property
    def wanted_deleted(self) -> tuple[AtRisk, ...]:
        return self.plan.wanted_deleted if self.plan is not None else ()

    @property
    def kept_by_dead_containers(self) -> tuple[GcImage, ...]:
        """Images the pass keeps only for containers that are not running, unpinned and old
        enough: ``DeleteAllUnusedContainers`` runs first and removes the dead containers of
        terminated pods and of pods the kubelet does not know (all but one per container of a
        live pod), which the CRI does not tell apart; then the pass deletes these too."""
        if self.plan is None:
            return ()
        return tuple(item.image for item in self.plan.protected
                     if item.reasons == (Protection.IN_USE,) and item.containers
                     and all(c.state != "running" for c in item.containers))

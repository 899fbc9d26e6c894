"""What the kubelet remembers of each image, estimated from what the runtime keeps. No I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Optional

from pinctl.gc.model import GcContainer, GcImage

ESTIMATE_NOTES = """\
pinctl cannot read the kubelet's memory; it estimates the two times the kubelet keeps per image.
In use: exact. Any container the runtime lists, in any state, protects its image, as in the
kubelet; such an image counts as used now.
Last used, for images no listed container uses: the kubelet remembers the last time it saw a
container use the image, but no runtime keeps that once the container is removed. pinctl treats
them as not used since the kubelet started, which is the kubelet's own view after a restart.
The kubelet may therefore place an image it saw in use recently later in its order than pinctl
does, and keep it past a maximum age that pinctl says it exceeds.
First detected: the kubelet notices an image at a detection pass, not when it arrives. Its
passes run when it starts and every 5 minutes after (two loops: image detection and the GC run
itself), and at each eviction under disk pressure. With the kubelet's start time known, an image
that was there before gets the start time (all of them tie: the kubelet's first pass sees them
together), and a later one the first 5-minute pass after its record was created; one no pass
has seen yet is first detected by the GC run itself, so it is below any minimum age at that
run. Without the start time, the record's creation time (on CRI-O, whose CRI gives no time,
when its image store stored the image's top layer). A pass under disk pressure, or the
drift of the kubelet's loops (each period starts when the previous pass ends), can make the
kubelet's time earlier than pinctl's by up to one period: pinctl then keeps an image the kubelet
may delete, never the other way round.
Sizes and disk: the kubelet counts the CRI size (compressed content), not unpacked snapshots or
layers shared with other images, so the space a deletion frees on disk differs from its size."""


class TimeSource(str, Enum):
    """Where an estimated time came from."""

    IN_USE_NOW = "in_use_now"  # last used: a listed container uses it, so the kubelet sets now
    HISTORY = "history"  # last used: the caller's own record of when it last saw a user
    UNKNOWN = "unknown"  # last used: never seen in use; the kubelet's zero time after a restart
    IMAGE_CREATED = "image_created"  # first detected: when the image ID came (gc/plan.py observe)
    KUBELET_START = "kubelet_start"  # first detected: the kubelet started after the image appeared
    DETECTION_PASS = "detection_pass"  # first detected: the kubelet's first 5-minute pass after it appeared
    NOT_DETECTED = "not_detected"  # first detected: by the run itself (no pass since it appeared)
    NOW = "now"  # first detected: no creation time known; treated as just appeared


# The kubelet's image detection loop (``realImageGCManager.Start``) and its GC loop
# (``ImageGCPeriod``): both run at its start and then every 5 minutes, constants in its code.
DETECTION_PERIOD = timedelta(minutes=5)


@dataclass(frozen=True)
class ObservedImage:
    """An image as the runtime shows it."""

    id: str
    size: int
    refs: tuple[str, ...] = ()
    pinned: bool = False
    # The earliest creation time among the runtime's records (refs) for this image id.
    created_at: Optional[datetime] = None


@dataclass(frozen=True)
class ObservedContainer(GcContainer):
    """A container as the runtime shows it: the list entry plus its status times."""

    created_at: Optional[datetime] = None
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None

    def as_gc_container(self) -> GcContainer:
        return GcContainer(self.id, self.image_ref, self.state, self.image_id, self.image, self.name, self.pod,
                           self.image_mounts)

    @property
    def last_activity(self) -> Optional[datetime]:
        """The latest of created, started, finished (containerd may record a start after the finish)."""
        times = [time for time in (self.created_at, self.started_at, self.finished_at) if time is not None]
        return max(times) if times else None


@dataclass(frozen=True)
class Estimate:
    """An image with estimated kubelet times, and where each came from."""

    image: GcImage
    first_detected_source: TimeSource
    last_used_source: TimeSource
    # The latest activity among the containers using it (display only; any state protects).
    last_container_activity: Optional[datetime] = None


def estimate_images(
    images: Iterable[ObservedImage],
    containers: Iterable[ObservedContainer],
    now: datetime,
    *,
    kubelet_started: Optional[datetime] = None,
    history: Optional[Mapping[str, datetime]] = None,
) -> list[Estimate]:
    """``GcImage`` records as the kubelet would hold them, from what the runtime shows (see ESTIMATE_NOTES)."""
    users: dict[str, list[ObservedContainer]] = {}
    for container in containers:
        users.setdefault(container.as_gc_container().kubelet_image_id, []).append(container)
    unused: list[ObservedContainer] = []  # shared: most images have no container
    return [_estimate(image, users.get(image.id, unused), now, kubelet_started, history or {}) for image in images]


def _estimate(
    image: ObservedImage,
    users: Sequence[ObservedContainer],
    now: datetime,
    kubelet_started: Optional[datetime],
    history: Mapping[str, datetime],
) -> Estimate:
    first, first_source = _first_detected(image, now, kubelet_started)
    last_used: Optional[datetime]
    if users:
        last_used, last_source = now, TimeSource.IN_USE_NOW
    elif image.id in history:
        last_used, last_source = history[image.id], TimeSource.HISTORY
    else:
        last_used, last_source = None, TimeSource.UNKNOWN
    activity = [time for time in (user.last_activity for user in users) if time is not None] if users else None
    gc_image = GcImage(image.id, image.size, first, last_used, image.refs, image.pinned)
    return Estimate(gc_image, first_source, last_source, max(activity) if activity else None)


def _first_detected(
    image: ObservedImage, now: datetime, kubelet_started: Optional[datetime]
) -> tuple[datetime, TimeSource]:
    if image.created_at is None:
        return now, TimeSource.NOW
    if kubelet_started is None:
        return image.created_at, TimeSource.IMAGE_CREATED
    if kubelet_started >= image.created_at:
        return kubelet_started, TimeSource.KUBELET_START
    # The first pass at or after the record's creation: start + k periods.
    periods = -((kubelet_started - image.created_at) // DETECTION_PERIOD)
    detected = kubelet_started + periods * DETECTION_PERIOD
    if detected > now:
        return now, TimeSource.NOT_DETECTED
    return detected, TimeSource.DETECTION_PASS

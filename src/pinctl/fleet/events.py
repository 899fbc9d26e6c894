"""Events an agent records on its Node, deduplicated and rate-limited as the kubelet's are. Pure.

client-go's recorder, which the kubelet uses, does two things worth copying: an event that
repeats (same object, type, reason and message) is not created again but counted on the first
one (its count and lastTimestamp patched), and a source gets a burst of 25 events, then one
per 5 minutes, so a node that flaps does not flood the API server. `kubectl get events` then
shows one line per distinct event with how often and when it last happened.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Final, Optional, Sequence

from pinctl.fleet.condition import rfc3339
from pinctl.model import ACTION_PINNED, ACTION_PRUNED, ACTION_UNPINNED, ItemResult

NORMAL: Final = "Normal"
WARNING: Final = "Warning"
COMPONENT: Final = "pinctl"
# client-go's defaults (tools/record: the spam filter's burst and refill, the correlator's cache).
BURST = 25
REFILL_S = 300.0
REMEMBERED = 4096
NAMES_SHOWN = 3


@dataclass(frozen=True)
class NodeEvent:
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Create:
    body: dict[str, Any]
    key: tuple[str, str, str]


@dataclass(frozen=True)
class Count:
    name: str
    patch: dict[str, Any]


class EventBook:
    """What to send for each event: a new Event, a count on an earlier one, or nothing (over the rate)."""

    def __init__(self, node: str, namespace: str, clock: Callable[[], float]) -> None:
        self.node, self.namespace, self.clock = node, namespace, clock
        self._tokens = float(BURST)
        self._refilled = clock()
        self._seen: OrderedDict[tuple[str, str, str], tuple[str, int]] = OrderedDict()

    def next(self, event: NodeEvent, now: datetime) -> Optional[Create | Count]:
        if not self._take():
            return None
        key = (event.type, event.reason, event.message)
        seen = self._seen.get(key)
        stamp = rfc3339(now)
        if seen is not None:
            name, count = seen
            self._seen[key] = (name, count + 1)
            self._seen.move_to_end(key)
            return Count(name, {"count": count + 1, "lastTimestamp": stamp})
        body = {
            "metadata": {"name": f"{self.node}.{int(now.timestamp() * 1e9):x}", "namespace": self.namespace},
            # As the kubelet refers to its Node: kubectl describe node finds events by this uid.
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": self.node},
            "type": event.type, "reason": event.reason, "message": event.message,
            "source": {"component": COMPONENT, "host": self.node},
            "reportingComponent": COMPONENT, "reportingInstance": self.node,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        return Create(body, key)

    def created(self, key: tuple[str, str, str], name: str) -> None:
        self._seen[key] = (name, 1)
        while len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)

    def _take(self) -> bool:
        now = self.clock()
        self._tokens = min(float(BURST), self._tokens + (now - self._refilled) / REFILL_S)
        self._refilled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


def events_of_results(results: Sequence[ItemResult]) -> list[NodeEvent]:
    """One event per kind of change in a batch: pinned, unpinned, failed (names, then how many more)."""
    pinned = sorted({r.ref for r in results if r.action == ACTION_PINNED})
    unpinned = sorted({r.ref for r in results if r.action in (ACTION_UNPINNED, ACTION_PRUNED)})
    failed = sorted({r.ref for r in results if r.failed})
    found = []
    if pinned:
        found.append(NodeEvent(NORMAL, "Pinned", f"pinned {_names(pinned)}"))
    if unpinned:
        found.append(NodeEvent(NORMAL, "Unpinned", f"unpinned {_names(unpinned)}"))
    if failed:
        first = next(r for r in results if r.failed and r.ref == failed[0])
        found.append(NodeEvent(WARNING, "PinFailed", f"could not change the pin of {_names(failed)}: "
                                                     f"{' '.join(str(first.error).split())}"))
    return found


WANTED_IMAGE_DELETED: Final = "WantedImageDeleted"
WANTED_IMAGE_RESTORED: Final = "WantedImageRestored"
WANTED_IMAGE_NOT_RESTORED: Final = "WantedImageNotRestored"


def deletion_event(refs: Sequence[str], image_id: str, deleter: str, client: str = "") -> NodeEvent:
    """A wanted image was deleted: which, and by whom as far as the node can tell. The same image
    deleted again by the same deleter is the same message, so it is counted, not repeated."""
    named = [ref for ref in refs if not ref.startswith("sha256:")] or list(refs)
    who = f"{deleter} ({client})" if client and client != deleter else deleter
    short = image_id.split(":", 1)[-1][:12] if image_id else "unknown ID"
    return NodeEvent(WARNING, WANTED_IMAGE_DELETED,
                     f"wanted image {_names(sorted(named))} ({short}) was deleted by {who}; "
                     f"pinctl history {named[0] if named else short} on the node says why")


def restore_event(refs: Sequence[str], outcome_done: bool, how: str, detail: str = "") -> NodeEvent:
    """A wanted image deleted anyway was brought back (Normal), or could not be (Warning, with why)."""
    named = _names(sorted(ref for ref in refs if not ref.startswith("sha256:")) or list(refs))
    if outcome_done:
        return NodeEvent(NORMAL, WANTED_IMAGE_RESTORED, f"restored {named} ({how})")
    return NodeEvent(WARNING, WANTED_IMAGE_NOT_RESTORED, f"could not restore {named}: {' '.join(detail.split())}")


def _names(refs: Sequence[str]) -> str:
    shown = ", ".join(refs[:NAMES_SHOWN])
    return shown if len(refs) <= NAMES_SHOWN else f"{shown} and {len(refs) - NAMES_SHOWN} more"

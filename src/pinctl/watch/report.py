"""sync --watch --node-status: the agent's Node condition and Events, written by a thread of its own.

The periodic check (health.Checker) hands each round's figures to update(); the watch loop hands
its batches' results to results(). Neither waits on the API server: this thread writes when the
condition changed (a few seconds later, jittered, so a fleet that changed together does not
write in the same second) and otherwise once per heartbeat (5 minutes by default, as often as
the kubelet reports an unchanged node status). An API server that is away or refuses costs a
log line per distinct error and a retry with back-off, never the watch loop.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Sequence

from pinctl.check.compare import (MISMATCH_LABELS_IGNORED, MISMATCH_NOT_CAUGHT_UP, MISMATCH_NOT_RELOADED,
                                  MISMATCH_OVERRIDDEN, MISMATCH_WRONG_NAMESPACE, Mismatch)
from pinctl.errors import PinctlError
from pinctl.kubeapi import KubeForbidden
from pinctl.fleet import events as node_events
from pinctl.fleet.condition import REASON_APPLIED, Condition, NodeReport, PolicyCounts, condition_of

if TYPE_CHECKING:
    from pinctl.model import ItemResult, LogFn
    from pinctl.watch.figures import Figures
    from pinctl.watch.health import WatchState

# A change is written this long after it was seen, at most (drawn at random per change).
CHANGE_JITTER_S = 5.0
# Heartbeats come every heartbeat x [1 - this, 1]: agents started together drift apart.
HEARTBEAT_JITTER = 0.2
RETRY_FIRST_S = 5.0
# Why an image a pattern covers is not kept, by the first mismatch the CRI check found.
WHY_IGNORED: tuple[tuple[Mismatch, str], ...] = (
    (MISMATCH_OVERRIDDEN, "a CRI-O drop-in sorting after pinctl's sets pinned_images"),
    (MISMATCH_NOT_RELOADED, "CRI-O has not re-read its files"),
    (MISMATCH_LABELS_IGNORED, "the runtime ignores the pin label"),
    (MISMATCH_WRONG_NAMESPACE, "labelled in a namespace the runtime's CRI does not read"),
    (MISMATCH_NOT_CAUGHT_UP, "labelled, but the runtime's CRI does not report it pinned"),
)


class StatusApi(Protocol):
    """What the reporter asks of the API server (backends.kube.KubeApi)."""

    def patch_node_status(self, node: str, patch: dict[str, Any]) -> None: ...

    def create_event(self, namespace: str, body: dict[str, Any]) -> str: ...

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None: ...


def report_of(found: Figures, state: WatchState, revision: str, reload_error: str) -> NodeReport:
    """One round's figures and the watcher's health, as the Node condition reports them."""
    ready = state.readiness()
    node = found.node
    if node is None:
        why = next(iter(found.errors.values()), "the node's images could not be read")
        return NodeReport(revision, PolicyCounts(), ready=False, not_ready_why=f"cannot read the images: {why}")
    policy = node.policy
    not_kept = policy.get("unpinned", 0) + policy.get("ignored", 0)
    pinned, absent = policy.get("pinned", 0), policy.get("absent", 0)
    counts = PolicyCounts(pinned + not_kept + absent, pinned, absent, not_kept)
    first, first_state = node.first_not_kept
    return NodeReport(revision, counts, first, _why(first_state, found) if first else "",
                      ready=ready.ok, not_ready_why=ready.reason, reload_failed="" if state.last_reload_ok else reload_error)


def _why(state: str, found: Figures) -> str:
    """The runtime's own reason first (a CRI-O drop-in overriding pinctl's makes its items vanish
    from the rows, so such an image looks merely unpinned); then what the state alone says."""
    mismatches = found.check.mismatches if found.check else {}
    for kind, why in WHY_IGNORED:
        if mismatches.get(kind):
            return why
    if state == "ignored":
        return "the runtime does not keep it (pinctl check on the node says why)"
    return "not pinned yet (the agent's log says why if a write failed)"


@dataclass
class _Written:
    condition: Condition
    transition: datetime


class NodeStatusReporter:
    def __init__(self, node: str, connect: Callable[[], StatusApi], heartbeat: float, log: LogFn,
                 events_namespace: str, clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 draw: Callable[[], float] = random.random) -> None:
        self.node, self.connect, self.heartbeat, self.log = node, connect, heartbeat, log
        self.clock, self.now, self.draw = clock, now, draw
        self.book = node_events.EventBook(node, events_namespace, clock)
        self.events_namespace = events_namespace
        self.writes = 0
        self._api: Optional[StatusApi] = None
        self._latest: Optional[NodeReport] = None
        self._written: Optional[_Written] = None
        self._pending: deque[node_events.NodeEvent] = deque(maxlen=256)
        self._change_due: Optional[float] = None
        self._beat_due = 0.0
        self._retry_at = 0.0
        self._retry_s = RETRY_FIRST_S
        self._last_error = ""
        self._guard = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- fed by the checker and the watch loop --------------------------------------------------

    def update(self, report: NodeReport) -> None:
        with self._guard:
            self._latest = report
        self._wake.set()

    def event(self, event: node_events.NodeEvent) -> None:
        """One event of the watcher's own (a wanted image deleted, restored): queued, then
        deduplicated and rate-limited with the rest."""
        with self._guard:
            self._pending.append(event)
        self._wake.set()

    def results(self, results: Sequence[ItemResult]) -> None:
        found = node_events.events_of_results(results)
        if found:
            with self._guard:
                self._pending.extend(found)
            self._wake.set()

    # -- the thread -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="pinctl-node-status", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            # A write in flight may take its timeout; the thread is a daemon, and pinctl stops
            # within 2 s of SIGTERM whatever the API server does.
            self._thread.join(1.0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.turn()
            except Exception as err:  # noqa: BLE001 - the thread must outlive any one write
                self.log("error", "node status: unexpected error", error=f"{type(err).__name__}: {err}")
            self._wake.wait(self._seconds_to_next())
            self._wake.clear()

    def turn(self) -> None:
        """Write what is due now: the condition if it changed (after its jitter) or its heartbeat
        is due, then the queued events. Public for tests, which drive it with a fake clock."""
        now = self.clock()
        if now < self._retry_at:
            return
        with self._guard:
            latest = self._latest
        if latest is not None:
            wanted = condition_of(latest)
            changed = self._written is None or self._written.condition != wanted
            if changed and self._change_due is None:
                self._change_due = now + self.draw() * CHANGE_JITTER_S
            if (changed and now >= (self._change_due or now)) or (not changed and now >= self._beat_due):
                if not self._send(lambda api: self._write(api, wanted), status=True):
                    self._send_events()  # a refused status write is itself an event, when Events are allowed
                    return
        self._send_events()

    def _write(self, api: StatusApi, wanted: Condition) -> None:
        stamp = self.now()
        before = self._written
        transition = before.transition if before and before.condition.status == wanted.status else stamp
        api.patch_node_status(self.node, wanted.as_patch(stamp, transition))
        self.writes += 1
        self._written = _Written(wanted, transition)
        self._change_due = None
        self._beat_due = self.clock() + self.heartbeat * (1 - HEARTBEAT_JITTER * self.draw())
        if before is None or before.condition != wanted:
            self.log("info", "node status written", node=self.node, status=wanted.status, reason=wanted.reason,
                     condition=wanted.message)
            event = _transition_event(before.condition if before else None, wanted)
            if event is not None:
                with self._guard:
                    self._pending.append(event)

    def _send_events(self) -> None:
        while True:
            with self._guard:
                if not self._pending:
                    return
                event = self._pending[0]
            step = self.book.next(event, self.now())
            if step is not None and not self._send(lambda api: self._event(api, step)):
                return
            with self._guard:
                if self._pending and self._pending[0] is event:
                    self._pending.popleft()

    def _event(self, api: StatusApi, step: node_events.Create | node_events.Count) -> None:
        if isinstance(step, node_events.Create):
            self.book.created(step.key, api.create_event(self.events_namespace, step.body))
        else:
            api.patch_event(self.events_namespace, step.name, step.patch)

    def _send(self, call: Callable[[StatusApi], None], status: bool = False) -> bool:
        try:
            if self._api is None:
                self._api = self.connect()
            call(self._api)
        except Exception as err:  # noqa: BLE001 - an API error, or a bug: either way, back off and go on
            said = str(err) if isinstance(err, PinctlError) else f"{type(err).__name__}: {err}"
            message = " ".join(said.split())
            if message != self._last_error:
                self.log("warning", "node status: cannot write", node=self.node, error=message)
                if status and isinstance(err, KubeForbidden):
                    with self._guard:
                        self._pending.append(node_events.NodeEvent(node_events.WARNING, "StatusWriteRefused", message))
            self._last_error = message
            self._retry_at = self.clock() + self._retry_s
            self._retry_s = min(self._retry_s * 2, max(RETRY_FIRST_S, self.heartbeat))
            return False
        if self._last_error:
            self.log("info", "node status: writing again", node=self.node)
        self._last_error, self._retry_s, self._retry_at = "", RETRY_FIRST_S, 0.0
        return True

    def _seconds_to_next(self) -> float:
        now = self.clock()
        due = [self._beat_due, self._retry_at]
        if self._change_due is not None:
            due.append(self._change_due)
        future = [when - now for when in due if when > now]
        return max(0.05, min(future)) if future else self.heartbeat


def _transition_event(before: Optional[Condition], after: Condition) -> Optional[node_events.NodeEvent]:
    """An event when the condition's reason changes, or a new revision is applied; not for counts alone."""
    if before is not None and before.reason == after.reason:
        if after.reason != REASON_APPLIED or _revision(before) == _revision(after):
            return None
    kind = node_events.NORMAL if after.reason == REASON_APPLIED else node_events.WARNING
    return node_events.NodeEvent(kind, after.reason, after.message)


def _revision(condition: Condition) -> str:
    return condition.message.split(":", 1)[0]

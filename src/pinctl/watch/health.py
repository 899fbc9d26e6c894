"""What sync --watch tells monitoring: its own counters and health, kept inline at the cost of a
dict increment, and the figures of the whole node, read by a thread of their own.

The watcher's hot path only counts. Everything that needs a listing or the CRI (images, drift,
mismatches, GC risk) is read by the Checker every --check-interval seconds on connections of
its own, and a scrape reads the last result: a scrape never waits on containerd, and an event
never waits on a scrape.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Final, Literal, Optional, Protocol, Sequence, get_args

from pinctl.check.compare import check_runtime
from pinctl.display import visible
from pinctl.errors import EngineUnreachable, PinctlError
from pinctl.gc import plan as gc
from pinctl.model import ACTION_CHANGED_UNDER_US, ACTION_PINNED, ACTION_PRUNED, ItemResult
from pinctl.service.monitoring import Verdict
from pinctl.watch import figures

if TYPE_CHECKING:
    from pinctl.backends.cri import CriRuntime, RuntimeVersion
    from pinctl.gc.kubelet import SourcedGcSettings
    from pinctl.model import ImageRow
    from pinctl.node.sources import Node
    from pinctl.pins.policy import Policy

# Why a sync could not do its job, as a closed set (a metric's label).
SyncError = Literal["unreachable", "engine", "stream-ended", "write-failed", "changed-under-us", "config-reload"]
SYNC_UNREACHABLE: Final = "unreachable"  # containerd did not answer: the session could not start or was lost
SYNC_ENGINE: Final = "engine"  # containerd answered with an error
SYNC_STREAM_ENDED: Final = "stream-ended"  # containerd closed the event stream
SYNC_WRITE_FAILED: Final = "write-failed"  # one reference's label write failed
SYNC_CHANGED_UNDER_US: Final = "changed-under-us"  # a record changed while it was written; redone on its event
SYNC_CONFIG_RELOAD: Final = "config-reload"  # a reload found a broken config; the old one stays
SYNC_ERRORS: tuple[SyncError, ...] = get_args(SyncError)

# What the periodic check could not read, as a closed set.
CheckError = Literal["containerd", "cri-unreachable", "cri", "gc"]
CHECK_CONTAINERD: Final = "containerd"  # listing the images failed
CHECK_CRI_UNREACHABLE: Final = "cri-unreachable"  # no CRI runtime answered
CHECK_CRI: Final = "cri"  # the CRI runtime answered with an error
CHECK_GC: Final = "gc"  # the GC model's inputs could not be read (image filesystem, kubelet config)
CHECK_ERRORS: tuple[CheckError, ...] = get_args(CheckError)

# The watch loop turns at least every few seconds (events, a poll timeout, a back-off); this long
# without a turn means it is stuck.
LIVENESS_SECONDS = 60.0
# After a change, the early round waits this long, so a burst of events is read once.
SETTLE_S = 2.0
# ... and comes no sooner than this part of --check-interval after the last round began.
EARLIEST_FRACTION = 0.25


class WatchState:
    """The watcher's counters and health. Written by the watch loop only; read by scrapes.

    Counters are plain ints and Counters: the loop is their one writer, and a reader copying a
    dict of str keys does so under the GIL in one step.
    """

    def __init__(self, address: str, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.address = address
        self.clock, self.wall = clock, wall
        self.labels_written: Counter[str] = Counter()
        self.labels_removed: Counter[str] = Counter()
        self.sync_errors: Counter[SyncError] = Counter({kind: 0 for kind in SYNC_ERRORS})
        self.reloads: Counter[str] = Counter({"ok": 0, "failed": 0})
        # Whether the last reload (SIGHUP or a changed file) worked; True before any.
        self.last_reload_ok = True
        self.last_reload_error = ""
        self.events = 0
        self.reconnects = 0
        self.full_syncs = 0
        self.connected = False
        self.last_full_sync: Optional[float] = None  # wall time of the last one that succeeded
        self.last_error = ""
        self.last_turn = clock()
        self._lost = False
        # Told when labels were written or removed, or the policy reloaded: Checker.soon, so
        # the figures behind pinctl_policy_images follow within seconds, not a check interval.
        self.on_change: Callable[[], None] = lambda: None
        # Told every batch's results: --node-status records Events of what changed.
        self.on_results: Callable[[Sequence[ItemResult]], None] = lambda _results: None
        # Image deletions recorded, by (wanted, pinned, deleter): pinctl_image_deletions_total.
        self.deletions: Counter[tuple[str, str, str]] = Counter()

    # -- written by the watch loop ----------------------------------------------------------

    def turned(self) -> None:
        self.last_turn = self.clock()

    def synced(self, namespaces: Sequence[str]) -> None:
        """A full sync succeeded: the stream is up and nothing was missed."""
        for namespace in namespaces:
            self.labels_written[namespace] += 0
            self.labels_removed[namespace] += 0
        if self._lost:
            self.reconnects += 1
        self._lost = False
        self.full_syncs += 1
        self.last_full_sync = self.wall()
        self.connected = True
        self.turned()

    def lost(self, err: PinctlError, kind: SyncError) -> None:
        """The session ended on an error; the loop backs off and connects again."""
        self.sync_errors[kind] += 1
        self.last_error = " ".join(str(err).split())
        self._lost = True
        self.disconnected()

    def disconnected(self) -> None:
        self.connected = False
        self.turned()

    def counted(self, results: Sequence[ItemResult]) -> None:
        changed = False
        for result in results:
            if result.action == ACTION_PINNED:
                self.labels_written[result.namespace] += 1
                changed = True
            elif result.action == ACTION_PRUNED:
                self.labels_removed[result.namespace] += 1
                changed = True
            elif result.action == ACTION_CHANGED_UNDER_US:
                self.sync_errors[SYNC_CHANGED_UNDER_US] += 1
            elif result.failed:
                self.sync_errors[SYNC_WRITE_FAILED] += 1
        if results:
            self.on_results(results)
        if changed:
            self.on_change()

    def deleted(self, wanted: Sequence[str], pinned: Sequence[str], deleter: str) -> None:
        self.deletions[("true" if wanted else "false", "true" if pinned else "false", deleter)] += 1

    def reloaded(self, ok: bool, error: str = "") -> None:
        self.reloads["ok" if ok else "failed"] += 1
        self.last_reload_ok = ok
        self.last_reload_error = "" if ok else " ".join(error.split())
        if not ok:
            self.sync_errors[SYNC_CONFIG_RELOAD] += 1
        self.on_change()

    # -- read by /healthz, /readyz and scrapes ------------------------------------------------

    def seconds_since_turn(self) -> float:
        return max(0.0, self.clock() - self.last_turn)

    def liveness(self) -> Verdict:
        idle = self.seconds_since_turn()
        if idle > LIVENESS_SECONDS:
            return Verdict(False, f"the watch loop has not turned for {idle:.0f} s")
        return Verdict(True, f"the watch loop turned {idle:.1f} s ago")

    def readiness(self) -> Verdict:
        """Ready while the event stream is up since a full sync that succeeded: a full sync runs
        at every (re)connect, and while the stream stays up no event is missed."""
        alive = self.liveness()
        if not alive.ok:
            return alive
        if not self.connected:
            if self.last_error:
                return Verdict(False, f"not connected to containerd at {self.address}: {self.last_error}")
            return Verdict(False, f"the first full sync with containerd at {self.address} has not finished")
        age = self.wall() - (self.last_full_sync or self.wall())
        return Verdict(True, f"connected to containerd at {self.address}; last full sync {age:.0f} s ago")


class CheckSources(Protocol):
    """What one round of the periodic check reads, as the watcher's configuration has it now
    (watch.WatchSetup)."""

    @property
    def policy(self) -> Policy: ...

    def open_node(self) -> Node: ...

    def open_runtime(self) -> tuple[CriRuntime, RuntimeVersion]: ...

    def gc_settings(self) -> SourcedGcSettings: ...


class Checker:
    """Reads the whole node every interval seconds in a thread of its own; latest holds the
    last round's figures and errors counts what could not be read (that part is then left out,
    not reported stale)."""

    def __init__(self, sources: Callable[[], CheckSources], interval: float,
                 log: Callable[..., None] = lambda *_a, **_k: None,
                 reading: Optional[threading.Lock] = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.sources = sources
        self.interval = interval
        self.clock = clock
        self.log = log
        # Held for a whole round: the watcher's full sync holds the same lock (Watcher.reading).
        self.reading = reading or threading.Lock()
        self.latest = figures.Figures()
        # Told each round's figures: --node-status writes the Node condition from them.
        self.on_round: Callable[[figures.Figures], None] = lambda _found: None
        self.errors: Counter[CheckError] = Counter({kind: 0 for kind in CHECK_ERRORS})
        self.rounds = 0
        # The runtime found last round, kept while it answers and the configuration stays: finding
        # one afresh tries every usual socket.
        self._runtime: Optional[tuple[CheckSources, CriRuntime]] = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._guard = threading.Lock()
        self._early_due: Optional[float] = None
        self._last_round = -math.inf
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="pinctl-check", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def soon(self) -> None:
        """Something changed: the next round comes SETTLE_S from now instead of at its time, but
        no sooner than EARLIEST_FRACTION of the interval after the last one began, so a node
        whose labels keep changing is read at most four times as often as configured (a round
        at 10,000 images costs 1-2 s of CPU)."""
        now = self.clock()
        with self._guard:
            if self._early_due is None:
                self._early_due = max(now + SETTLE_S, self._last_round + self.interval * EARLIEST_FRACTION)
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._last_round = self.clock()
            try:
                with self.reading:
                    self.latest = self.round()
                self.on_round(self.latest)
            except Exception as err:  # noqa: BLE001 - the thread must outlive any one round
                self.log("error", "periodic check failed", error=f"{type(err).__name__}: {err}")
            self.rounds += 1
            self.wait_for_next(self.clock() + self.interval)

    def wait_for_next(self, due: float) -> None:
        """Until ``due``, or an earlier round soon() asked for, or stop()."""
        while not self._stop.is_set():
            with self._guard:
                until = due if self._early_due is None else min(due, self._early_due)
                left = until - self.clock()
                if left <= 0:
                    self._early_due = None
                    return
                self._wake.clear()
            self._wake.wait(left)

    def round(self) -> figures.Figures:
        """One reading of the node: listing, then the CRI check, then the GC model."""
        sources = self.sources()
        try:
            node = sources.open_node()
        except PinctlError as err:
            return self._failed(figures.Figures(), CHECK_CONTAINERD, err)
        try:
            return self._read(node, sources)
        finally:
            node.close()

    def _read(self, node: Node, sources: CheckSources) -> figures.Figures:
        try:
            rows = node.rows(sources.policy).rows
        except PinctlError as err:
            return self._failed(figures.Figures(), CHECK_CONTAINERD, err)
        found = figures.Figures(node=figures.node_figures(rows, node.selected_namespaces(), sources.policy.patterns),
                                taken_at=time.time())
        try:
            runtime, version = self._open_runtime(sources)
        except PinctlError as err:
            kind: CheckError = CHECK_CRI_UNREACHABLE if isinstance(err, EngineUnreachable) else CHECK_CRI
            return self._failed(found, kind, err)
        found = replace(found, runtime=figures.runtime_of(version))
        found = self._check(found, rows, runtime, version, node)
        return self._gc(found, node, rows, runtime, version, sources)

    def _open_runtime(self, sources: CheckSources) -> tuple[CriRuntime, RuntimeVersion]:
        if self._runtime is not None and self._runtime[0] is sources:
            runtime = self._runtime[1]
            try:
                return runtime, runtime.version()
            except PinctlError:
                self._runtime = None
        runtime, version = sources.open_runtime()
        self._runtime = (sources, runtime)
        return runtime, version

    def _check(self, found: figures.Figures, rows: Sequence[ImageRow], runtime: CriRuntime,
               version: RuntimeVersion, node: Node) -> figures.Figures:
        """As pinctl check judges: on CRI-O with its files (a drop-in cancelling pinctl's list is
        'overridden', not an unknown pattern), on containerd 2.x with its own pinned_images. The
        policy's counts then take the CRI's word on what is kept (figures.with_cri_verdict)."""
        try:
            crio = node.crio()
            site = crio.check_site(rows) if crio is not None else None
            result = check_runtime(rows, runtime, version, crio=site, config_pins=node.config_pins())
        except PinctlError as err:
            return self._failed(found, CHECK_CRI, err)
        node_found = (figures.with_cri_verdict(found.node, rows, result, self.latest.check)
                      if found.node is not None else None)
        return replace(found, node=node_found, check=figures.check_figures(result))

    def _gc(self, found: figures.Figures, node: Node, rows: Sequence[ImageRow], runtime: CriRuntime,
            version: RuntimeVersion, sources: CheckSources) -> figures.Figures:
        from datetime import datetime, timezone


        try:
            report = gc.gc_plan(gc.cri_domain(node, runtime, version), rows, sources.gc_settings(),
                                datetime.now(timezone.utc))
        except PinctlError as err:
            return self._failed(found, CHECK_GC, err)
        return replace(found, gc=figures.gc_figures(report))

    def _failed(self, found: figures.Figures, kind: CheckError, err: PinctlError) -> figures.Figures:
        self.errors[kind] += 1
        message = visible(" ".join(str(err).split()))
        if found.errors.get(kind) != message and self.latest.errors.get(kind) != message:
            self.log("warning", "periodic check: cannot read", part=kind, error=message)
        return replace(found, errors={**found.errors, kind: message})

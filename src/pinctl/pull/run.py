"""pull: fetch images through the runtime that will use them, a few at a time, within a disk
budget, and pin each right after its pull succeeds.

The budget (pinctl.landing.budget, which import keeps too): before each pull the image
filesystem is read (statfs). When the registry tells the
image's compressed size, the pull is refused if usage plus DISK_FACTOR times that size (the
compressed blobs and their unpacked snapshot) plus what pulls in flight were counted for would
pass the budget. When the size is not known, the pull is refused only when usage is already at
or past the budget, and the item says its size was not known.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Final, Literal, Optional, Protocol, Sequence

from pinctl.backends.registry_auth import PullCancelled, PullError, RegistryAuth
from pinctl.errors import PinctlError, batch_exit_code, batch_status
from pinctl.landing.budget import Budget, Destination

if TYPE_CHECKING:
    from pinctl.model import LabelChange, Status

PullAction = Literal["pulled", "present", "skipped", "failed"]
PULLED: Final = "pulled"
PRESENT: Final = "present"
SKIPPED: Final = "skipped"
FAILED: Final = "failed"
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 10.0


def retry_delay(attempt: int, draw: Callable[[], float] = random.random) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1, 2, ...): 1, 2, 4... s capped at
    BACKOFF_MAX, each between half and all of that at random ("equal jitter"). A registry that
    answers 503 to a fleet answers every node at once; a fixed back-off would bring all their
    retries back at once too, a random part spreads them, and the half kept keeps each node's
    own back-off growing."""
    ceiling = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (attempt - 1))
    return ceiling / 2 + draw() * ceiling / 2


@dataclass(frozen=True)
class PullRequest:
    refs: Sequence[str]
    pin: bool = False
    always: bool = False
    parallel: int = 3
    timeout: float = 300.0
    retries: int = 3
    max_usage: float = 80.0
    # Where the images go (-n; none: where the node says), and Docker's config.json for credentials.
    namespaces: Sequence[str] = ()
    registry_config: Optional[str] = None


@dataclass(frozen=True)
class PullItem:
    """One reference: what happened, why, and the pin when one was asked for."""

    ref: str
    namespace: str
    action: PullAction
    why: Optional[str] = None
    pin: Optional[str] = None  # pinned, already-pinned or failed; None when not asked
    image: Optional[str] = None
    size: Optional[int] = None  # compressed, as the registry told it
    attempts: int = 0
    # A policy pattern naming no one image (sync --pull): reported, but no failure.
    unpullable: bool = False

    @property
    def ok(self) -> bool:
        return (self.action in (PULLED, PRESENT) and self.pin != "failed") or self.unpullable


@dataclass
class PullReport:
    runtime: str
    items: list[PullItem]
    max_usage: float
    interrupted: bool = False

    @property
    def exit_code(self) -> int:
        # A reference skipped (no room on the disk) was named and not pulled: not done, as a failure.
        return batch_exit_code(self.interrupted, all(item.ok for item in self.items),
                               all(item.action in (FAILED, SKIPPED) and not item.unpullable for item in self.items))

    @property
    def status(self) -> Status:
        return batch_status(self.exit_code)


class PullTarget(Destination, Protocol):
    """The runtime that pulls (and will use) the images, and the namespace they land in."""

    def present(self, ref: str) -> bool:
        """Whether the runtime has an image by this reference now."""

    def pull(self, ref: str, auth: Optional[RegistryAuth], timeout: float, cancelled: Callable[[], bool]) -> str:
        """Pull; the image as the runtime names it. PullError, PullCancelled."""


class Labels(Protocol):
    """The label side: pin a reference, and keep a re-pulled reference's pin labels."""

    def pin(self, namespace: str, ref: str) -> tuple[str, Optional[str]]:
        """(pinned | already-pinned | failed, why)."""

    def pin_labels(self, namespace: str, ref: str) -> LabelChange:
        """The pin labels the record carries now (empty when none, or no record)."""

    def restore(self, namespace: str, ref: str, labels: LabelChange) -> None:
        """Put back pin labels a re-pull dropped."""


@dataclass
class PullRun:
    """One pull command's shared state: the workers read it, the main thread may cancel it."""

    target: PullTarget
    labels: Labels
    request: PullRequest
    budget: Budget
    auths: dict[str, RegistryAuth]
    size_of: Callable[[str, Optional[RegistryAuth]], Optional[int]]
    progress: Callable[[str, str], None]
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Held while a label is written, and to cancel: no label is written once cancelled.
    label_lock: threading.Lock = field(default_factory=threading.Lock)

    def one(self, ref: str) -> PullItem:
        namespace = self.target.namespace
        if not self.request.always and self.target.present(ref):
            return self._pin(PullItem(ref, namespace, PRESENT))
        kept = self.labels.pin_labels(namespace, ref) if self.request.always else {}
        auth = self.auths.get(ref.split("/", 1)[0])
        size = self.size_of(ref, auth)
        refused = self.budget.claim(size)
        if refused:
            return PullItem(ref, namespace, SKIPPED, refused, size=size)
        try:
            item = self._pull(ref, auth, size)
        finally:
            self.budget.release(size)
        if item.action == PULLED and kept:
            with self.label_lock:
                if not self.cancelled.is_set():
                    self.labels.restore(namespace, ref, kept)
        return self._pin(item)

    def _pull(self, ref: str, auth: Optional[RegistryAuth], size: Optional[int]) -> PullItem:
        namespace = self.target.namespace
        attempts = 0
        while True:
            attempts += 1
            self.progress(ref, "pulling" if attempts == 1 else f"pulling (attempt {attempts})")
            try:
                image = self.target.pull(ref, auth, self.request.timeout, self.cancelled.is_set)
                return PullItem(ref, namespace, PULLED, image=image, size=size, attempts=attempts)
            except PullCancelled:
                return PullItem(ref, namespace, FAILED, "interrupted", size=size, attempts=attempts)
            except PullError as err:
                if not err.transient or attempts > self.request.retries:
                    return PullItem(ref, namespace, FAILED, str(err), size=size, attempts=attempts)
                self.progress(ref, f"retrying: {err.message}")
                if self.cancelled.wait(retry_delay(attempts)):
                    return PullItem(ref, namespace, FAILED, "interrupted", size=size, attempts=attempts)
            except PinctlError as err:
                return PullItem(ref, namespace, FAILED, str(err), size=size, attempts=attempts)

    def _pin(self, item: PullItem) -> PullItem:
        if not self.request.pin or item.action not in (PULLED, PRESENT):
            return item
        with self.label_lock:
            if self.cancelled.is_set():
                return replace(item, pin="failed", why="interrupted before its pin")
            pin, why = self.labels.pin(item.namespace, item.ref)
        return replace(item, pin=pin, why=why or item.why)

    def cancel(self) -> None:
        with self.label_lock:
            self.cancelled.set()


def run(run: PullRun, refs: Sequence[str], finished: Callable[[PullItem], None]) -> tuple[list[PullItem], bool]:
    """Every reference through request.parallel worker threads. The main thread only waits, so a
    SIGINT reaches it: then no further pull starts and no label is written. The workers are
    daemon threads: an interrupted pull does not hold the process."""
    work: queue.Queue[str] = queue.Queue()
    done: queue.Queue[PullItem] = queue.Queue()
    for ref in refs:
        work.put(ref)
    workers = [threading.Thread(target=_worker, args=(run, work, done), daemon=True)
               for _ in range(max(1, min(run.request.parallel, len(refs))))]
    for worker in workers:
        worker.start()
    items: dict[str, PullItem] = {}
    try:
        while len(items) < len(refs):
            item = done.get(timeout=3600)
            items[item.ref] = item
            finished(item)
    except KeyboardInterrupt:
        run.cancel()
        deadline = time.monotonic() + 2
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        while not done.empty():
            item = done.get_nowait()
            items.setdefault(item.ref, item)
        return [items.get(ref) or PullItem(ref, run.target.namespace, FAILED, "interrupted") for ref in refs], True
    return [items[ref] for ref in refs], False


def _worker(run: PullRun, work: queue.Queue[str], done: queue.Queue[PullItem]) -> None:
    while not run.cancelled.is_set():
        try:
            ref = work.get_nowait()
        except queue.Empty:
            return
        try:
            item = run.one(ref)
        except PinctlError as err:
            item = PullItem(ref, run.target.namespace, FAILED, str(err))
        done.put(item)


def default_max_usage(high_threshold: int) -> float:
    return float(max(0, high_threshold - 5))

"""Keeping cri-proxy's pins current in the background, so that no call waits for a read.

Two threads. The watcher ("pin-watcher") follows the runtime's image events: containerd's
events service for every containerd pinctl reads (the CRI's k8s.io, Docker's moby), Docker's
own events for its classic store. Each event in a namespace that counts marks the pins due.
The reader ("pin-reader") reads them whenever they are due and hands each new set to the data
path (publish: the relay, or the Python forwarder's copy). Events that come during a read make
another read follow it, so a burst costs two reads, not one per event.

Without events to follow (CRI-O sends none; a runtime whose events cannot be followed just now;
a watcher that died), the reader reads every refresh_seconds instead. With them, it still reads
every resync_seconds: a change no event reports (cri-dockerd restarted with another sandbox
image) shows within that. A config change (SIGHUP, a changed file) is a read too.

The bound: a change shows in answers once the read that began after its event ends. While
that takes longer than STALE_SECONDS, or the events cannot be followed for longer than that, or
a thread has died, /readyz says so (health()).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from pinctl.model import LogFn
from pinctl.node.sources import DockerSource, Node
from pinctl.service.monitoring import Verdict

if TYPE_CHECKING:
    from pinctl.criproxy.pins import PinnedKeys, PinnedSet

# How far the pins may fall behind the runtime's events before /readyz says so.
STALE_SECONDS = 10.0
RESYNC_SECONDS = 300.0
RECONNECT_SECONDS = 1.0
READER_NICENESS = 10
# The watcher looks up at least this often: for its stop, and so that an exception raised in
# it from outside (a test's, or the interpreter's at exit) lands.
WAKE_SECONDS = 1.0
# What the watcher follows, in health() and the log.
FOLLOWING, POLLING, RECONNECTING, STARTING = "following", "polling", "reconnecting", "starting"
Publish = Callable[[Optional["PinnedKeys"]], bool]


class PinFeed:
    """The two threads, and what /readyz and the metrics read of them."""

    def __init__(self, pins: PinnedSet, publish: Publish, log: LogFn, refresh_seconds: float,
                 resync_seconds: float = RESYNC_SECONDS, clock: Callable[[], float] = time.monotonic,
                 follow_events: bool = True) -> None:
        self.pins = pins
        self.publish = publish
        self.log = log
        self.refresh_seconds = refresh_seconds
        self.resync_seconds = resync_seconds
        self.clock = clock
        self.follow_events = follow_events
        self._due = threading.Condition()
        self._due_since: Optional[float] = None  # when the oldest change not yet read came
        self._wanted = 0  # reads asked for (a reload's waits for its own)
        self._done = 0  # reads finished and published
        self._stop = threading.Event()
        self._restart = threading.Event()
        self.state = STARTING
        self._state_since = clock()
        self.last_error = ""
        self.events = 0
        self.reads = 0
        self._watcher: Optional[threading.Thread] = None
        self._reader: Optional[threading.Thread] = None
        self._streams: list[Any] = []
        self._last_read = -float("inf")

    # -- running ---------------------------------------------------------------------------

    def start(self) -> None:
        self._reader = threading.Thread(target=self._logged, args=(self._read_loop, "reader"), name="pin-reader",
                                        daemon=True)
        self._watcher = threading.Thread(target=self._logged, args=(self._watch_loop, "watcher"), name="pin-watcher",
                                         daemon=True)
        self._reader.start()
        self._watcher.start()

    def _logged(self, loop: Callable[[], None], what: str) -> None:
        """Run a thread's loop; one that dies says so in one log line (health() then reports it)."""
        if what == "reader":
            # On a busy node a read waits for the kubelet, the runtime and the relay, not the other
            # way round (Linux's niceness is per thread: this one only).
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), READER_NICENESS)
        try:
            loop()
        except BaseException as err:  # noqa: BLE001 - whatever ends it, /readyz reports it from here on
            self.log("error", f"the pin {what} thread stopped; reading the pins every {self.refresh_seconds:g} s "
                     "instead (restart cri-proxy)", error=repr(err))

    def stop(self) -> None:
        self._stop.set()
        self._cancel_streams()
        with self._due:
            self._due.notify_all()

    def changed(self) -> None:
        """Something that can change the pins happened: read them soon."""
        with self._due:
            self._ask()

    def read_and_wait(self, timeout: float) -> bool:
        """Ask for a read and wait until it is published (a reload: every call after its log line
        sees the new config's pins); False when that takes longer than timeout."""
        with self._due:
            mine = self._ask()
            return self._due.wait_for(lambda: self._done >= mine or self._stop.is_set(), timeout)

    def _ask(self) -> int:
        """Mark a read due (the caller holds _due); the number of this ask."""
        if self._due_since is None:
            self._due_since = self.clock()
        self._wanted += 1
        self._due.notify_all()
        return self._wanted

    def refollow(self) -> None:
        """Subscribe again (a reload may follow another runtime or namespace)."""
        self._restart.set()
        self._cancel_streams()

    # -- health ----------------------------------------------------------------------------

    def health(self) -> Verdict:
        now = self.clock()
        if self._stop.is_set():
            return Verdict(True, "stopping")
        for thread, what in ((self._reader, "reader"), (self._watcher, "watcher")):
            if thread is not None and not thread.is_alive():
                return Verdict(False, f"the pin {what} thread stopped; pins are read every "
                                         f"{self.refresh_seconds:g} s meanwhile (restart cri-proxy)")
        due = self._due_since
        if due is not None and now - due > STALE_SECONDS:
            return Verdict(False, f"the pins are {now - due:.0f} s behind the runtime's events "
                                     f"(a read is taking that long)")
        if self.state in (STARTING, RECONNECTING) and now - self._state_since > STALE_SECONDS:
            return Verdict(False, f"not following the runtime's image events for {now - self._state_since:.0f} s "
                                     f"(pins read every {self.refresh_seconds:g} s meanwhile): {self.last_error}")
        return Verdict(True, self.state)

    def read_due(self) -> bool:
        """Whether a poll is due, for the proxy's own loop once the reader has died."""
        return self._due_since is not None or self.clock() - self._last_read >= self.refresh_seconds

    def watcher_alive(self) -> bool:
        return self._watcher is not None and self._watcher.is_alive()

    # -- the reader ------------------------------------------------------------------------

    def prime(self) -> Optional[PinnedKeys]:
        """The first read, before anything serves: the socket is served with the pins in place."""
        self._last_read = self.clock()
        self.reads += 1
        return self.pins.refresh()

    def _read_loop(self) -> None:
        while True:
            with self._due:
                while not self._stop.is_set() and self._due_since is None:
                    following = self.state == FOLLOWING and self.watcher_alive()
                    interval = self.resync_seconds if following else self.refresh_seconds
                    remaining = self._last_read + interval - self.clock()
                    if remaining <= 0:
                        break
                    self._due.wait(min(WAKE_SECONDS, remaining))
                if self._stop.is_set():
                    return
            self.read_now()

    def reader_alive(self) -> bool:
        return self._reader is not None and self._reader.is_alive()

    def read_now(self) -> None:
        """One read, published, answering every ask made before it began: the reader's, and the
        proxy's own loop's once the reader has died."""
        with self._due:
            wanted = self._wanted
            self._due_since = None  # a change from here on may come after this read began: another
        self._last_read = self.clock()
        self.reads += 1
        keys = self.pins.refresh()
        if not self.publish(keys):
            self.log("warning", "the relay did not confirm the new pins; it is sent them again with the next read")
        with self._due:
            self._done = max(self._done, wanted)
            self._due.notify_all()

    # -- the watcher -----------------------------------------------------------------------

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            self._restart.clear()
            try:
                followed = self._follow()
            except Exception as err:  # noqa: BLE001 - any failure: say it once, reconnect, read meanwhile
                followed = True
                self._set_state(RECONNECTING, str(err) or type(err).__name__)
            if not followed:  # nothing sends events: the reader polls
                self._set_state(POLLING, "")
                self._wait(lambda: self._restart.is_set(), None)
                continue
            if not self._restart.is_set():  # a reload's resubscription starts at once
                self._wait(lambda: False, RECONNECT_SECONDS)

    def _follow(self) -> bool:
        """Subscribe to every event stream the node has and drain them until one ends; False when
        it has none."""
        if not self.follow_events:
            return False
        setup = self.pins.setup()
        node = setup.open_node()
        try:
            streams: list[tuple[Any, Optional[Callable[[str], bool]]]] = [
                (item.store.subscribe_images(), item.watches) for item in node.followed()]
            docker = _docker_classic(node)
            if docker is not None:
                streams.append((docker.subscribe_images(), None))
            if not streams:
                return False
            self._streams = [stream for stream, _ in streams]
            arrived: queue.Queue[Optional[BaseException]] = queue.Queue()
            for stream, watches in streams:
                threading.Thread(target=self._drain, args=(stream, watches, arrived), name="pin-events",
                                 daemon=True).start()
            self._set_state(FOLLOWING, "")
            # What happened before this subscription (since the first read, during a reconnect
            # or a reload's resubscription) no event will tell: read once now.
            self.changed()
            while not (self._stop.is_set() or self._restart.is_set()):
                try:
                    ended = arrived.get(timeout=WAKE_SECONDS)
                except queue.Empty:
                    continue
                if ended is not None:
                    raise ended
            return True
        finally:
            self._cancel_streams()
            node.close()

    def _drain(self, stream: Any, watches: Optional[Callable[[str], bool]],
               arrived: queue.Queue[Optional[BaseException]]) -> None:
        try:
            for event in _events(stream):
                if watches is None or watches(event):
                    self.events += 1
                    self.changed()
        except Exception as err:  # noqa: BLE001 - handed to the watcher, which reconnects
            arrived.put(err)
            return
        arrived.put(None if self._stop.is_set() or self._restart.is_set() else ConnectionError("the event stream ended"))

    def _set_state(self, state: str, error: str) -> None:
        if state == self.state:
            return
        if state == RECONNECTING:
            self.log("error", "cannot follow the runtime's image events; reading the pins every "
                     f"{self.refresh_seconds:g} s until it can", error=error)
        elif state == FOLLOWING and self.state == RECONNECTING and self.last_error:
            self.log("info", "following the runtime's image events again")
        elif state == POLLING:
            why = "the runtime sends no image events" if self.follow_events else "not following image events"
            self.log("info", f"{why}; reading the pins every {self.refresh_seconds:g} s")
        self.state, self._state_since = state, self.clock()
        if error:
            self.last_error = error

    def _wait(self, until: Callable[[], bool], seconds: Optional[float]) -> None:
        end = None if seconds is None else self.clock() + seconds
        while not (self._stop.is_set() or until()) and (end is None or self.clock() < end):
            self._stop.wait(WAKE_SECONDS if end is None else min(WAKE_SECONDS, max(0.0, end - self.clock())))

    def _cancel_streams(self) -> None:
        for stream in self._streams:
            try:
                stream.cancel()
            except Exception:  # noqa: BLE001 - a stream that broke already
                pass
        self._streams = []


def _events(stream: Any) -> Iterator[str]:
    """The namespace of each event (containerd's), or "" (Docker's, which has none)."""
    for event in stream:
        yield event[0] if len(event) == 4 else ""


def _docker_classic(node: Node) -> Any:
    """Docker's engine when its images are in its classic store, whose changes no containerd sees."""
    for source in node.sources:
        if isinstance(source, DockerSource) and not source.view.store.containerd:
            return source.view.engine
    return None

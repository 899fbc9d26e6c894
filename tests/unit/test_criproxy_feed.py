"""cri-proxy's feed (criproxy/feed.py): when the pins are read, and what /readyz says of it. The
node here is a stand-in (pure logic); test_criproxy_freshness.py runs it against containerd."""

from __future__ import annotations

import threading
from typing import Any, Optional

from pinctl.criproxy import feed as pin_feed


class Pins:
    """A PinnedSet whose node has no event stream (as CRI-O's): the feed polls."""

    def __init__(self) -> None:
        self.reads = 0
        self.node_opened = threading.Event()

    def refresh(self) -> Optional[str]:
        self.reads += 1
        return f"keys {self.reads}"

    def setup(self) -> Any:
        pins = self

        class Node:
            sources: list[Any] = []

            def followed(self) -> list[Any]:
                pins.node_opened.set()
                return []

            def close(self) -> None:
                pass

        return type("Setup", (), {"open_node": staticmethod(Node)})()


def test_a_change_is_read_and_published_and_a_reload_waits_for_its_own_read() -> None:
    pins = Pins()
    published: list[Any] = []

    def publish(keys: Any) -> bool:
        published.append(keys)
        return True

    feed = pin_feed.PinFeed(pins, publish, lambda *_, **__: None,  # type: ignore[arg-type]
                            refresh_seconds=3600, resync_seconds=3600)
    assert feed.prime() == "keys 1" and published == [], "the first read is before serving: nothing to send yet"
    feed.start()
    try:
        assert pins.node_opened.wait(60)
        assert feed.read_and_wait(60), "a read asked for is published"
        assert published[-1] == f"keys {pins.reads}" and pins.reads >= 2
        reads = pins.reads
        assert feed.read_and_wait(60) and pins.reads == reads + 1, "each wait gets a read of its own"
    finally:
        feed.stop()


def test_health_says_when_a_change_waits_past_the_bound() -> None:
    now = [1000.0]
    feed = pin_feed.PinFeed(Pins(), lambda keys: True, lambda *_, **__: None,  # type: ignore[arg-type]
                            refresh_seconds=2, clock=lambda: now[0])
    feed.state = pin_feed.FOLLOWING
    assert feed.health().ok
    feed.changed()  # no reader runs: the change waits
    now[0] += pin_feed.STALE_SECONDS - 0.5
    assert feed.health().ok, "within the bound"
    now[0] += 1
    health = feed.health()
    assert not health.ok and "behind the runtime's events" in health.reason


def test_health_says_when_the_events_cannot_be_followed_past_the_bound() -> None:
    now = [1000.0]
    logged: list[str] = []
    feed = pin_feed.PinFeed(Pins(), lambda keys: True, lambda level, msg, **_: logged.append(msg),  # type: ignore[arg-type]
                            refresh_seconds=2, clock=lambda: now[0])
    feed._set_state(pin_feed.FOLLOWING, "")
    feed._set_state(pin_feed.RECONNECTING, "containerd is down")
    assert logged[-1].startswith("cannot follow the runtime's image events") and feed.health().ok
    now[0] += pin_feed.STALE_SECONDS + 1
    health = feed.health()
    assert not health.ok and "containerd is down" in health.reason and "every 2 s" in health.reason
    feed._set_state(pin_feed.FOLLOWING, "")
    assert feed.health().ok and logged[-1] == "following the runtime's image events again"


def test_a_read_made_in_the_readers_place_answers_the_changes_before_it() -> None:
    """The proxy's own loop reads when the reader has died: that read clears what was due, so the
    loop polls every refresh_seconds, not at each of its turns."""
    now = [1000.0]
    pins = Pins()
    feed = pin_feed.PinFeed(pins, lambda keys: True, lambda *_, **__: None,  # type: ignore[arg-type]
                            refresh_seconds=2, clock=lambda: now[0])
    feed.changed()
    assert feed.read_due()
    feed.read_now()
    assert pins.reads == 1 and not feed.read_due(), "the change is read; the next poll is 2 s away"
    now[0] += 2
    assert feed.read_due()

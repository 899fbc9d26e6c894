"""cri-proxy's health (liveness, readiness) and the figures a scrape reads, from the running Proxy.

This sits above proxy.py and stats.py: the proxy counts into stats, and a scrape reads both
through here, so stats.py never needs to know the Proxy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pinctl.criproxy.stats import KEY_KINDS, READ_RESULTS, ProxyFigures, ProxyStats
from pinctl.display import visible
from pinctl.service.monitoring import Runtime, Verdict

if TYPE_CHECKING:
    from pinctl.criproxy.proxy import Proxy


# -- health -------------------------------------------------------------------------------------


def liveness(proxy: Proxy) -> Verdict:
    """Healthy while the gRPC server (or the relay) runs: from start until SIGTERM."""
    if not proxy.running():
        return Verdict(False, "the CRI server is not running (starting, stopping, or the relay being replaced)")
    return Verdict(True, f"serving the CRI on {proxy.listen}")


def readiness(proxy: Proxy) -> Verdict:
    """Ready while the socket the kubelet connects to is the proxy's, the last read of the pins
    succeeded (otherwise answers pass through without pinctl's pins), and the pins keep up with
    the runtime (feed.py: its threads run, its events are followed, no change waits past
    STALE_SECONDS)."""
    alive = liveness(proxy)
    if not alive.ok:
        return alive
    if not proxy.socket_is_ours():
        return Verdict(False, f"{proxy.listen} was removed or replaced: callers no longer reach the proxy")
    pins = proxy.pins
    if pins.failing:
        error = visible(" ".join(pins.last_error.split()))
        age = pins.age()
        if pins.latest is None or age is None:
            return Verdict(False, f"cannot read the pins, image answers pass through unchanged: {error}")
        return Verdict(False, f"cannot read the pins, image answers keep those read {age:.0f} s ago: {error}")
    feed = proxy.feed.health()
    if not feed.ok:
        return feed
    age = pins.age()
    if age is None:
        return Verdict(True, f"serving the CRI on {proxy.listen}; the pins are not read yet")
    return Verdict(True, f"serving the CRI on {proxy.listen}; pins read {age:.0f} s ago, {feed.reason}")


# -- what a scrape reads ------------------------------------------------------------------------


def proxy_figures(proxy: Proxy, stats: Optional[ProxyStats] = None) -> ProxyFigures:
    stats = proxy.call_stats() if stats is None else stats
    pins = proxy.pins
    keys = pins.latest
    # Copies in one step each (dict() of a dict runs in C, under the GIL).
    return ProxyFigures(
        ready=readiness(proxy).ok,
        calls=dict(stats.calls),
        upstream_errors=dict(stats.upstream_errors),
        pin_reads=dict(zip(READ_RESULTS, (pins.ok_reads, pins.failures))),
        passed_through=dict(stats.passed_through),
        images_marked=stats.images_marked,
        pinned_keys=None if keys is None else dict(zip(KEY_KINDS, (len(keys.ids), len(keys.names)))),
        pins_age=pins.age(),
        runtime=Runtime(*proxy.runtime) if proxy.runtime else None,
        config_reloads=dict(pins.reloads),
        last_reload_ok=pins.last_reload_ok,
        remove_requests=dict(proxy.guard.outcomes),
    )

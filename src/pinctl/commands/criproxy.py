"""pinctl cri-proxy: the CRI served on a socket of pinctl's, forwarded to the runtime, pinned
images reported pinned. Like sync --watch, it takes a way to read the config again (SIGHUP, a
changed file) and the metrics endpoint to run beside it, so that nothing here serves or prints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ContextManager, Optional

from pinctl.errors import UsageError
from pinctl.model import LogFn

if TYPE_CHECKING:
    from pinctl.config.loader import Config
    from pinctl.criproxy.proxy import Proxy


@dataclass(frozen=True)
class ProxyRequest:
    """cri-proxy: the socket to serve, and what forwards (a relay binary, or None for Python)."""

    listen: str
    relay: Optional[str]
    allow_remove_pinned: bool = False
    refresh_seconds: float = 2.0  # criproxy.pins.REFRESH_SECONDS
    resync_seconds: float = 300.0  # criproxy.feed.RESYNC_SECONDS
    follow_events: bool = True


def cri_proxy(read_config: Callable[[], Config], request: ProxyRequest, log: LogFn, warn: Callable[[str], None],
              served: Callable[[Proxy], ContextManager[None]]) -> int:
    """Serve the CRI on request.listen until SIGTERM or SIGINT, forwarding to the runtime the
    config names; read_config is called again on SIGHUP and when the config's files change. A
    namespace that does not exist yet is read as empty (a fresh node)."""
    from pinctl.backends.cri import socket_path
    from pinctl.criproxy.pins import ProxySetup
    from pinctl.criproxy.proxy import Proxy
    from pinctl.node.sources import open_node
    from pinctl.pins.policy import compile_policy
    from pinctl.service.configfiles import watched_paths

    first = read_config()
    compile_policy(first.patterns)  # a bad policy is exit 2 now, not a logged failure later
    endpoint = first.settings.runtime_endpoint
    if endpoint is None:
        raise UsageError("cri-proxy needs the runtime to forward to",
                         "give --runtime-endpoint unix:///run/containerd/containerd.sock (or the runtime's socket)")

    def load() -> ProxySetup:
        cfg = read_config()
        return ProxySetup(lambda: open_node(cfg, warn, absent_ok=True), compile_policy(cfg.patterns),
                          watched_paths(cfg))

    proxy = Proxy(request.listen, socket_path(endpoint), load, log, relay=request.relay,
                  allow_remove_pinned=request.allow_remove_pinned, history_dir=first.settings.history_dir,
                  refresh_seconds=request.refresh_seconds, resync_seconds=request.resync_seconds,
                  follow_events=request.follow_events)
    with served(proxy):
        return proxy.run()

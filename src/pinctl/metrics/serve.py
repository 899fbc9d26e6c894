"""The HTTP endpoint of sync --watch and cri-proxy: /metrics, /healthz and /readyz on one
address, bound before the command starts its work (a bad address is exit 2 before anything runs)
and served by threads of their own while it runs."""

from __future__ import annotations

import contextlib
import errno
import gzip
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, Optional

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import CollectorRegistry

from pinctl.criproxy.health import liveness, proxy_figures, readiness
from pinctl.errors import UsageError
from pinctl.metrics.exposition import proxy_registry, watcher_registry
from pinctl.model import LogFn

if TYPE_CHECKING:
    from pinctl.criproxy.proxy import Proxy
    from pinctl.service.monitoring import Verdict
    from pinctl.watch.health import Checker
    from pinctl.watch.watcher import Watcher

EXAMPLE_ADDRESS = "127.0.0.1:9736"
ADDRESS_HINT = f"give HOST:PORT, e.g. {EXAMPLE_ADDRESS}, [::1]:9736 or :9736 for every interface"


def watcher_metrics(address: Optional[str], source: str, watcher: Watcher, checker: Optional[Checker],
                    log: LogFn, check_interval: float) -> ContextManager[None]:
    """sync --watch's endpoint, with the periodic check's figures (it runs beside, started by
    the command); nothing without an address."""
    if not address:
        return contextlib.nullcontext()
    server = MetricsServer(address, source, watcher_registry(watcher.state, checker), watcher.state.liveness,
                           watcher.state.readiness)
    return _serving(server, log, check_interval=f"{check_interval:g}s")


def proxy_metrics(address: Optional[str], source: str, proxy: Proxy, log: LogFn) -> ContextManager[None]:
    """cri-proxy's endpoint; nothing without an address."""
    if not address:
        return contextlib.nullcontext()
    server = MetricsServer(address, source, proxy_registry(lambda: proxy_figures(proxy)),
                           lambda: liveness(proxy), lambda: readiness(proxy), title="pinctl cri-proxy")
    return _serving(server, log)


@contextlib.contextmanager
def _serving(server: MetricsServer, log: LogFn, **fields: str) -> Iterator[None]:
    server.start()
    log("info", "serving metrics", address=server.address, **fields)
    try:
        yield
    finally:
        server.stop()


def parse_address(text: str, source: str = "") -> tuple[str, int]:
    """HOST:PORT as --metrics-address takes it: an IPv4 address or a name, an IPv6 address in
    brackets, or nothing for every interface."""
    where = f" ({source})" if source and source != "flag" else ""

    def bad(why: str) -> UsageError:
        return UsageError(f"metrics address {text!r}{where}: {why}", ADDRESS_HINT)

    host, colon, port = text.rpartition(":")
    if not colon:
        raise bad("no port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not host or ":" not in host:
            raise bad("brackets are for an IPv6 address")
    elif ":" in host:
        raise bad("an IPv6 address goes in brackets")
    if any(ch.isspace() or ch in "/[]@" for ch in host):
        raise bad(f"{host!r} is not a host")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise bad(f"{port!r} is not a port from 1 to 65535")
    return host, int(port)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    # A client that connects and says nothing must not hold a thread for ever.
    timeout = 10
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            body = encoder(self.server.registry)
            if gzip_accepted(self.headers.get("Accept-Encoding", "")):
                # Prometheus asks for it: a node's 8.7 kB scrape is 2.1 kB on the wire, which
                # counts on a fleet of thousands (docs/fleet.md).
                self._send(200, gzip.compress(body, compresslevel=6), content_type, encoding="gzip")
            else:
                self._send(200, body, content_type)
        elif path in ("/healthz", "/readyz"):
            verdict = (self.server.health if path == "/healthz" else self.server.ready)()
            self._send(200 if verdict.ok else 503, f"{'ok' if verdict.ok else 'not ok'}: {verdict.reason}\n".encode())
        elif path == "/":
            self._send(200, f"{self.server.title}: /metrics /healthz /readyz\n".encode())
        else:
            self._send(404, b"not found: /metrics /healthz /readyz\n")

    def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
              encoding: str = "") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        """Scrapes are not worth a log line each."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], family: int, registry: CollectorRegistry,
                 health: Callable[[], Verdict], ready: Callable[[], Verdict], title: str) -> None:
        self.address_family = family
        self.registry, self.health, self.ready, self.title = registry, health, ready, title
        super().__init__(address, _Handler)


class MetricsServer:
    """/metrics, /healthz and /readyz on one address, served by threads of their own. The
    address is bound when this is made, so a bad one fails before the watcher or proxy starts.
    title names the command on /."""

    def __init__(self, address: str, source: str, registry: CollectorRegistry, health: Callable[[], Verdict],
                 ready: Callable[[], Verdict], title: str = "pinctl sync --watch") -> None:
        host, port = parse_address(address, source)
        family, bind_to = _resolve(address, host, port)
        try:
            self._server = _Server(bind_to, family, registry, health, ready, title)
        except OSError as err:
            raise UsageError(f"cannot serve metrics on {address}: {_bind_error(err)}",
                             "pick another --metrics-address") from None
        self.address = address
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.25},
                                        name="pinctl-metrics", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _resolve(address: str, host: str, port: int) -> tuple[int, tuple[str, int]]:
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise UsageError(f"metrics address {address!r}: cannot resolve {host!r}: {err.strerror}", ADDRESS_HINT) from None
    # Every interface: IPv4's any-address, which is what a pod's or node's scraper reaches.
    preferred = [entry for entry in found if entry[0] == socket.AF_INET] if not host else found
    family, _type, _proto, _name, sockaddr = (preferred or found)[0]
    return int(family), (str(sockaddr[0]), int(sockaddr[1]))


def _bind_error(err: OSError) -> str:
    if err.errno == errno.EADDRINUSE:
        return "the address is already in use"
    if err.errno == errno.EADDRNOTAVAIL:
        return "no interface of this machine has that address"
    if err.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges)"
    return err.strerror or str(err)

"""cri-proxy: the CRI, served on a socket of its own and forwarded to the real runtime, with one
change: ListImages, StreamImages and ImageStatus report pinned=true for the images pinctl wants
kept.

Two data paths, one behaviour. By default pinctl-cri-relay (cri-relay/, Go; relay.py runs it)
serves the socket and forwards, and this process reads the pins it asks for. With --relay python,
or when the relay is not installed, the Forwarder here does it: every call is forwarded by its
method name as raw bytes, so methods added to the CRI later pass through untouched. Only the
kind of a method (unary or streaming) cannot be told from its name: STREAMING lists runtime.v1's
streaming methods, and everything else is forwarded as unary. (The relay needs no such list.)

The pinned set (PinnedSet) is read from the label store, the policy and Docker before the socket
is served, and kept current by the feed (feed.py): a reader thread reads it again after the
runtime's image events, a config change, or every refresh_seconds where there are no events;
each new set goes to the relay. No call reads it or waits for it. When it cannot be read,
answers pass through unchanged.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import stat
import threading
from concurrent import futures
from typing import TYPE_CHECKING, Any, Callable, Iterator, NoReturn, Optional

from pinctl.criproxy.feed import RESYNC_SECONDS, PinFeed
from pinctl.criproxy.pins import (IMAGE_STATUS, LIST_IMAGES, REFRESH_SECONDS, STREAM_IMAGES, PinnedKeys, PinnedSet,
                                  ProxySetup, rewrite)
from pinctl.criproxy.peers import PeerJoiner
from pinctl.criproxy.relay import Relay
from pinctl.criproxy.remove import REMOVE_IMAGE, Caller, JournalWriter, RemoveGuard, upstream_status
from pinctl.criproxy.stats import (
    ANSWER_UNREADABLE,
    METHOD_LABELS,
    OTHER_METHOD,
    PINS_UNREADABLE,
    STATS,
    ProxyStats,
    relay_stats,
)
from pinctl.errors import PinctlError, UsageError
from pinctl.journal import REQUEST_FAILED, REQUEST_FORWARDED, REQUEST_REFUSED, presence
from pinctl.model import LogFn
from pinctl.service.configfiles import ConfigPoll
from pinctl.service.memory import serve_for_long

if TYPE_CHECKING:
    import grpc

VERSION = "/runtime.v1.RuntimeService/Version"
UNARY_UNARY, UNARY_STREAM, STREAM_UNARY, STREAM_STREAM = "unary-unary", "unary-stream", "stream-unary", "stream-stream"
# The streaming methods of runtime.v1; every other method is forwarded as unary. The Stream*
# lists are cri-api v0.37's (the kubelet's CRIListStreaming): containerd 2.4 sends an empty list
# as no message at all, which a unary call reports as an error, not UNIMPLEMENTED, so the kubelet
# would not fall back to the unary lists.
STREAMING = {
    "/runtime.v1.RuntimeService/GetContainerEvents": UNARY_STREAM,
    STREAM_IMAGES: UNARY_STREAM,
    **{f"/runtime.v1.RuntimeService/{name}": UNARY_STREAM for name in (
        "StreamPodSandboxes", "StreamContainers", "StreamContainerStats", "StreamPodSandboxStats",
        "StreamPodSandboxMetrics")},
}
MAX_CACHED_METHODS = 1024
SOCKET_MODE = 0o660
# A GetContainerEvents follower holds a worker for as long as it follows.
WORKERS = 64
MESSAGE_BYTES = 64 * 1024 * 1024
# Reconnect to a restarted runtime within a second, not gRPC's default of up to two minutes.
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MESSAGE_BYTES),
    ("grpc.max_send_message_length", MESSAGE_BYTES),
    ("grpc.enable_http_proxy", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
# How long a reload waits for the pins read with the new config before it says it is done anyway.
RELOAD_READ_SECONDS = 30.0
SERVER_OPTIONS = [("grpc.max_receive_message_length", MESSAGE_BYTES), ("grpc.max_send_message_length", MESSAGE_BYTES)]


class Forwarder:
    """A gRPC handler for every method: the request goes upstream as bytes, the answer (or the
    upstream's status code and message) comes back as it is, image answers with pins added."""

    def __init__(self, channel: grpc.Channel, pins: PinnedSet, log: LogFn, guard: Optional[RemoveGuard] = None,
                 callers: Callable[[grpc.ServicerContext], Caller] = lambda _: Caller()) -> None:
        self.channel = channel
        self.pins = pins
        self.log = log
        self.guard = guard
        self.callers = callers
        self._callables: dict[tuple[str, str], Any] = {}

    def _upstream(self, kind: str, method: str) -> Any:
        """The channel's callable for a method, made once: making one per call costs latency."""
        found = self._callables.get((kind, method))
        if found is None:
            factory = {UNARY_UNARY: self.channel.unary_unary, UNARY_STREAM: self.channel.unary_stream,
                       STREAM_UNARY: self.channel.stream_unary, STREAM_STREAM: self.channel.stream_stream}[kind]
            found = factory(method)
            if len(self._callables) < MAX_CACHED_METHODS:  # names come from callers: bounded
                self._callables[(kind, method)] = found
        return found

    def handler(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        import grpc

        method = details.method
        STATS.calls[METHOD_LABELS.get(method, OTHER_METHOD)] += 1
        kind = STREAMING.get(method, UNARY_UNARY)
        if kind == UNARY_STREAM:
            return grpc.unary_stream_rpc_method_handler(lambda req, ctx: self._unary_stream(method, req, ctx))
        if kind == STREAM_UNARY:
            return grpc.stream_unary_rpc_method_handler(lambda reqs, ctx: self._stream_unary(method, reqs, ctx))
        if kind == STREAM_STREAM:
            return grpc.stream_stream_rpc_method_handler(lambda reqs, ctx: self._stream_stream(method, reqs, ctx))
        return grpc.unary_unary_rpc_method_handler(lambda req, ctx: self._unary(method, req, ctx))

    def _unary(self, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        import grpc

        if method == REMOVE_IMAGE and self.guard is not None:
            return self._remove(request, context)
        call = self._upstream(UNARY_UNARY, method)
        try:
            reply: bytes = call(request, **_call_options(context))
        except grpc.RpcError as err:
            _abort(context, err)
        if method in (LIST_IMAGES, IMAGE_STATUS):
            return self._with_pins(method, reply)
        return reply

    def _remove(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        """RemoveImage: refused when the image is pinned, else forwarded; journaled either way."""
        import grpc

        assert self.guard is not None
        caller = self.callers(context)
        decision = self.guard.decide(request)
        if decision.refused:
            self.guard.record(decision, caller, REQUEST_REFUSED)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, decision.message)
        try:
            reply: bytes = self._upstream(UNARY_UNARY, REMOVE_IMAGE)(request, **_call_options(context))
        except grpc.RpcError as err:
            call: Any = err
            self.guard.record(decision, caller, REQUEST_FAILED, f"{call.code().name}: {call.details() or ''}")
            _abort(context, err)
        self.guard.record(decision, caller, REQUEST_FORWARDED)
        return reply

    def _with_pins(self, method: str, reply: bytes) -> bytes:
        keys = self.pins.current()
        if not keys:
            STATS.passed_through[PINS_UNREADABLE] += keys is None  # None: unreadable; empty: none to add
            return reply
        try:
            return rewrite(method, reply, keys)
        except Exception as err:  # noqa: BLE001 - an answer pinctl cannot read still goes back as it came
            STATS.passed_through[ANSWER_UNREADABLE] += 1
            self.log("error", "cannot read the runtime's answer; passed through unchanged", method=method,
                     error=str(err))
            return reply

    def _unary_stream(self, method: str, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        call = self._upstream(UNARY_STREAM, method)(request, **_call_options(context))
        if method == STREAM_IMAGES:  # each message a list of images, pinned as ListImages' are
            return (self._with_pins(method, reply) for reply in _relay(call, context))
        return _relay(call, context)

    def _stream_unary(self, method: str, requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        import grpc

        try:
            reply: bytes = self._upstream(STREAM_UNARY, method)(requests, **_call_options(context))
        except grpc.RpcError as err:
            _abort(context, err)
        return reply

    def _stream_stream(self, method: str, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        call = self._upstream(STREAM_STREAM, method)(requests, **_call_options(context))
        return _relay(call, context)


class _Handler:
    """grpc.GenericRpcHandler's one method, handing every method to the forwarder."""

    def __init__(self, forwarder: Forwarder) -> None:
        self.forwarder = forwarder

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        return self.forwarder.handler(handler_call_details)


def _relay(call: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
    import grpc

    context.add_callback(call.cancel)  # the caller went away: stop following upstream
    try:
        yield from call
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.CANCELLED or context.is_active():
            _abort(context, err)


def _call_options(context: grpc.ServicerContext) -> dict[str, Any]:
    """The caller's metadata and remaining deadline, for the upstream call."""
    remaining = context.time_remaining()
    # Keys gRPC sets itself on every call are not the caller's to pass on.
    metadata = [(k, v) for k, v in context.invocation_metadata() if not k.startswith(("grpc-", ":"))
                and k != "user-agent"]
    # Without a deadline gRPC reports an enormous remaining time.
    timeout = remaining if remaining is not None and remaining < 10 ** 8 else None
    return {"timeout": timeout, "metadata": metadata}


def _abort(context: grpc.ServicerContext, err: grpc.RpcError) -> NoReturn:
    """End the call with the upstream's own status code and message."""
    call: Any = err
    STATS.upstream_errors[call.code().name] += 1
    trailing = call.trailing_metadata() if hasattr(call, "trailing_metadata") else None
    if trailing:
        context.set_trailing_metadata([(k, v) for k, v in trailing if not k.startswith("grpc-")])
    context.abort(call.code(), call.details() or "")
    raise AssertionError("context.abort raises")


# -- the socket ------------------------------------------------------------------------------

def claim_socket(path: str) -> None:
    """Make way for a new socket at path: a stale one (nothing listening) is removed; a live one,
    or anything that is not a socket, is refused."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise UsageError(f"--listen {path} exists and is not a socket", "give a path for the proxy's own socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError as err:
        if err.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise UsageError(f"--listen {path}: cannot tell whether it is in use ({err.strerror})",
                             "remove it if nothing serves it") from None
        os.unlink(path)  # left by a crash: nothing listens on it
        return
    finally:
        probe.close()
    raise UsageError(f"--listen {path} is in use by a running process",
                     "stop the other proxy, or give another --listen path")


def same_socket(listen: str, upstream: str) -> bool:
    return os.path.abspath(listen) == os.path.abspath(upstream) or (
        os.path.exists(listen) and os.path.exists(upstream) and os.path.samefile(listen, upstream))


# -- running ---------------------------------------------------------------------------------

class Proxy:
    """The server on listen, forwarding to the runtime at upstream (a unix socket path)."""

    def __init__(self, listen: str, upstream: str, load: Callable[[], ProxySetup], log: LogFn,
                 refresh_seconds: float = REFRESH_SECONDS, relay: Optional[str] = None,
                 allow_remove_pinned: bool = False, history_dir: Optional[str] = None,
                 resync_seconds: float = RESYNC_SECONDS, follow_events: bool = True) -> None:
        import grpc

        if same_socket(listen, upstream):
            raise UsageError(f"--listen {listen} is the runtime's own socket",
                             "give the proxy a socket of its own, e.g. /run/pinctl/cri-proxy.sock")
        self.listen = os.path.abspath(listen)
        self.upstream = upstream
        self.log = log
        self.channel = grpc.insecure_channel(f"unix://{os.path.abspath(upstream)}", options=CHANNEL_OPTIONS)
        self._runtime_name: Optional[str] = None
        self.runtime: Optional[tuple[str, str]] = None  # the runtime's name and version, once asked
        self.relay_binary = relay
        self.pins = PinnedSet(load, self.runtime_name, log)
        self.feed = PinFeed(self.pins, self._publish, log, refresh_seconds, resync_seconds,
                            follow_events=follow_events)
        self._primed = False
        self.history_dir = history_dir
        self.journal = JournalWriter(history_dir, log) if history_dir else None
        self.guard = RemoveGuard(self.pins, upstream_status(self.channel), allow_remove_pinned, self.journal, log)
        self.forwarder = Forwarder(self.channel, self.pins, log, self.guard)
        self._stop = threading.Event()
        self._server: Optional[grpc.Server] = None
        self._joiner: Optional[PeerJoiner] = None
        self._relay: Optional[Relay] = None
        self._poll: Optional[ConfigPoll] = None
        self._relay_counted = ProxyStats()
        self._inode: Optional[tuple[int, int]] = None

    def runtime_name(self) -> str:
        """The upstream runtime's CRI name (containerd, docker, cri-o), asked once."""
        if self._runtime_name is None:
            from pinctl.proto import cri_pb2

            call = self.channel.unary_unary(VERSION)
            reply = cri_pb2.VersionResponse.FromString(call(cri_pb2.VersionRequest(version="v1").SerializeToString(),
                                                            timeout=5.0))
            self._runtime_name = reply.runtime_name
            self.runtime = (reply.runtime_name, reply.runtime_version)
        return self._runtime_name

    def start(self) -> None:
        # Checked here, for both paths: a failed bind is logged by gRPC's core on stderr, or
        # ends the relay, before either says why.
        directory = os.path.dirname(self.listen)
        if not (os.path.isdir(directory) and os.access(directory, os.W_OK | os.X_OK)):
            raise UsageError(f"--listen {self.listen}: cannot listen there",
                             "check that its directory exists and is writable")
        claim_socket(self.listen)
        if not self._primed:  # served with the pins in place: the first call finds them
            self.feed.prime()
            self._primed = True
        if self.relay_binary:
            self._start_relay(self.relay_binary)
        else:
            self._start_server()
        os.chmod(self.listen, SOCKET_MODE)
        info = os.stat(self.listen)
        self._inode = (info.st_dev, info.st_ino)
        self.log("info", "serving the CRI", listen=self.listen, upstream=self.upstream,
                 forwarding=self.relay_binary or "python")
        self._mark_serving()

    def _mark_serving(self) -> None:
        """Tell the watcher a proxy serves: a deletion with no RemoveImage journaled was then
        done outside the CRI. A mark that cannot be written is a warning, not a stop."""
        if self.history_dir is None:
            return
        try:
            presence.mark_serving(self.history_dir, self.listen, self.upstream)
        except OSError as err:
            self.log("warning", "cannot mark the proxy serving in the journal's directory", error=str(err))
            return
        if not any(t.name == "presence-heartbeat" for t in threading.enumerate()):
            threading.Thread(target=self._heartbeat, args=(self.history_dir,), name="presence-heartbeat",
                             daemon=True).start()

    def _heartbeat(self, directory: str) -> None:
        """Keep the mark fresh for a watcher in another PID namespace (presence.STALE_S)."""
        while not self._stop.wait(presence.HEARTBEAT_S):
            try:
                presence.touch(directory)
            except OSError:
                pass  # a mark removed under us is written again at the next (re)start

    def _start_relay(self, binary: str) -> None:
        self._relay = Relay(binary, self.listen, self.upstream, self.pins.current, self.log, self.guard)
        self._relay.start()

    def _publish(self, keys: Optional[PinnedKeys]) -> bool:
        """A new read's keys to the data path: the relay is sent them; the Forwarder here reads
        the PinnedSet itself."""
        relay = self._relay
        return relay.push(keys) if relay is not None and relay.exited() is None else True

    def _start_server(self) -> None:
        import grpc

        try:
            joiner = PeerJoiner(self.listen, SOCKET_MODE)
        except OSError as err:
            raise UsageError(f"--listen {self.listen}: cannot listen there ({err.strerror})",
                             "check that its directory exists and is writable") from None
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="cri-proxy"),
                             handlers=[_Handler(self.forwarder)], options=SERVER_OPTIONS)
        try:
            bound = server.add_insecure_port(f"unix://{joiner.inner}")
        except RuntimeError:
            bound = 0
        if not bound:
            joiner.close()
            raise UsageError(f"--listen {self.listen}: cannot serve gRPC behind it ({joiner.inner})",
                             "check that the temporary directory is writable")
        server.start()
        self.forwarder.callers = lambda context: joiner.caller(context.peer())
        joiner.start()
        self._server, self._joiner = server, joiner

    def running(self) -> bool:
        serving = self._server is not None or (self._relay is not None and self._relay.exited() is None)
        return serving and not self._stop.is_set()

    def call_stats(self) -> ProxyStats:
        """The calls counted so far: here, or by the relay (since it started; None from a relay
        that does not answer within 2 s gives the last figures it gave)."""

        if self._relay is None:
            return STATS
        counted = self._relay.stats()
        if counted is not None:
            self._relay_counted = relay_stats(counted)
        return self._relay_counted

    def socket_is_ours(self) -> bool:
        """Whether --listen is still the socket this proxy made (not removed, not replaced)."""
        try:
            info = os.stat(self.listen)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self._inode

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self._stop.set())
        signal.signal(signal.SIGINT, lambda *_: self._stop.set())
        signal.signal(signal.SIGHUP, lambda *_: self._reload())

    def _reload(self) -> None:
        # Not in the signal handler itself: the pins' lock may be held by the interrupted thread.
        threading.Thread(target=self._do_reload, daemon=True).start()

    def _do_reload(self) -> None:
        """SIGHUP's reload, and a changed config file's: the pins are read with the new config and
        in use before "config reloaded" is logged. The poll takes the files as read now, so SIGHUP
        after an edit reloads once, not twice."""
        if self._poll is not None:
            self._poll.rebase()
        self.pins.reload(then=self._read_with_new_config)

    def _read_with_new_config(self) -> None:
        self.feed.refollow()  # the new config may name other namespaces or another Docker
        if not self.feed.read_and_wait(RELOAD_READ_SECONDS):
            self.log("warning", "the pins of the new config are not read yet; answers use them once they are",
                     waited=f"{RELOAD_READ_SECONDS:g}s")

    def _config_changed(self, path: str) -> None:
        self.log("info", "config changed, reloading", path=path)
        self._do_reload()

    def wait(self) -> None:
        while not self._stop.wait(1.0):
            if self._relay is not None and self._relay.exited() is not None:
                self._relay_exited(self._relay.exited())
            if not self.feed.reader_alive() and self.feed.read_due():
                # The reader died (readiness says so): poll here, so answers keep up meanwhile.
                self.feed.read_now()

    def _relay_exited(self, code: Optional[int]) -> None:
        """The relay stops by itself only when signalled (exit 0: stop with it) or when it fails
        (start another, so that the kubelet keeps its runtime)."""
        if code == 0:
            self.log("info", "the relay was stopped; stopping")
            self._stop.set()
            return
        self.log("error", "the relay stopped on its own; starting another", exit_code=code)
        if self._relay is not None:
            self._relay.stop()
        try:
            self.start()
        except PinctlError as err:
            self.log("error", "cannot start the relay; trying again in a second", error=str(err))

    def stop(self) -> None:
        self._stop.set()
        if self._joiner is not None:
            self._joiner.stop_accepting()
        if self._server is not None:
            self._server.stop(grace=2.0).wait()
            self._server = None
        if self._joiner is not None:
            self._joiner.close()
            self._joiner = None
        if self._relay is not None:
            self._relay.stop()
            self._relay = None
        self._remove_socket()
        if self.history_dir is not None:
            try:
                presence.clear(self.history_dir)
            except OSError as err:
                self.log("warning", "cannot clear the proxy's mark in the journal's directory", error=str(err))
        if self.journal is not None:
            self.journal.close()
        self.feed.stop()
        self.pins.close()
        self.channel.close()
        self.log("info", "stopped")

    def _remove_socket(self) -> None:
        try:
            info = os.stat(self.listen)
        except FileNotFoundError:
            return
        if (info.st_dev, info.st_ino) == self._inode:  # not one a successor made meanwhile
            os.unlink(self.listen)

    def run(self) -> int:
        serve_for_long()  # a pin read lists every record, after every burst of image events: see service/memory.py
        self.start()
        poll = self._poll = ConfigPoll(self.pins.config_paths, self._config_changed)
        try:
            self.install_signal_handlers()
            self.pins.prepare()
            self.feed.start()
            poll.start()
            self.wait()
        finally:
            poll.stop()
            self.stop()
        return 0

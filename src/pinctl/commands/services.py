"""The long-running commands: sync --watch and cri-proxy. Each takes a way to read the config
again (SIGHUP, a changed file) and the metrics endpoint to run beside it, so that nothing here
serves or prints."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ContextManager, Iterator, Optional

from pinctl.commands import OpenRuntime
from pinctl.commands.sync import SyncRequest, refuse_empty_prune
from pinctl.errors import UsageError
from pinctl.model import LogFn

if TYPE_CHECKING:
    from pinctl.config.loader import Config
    from pinctl.criproxy.proxy import Proxy
    from pinctl.imports.watching import DirsSync
    from pinctl.watch.health import Checker
    from pinctl.watch.watcher import Watcher


@dataclass(frozen=True)
class WatchRequest:
    """sync --watch: prune as it goes, and the kubelet config the periodic check reads."""

    prune: bool = False
    allow_empty_policy: bool = False
    kubelet_config: Optional[str] = None
    # import_dirs' disk budget (--max-usage); None: the kubelet's high threshold minus 5.
    max_usage: Optional[float] = None
    # How often the periodic check reads the whole node (0: never); it runs when something reads
    # its figures: the metrics endpoint, or the Node condition.
    check_interval: float = 60.0
    metrics: bool = False
    node_status: Optional[NodeStatusRequest] = None


@dataclass(frozen=True)
class NodeStatusRequest:
    """sync --watch --node-status: the Node whose condition this agent writes, and how often unchanged."""

    node: str
    heartbeat: float = 300.0
    # The API keeps a cluster-scoped object's core/v1 Events in namespace default (the kubelet's are there too).
    events_namespace: str = "default"


def watch(read_config: Callable[[], Config], request: WatchRequest, log: LogFn,
          served: Callable[[Watcher, Optional[Checker]], ContextManager[None]]) -> int:
    """Keep the policy's pins true until SIGTERM or SIGINT; read_config is called again on
    SIGHUP and when the config's files change, and served(watcher, checker) runs the metrics
    endpoint beside it. log says what the watcher does and (warn_once) what opening the node
    notices. With request.node_status, the Node's condition and Events are written as well."""
    from pinctl.gc.kubelet import read_gc_settings
    from pinctl.node import crio as crio_node
    from pinctl.node.sources import open_node, open_runtime
    from pinctl.pins.policy import compile_policy
    from pinctl.service.configfiles import watched_paths
    from pinctl.watch.watcher import Watcher, WatchSetup, warn_once

    first = read_config()
    refuse_empty_prune(compile_policy(first.patterns), SyncRequest(request.prune, False, request.allow_empty_policy,
                                                                   first.files))
    if request.kubelet_config:
        read_gc_settings(request.kubelet_config)  # a file named but unreadable is exit 2, now
    warn = warn_once(log)

    latest = [first]

    def load() -> WatchSetup:
        cfg, revision = _read_with_revision(read_config, latest[0])
        latest[0] = cfg
        policy = compile_policy(cfg.patterns)
        # Checked again at each reload: a policy file caught empty (truncated, then written) must
        # not prune every pin; the reload fails and the policy in use stays.
        refuse_empty_prune(policy, SyncRequest(request.prune, False, request.allow_empty_policy, cfg.files))
        runtime = lambda: open_runtime(cfg, lambda note: log("info", note))  # noqa: E731
        return WatchSetup(
            lambda: open_node(cfg, warn, absent_ok=True), policy, crio_node.address_shown(cfg), runtime,
            lambda: read_gc_settings(request.kubelet_config), watched_paths(cfg), _dirs_sync(cfg, request, runtime),
            revision, cfg.settings.history_dir, _budget(request), cfg.settings.kubelet_log)

    from pinctl.watch.health import Checker

    watcher = Watcher(load, log, request.prune)
    wants_figures = request.metrics or request.node_status is not None
    # The check's rounds and the watcher's full syncs take turns (Watcher.reading): each reads the whole node.
    checker = (Checker(lambda: watcher.settings, request.check_interval, log, watcher.reading)
               if wants_figures and request.check_interval > 0 else None)
    if checker is not None:
        watcher.state.on_change = checker.soon
    with served(watcher, checker), _checking(checker), _reporting(watcher, checker, request.node_status, log):
        watcher.install_signal_handlers()
        return watcher.run()


@contextlib.contextmanager
def _checking(checker: Optional[Checker]) -> Iterator[None]:
    if checker is not None:
        checker.start()
    try:
        yield
    finally:
        if checker is not None:
            checker.stop()


@contextlib.contextmanager
def _reporting(watcher: Watcher, checker: Optional[Checker], request: Optional[NodeStatusRequest],
               log: LogFn) -> Iterator[None]:
    """The Node condition from each check round, Events from each batch (watch.report)."""
    if request is None or checker is None:
        yield
        return
    from pinctl.kubeapi import KubeApi
    from pinctl.watch.report import NodeStatusReporter, report_of

    # Credentials are read now: a pod without its token, or a kubeconfig that does not read, is
    # exit 2 at start (the pod's log says why), not a warning repeated every heartbeat.
    api = KubeApi.for_agent()
    reporter = NodeStatusReporter(request.node, lambda: api, request.heartbeat, log, request.events_namespace)
    state = watcher.state
    checker.on_round = lambda found: reporter.update(
        report_of(found, state, watcher.settings.revision, state.last_reload_error))
    state.on_results = reporter.results
    watcher.on_node_event = reporter.event
    reporter.start()
    log("info", "writing the node's status", node=request.node, heartbeat=f"{request.heartbeat:g}s", api=api.where)
    try:
        yield
    finally:
        reporter.stop()


def _read_with_revision(read_config: Callable[[], Config], previous: Config) -> tuple[Config, str]:
    """The config and its main file's revision (what fleet status compares with the ConfigMap's).
    The file (at the path the previous read found) is hashed before the read and again after it:
    a file replaced in between is read again, so the revision reported is that of the policy
    applied. One read of the config each time, as before node status."""
    for _attempt in range(3):
        before = _revision(previous)
        cfg = read_config()
        if _revision(cfg) == before:
            return cfg, before
        previous = cfg
    return cfg, ""


def _revision(cfg: Config) -> str:
    from pinctl.fleet.condition import revision_of

    if not cfg.files:
        return ""
    try:
        with open(cfg.files[0], "rb") as handle:
            return revision_of(handle.read())
    except OSError:
        return ""


def _budget(request: WatchRequest) -> float:
    """The disk budget of what the watcher brings onto the node (import_dirs, a wanted image pulled
    back): --max-usage, else the kubelet's image GC high threshold minus 5."""
    if request.max_usage is not None:
        return request.max_usage
    from pinctl.gc.kubelet import read_gc_settings
    from pinctl.pull.run import default_max_usage

    return default_max_usage(read_gc_settings(request.kubelet_config).settings.high_threshold_percent)


def _dirs_sync(cfg: Config, request: WatchRequest, runtime: OpenRuntime) -> Optional[DirsSync]:
    """What the watcher imports at each full sync: import_dirs, with pull's disk budget."""
    if not cfg.settings.import_dirs:
        return None
    from pinctl.imports.watching import DirsSync

    s = cfg.settings
    return DirsSync(tuple(s.import_dirs), tuple(s.namespaces), s.containerd_address, s.timeout, s.containerd_config,
                    request.prune, _budget(request), runtime)


@dataclass(frozen=True)
class ProxyRequest:
    """cri-proxy: the socket to serve, and what forwards (a relay binary, or None for Python)."""

    listen: str
    relay: Optional[str]
    allow_remove_pinned: bool = False
    refresh_seconds: float = 2.0  # criproxy.pins.REFRESH_SECONDS


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
                  refresh_seconds=request.refresh_seconds)
    with served(proxy):
        return proxy.run()

"""pinctl sync: the policy applied once; with --pull, its exact names pulled first; with
import_dirs, the directories' archives imported and pinned first; with --watch, kept applied as
images come and go, until SIGTERM. The watch takes a way to read the config again (SIGHUP, a
changed file) and the metrics endpoint to run beside it, so that nothing here serves or prints."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, ContextManager, Iterator, Optional, Sequence

from pinctl.commands import OpenRuntime
from pinctl.commands.importing import ImportCallbacks
from pinctl.commands.pin import ChangeReport
from pinctl.commands.pull import PullCallbacks, pull_refs
from pinctl.errors import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, PinctlError, UsageError
from pinctl.model import STATUS_PARTIAL, STATUS_SUCCESS, ItemResult, LogFn, Status

if TYPE_CHECKING:
    from pinctl.config.loader import Config
    from pinctl.imports.run import ImportItem, ImportRequest
    from pinctl.imports.watching import DirsSync
    from pinctl.node.sources import Node
    from pinctl.pins.policy import Policy
    from pinctl.pull.run import PullReport, PullRequest
    from pinctl.watch.health import Checker
    from pinctl.watch.watcher import Watcher


@dataclass(frozen=True)
class SyncRequest:
    """pinctl sync's switches; files: the config files read, named when an empty policy refuses --prune."""

    prune: bool = False
    dry_run: bool = False
    allow_empty_policy: bool = False
    files: Sequence[str] = ()


def sync(node: Node, policy: Policy, request: SyncRequest) -> ChangeReport:
    from pinctl.pins import plans as pinning

    refuse_empty_prune(policy, request)
    crio = node.crio()
    if crio is not None:
        from pinctl.node import crio as crio_node

        done = crio_node.sync(crio, policy, request.prune, request.dry_run)
        return ChangeReport("sync", done.results, request.dry_run, done.warnings)
    plan = pinning.make_sync_plan(node.views(), policy, request.prune)
    return ChangeReport("sync", pinning.apply_plan(plan, request.dry_run), request.dry_run)


def refuse_empty_prune(policy: Policy, request: SyncRequest) -> None:
    """A mistyped config path must not unpin a node: an empty policy prunes only when told to."""
    if request.prune and not policy and not request.allow_empty_policy:
        read = ", ".join(request.files) or "no config file"
        raise UsageError(f"the policy has no pinned_images (read: {read}); --prune would remove every pin sync added",
                         "fix the config, or pass --allow-empty-policy if that is what you want")


@dataclass
class SyncPullReport:
    """sync --pull: the pulls (with what the policy names but cannot be pulled), then the sync."""

    pulled: PullReport
    sync: Optional[ChangeReport]

    @property
    def exit_code(self) -> int:
        if self.pulled.interrupted or self.sync is None:
            return self.pulled.exit_code
        codes = {self.pulled.exit_code, self.sync.exit_code}
        return EXIT_OK if codes == {EXIT_OK} else (EXIT_ERROR if codes == {EXIT_ERROR} else EXIT_PARTIAL)


def sync_pull(node: Node, reopen: Callable[[], Node], policy: Policy, open_runtime: OpenRuntime,
              request: PullRequest, sync_request: SyncRequest, callbacks: PullCallbacks) -> SyncPullReport:
    """Pull every exact reference of the policy the node lacks, then sync on the node as the pulls
    left it (reopen: a first pull may create the namespace). Globs, keywords and image IDs name
    no one image to pull: each is reported as skipped, with why."""
    from pinctl import refs as references
    from pinctl.pull import run as pulling

    refuse_empty_prune(policy, sync_request)
    exact = [p for p in policy.patterns if p.kind == "exact" and not p.needle.startswith("sha256:")]
    wanted = list(dict.fromkeys(references.normalize(p.text) for p in exact))
    report = pull_refs(node, open_runtime, replace(request, refs=wanted, pin=False), wanted, callbacks)
    for pattern in policy.patterns:
        if pattern not in exact:
            what = "an image ID" if pattern.kind == "exact" else f"a {pattern.kind}"
            report.items.append(pulling.PullItem(pattern.text, "", pulling.SKIPPED, unpullable=True,
                                                 why=f"{what} names no one image to pull ({pattern.source or 'policy'})"))
    if report.interrupted:
        return SyncPullReport(report, None)
    return SyncPullReport(report, sync(reopen(), policy, replace(sync_request, dry_run=False)))


@dataclass
class SyncImportReport:
    """sync with import_dirs: what the directories' archives gave (imports, and their pins and
    prunes), then the policy's sync."""

    imports: list[ImportItem]
    archive_results: list[ItemResult]
    sync: ChangeReport
    notes: list[str] = field(default_factory=list)

    @property
    def results(self) -> list[ItemResult]:
        return sorted([*self.archive_results, *self.sync.results], key=lambda r: (r.namespace, r.ref))

    @property
    def status(self) -> Status:
        from pinctl.pins.plans import status_of

        failed_import = any(item.action == "failed" for item in self.imports)
        status = status_of(self.results)
        if failed_import and status == STATUS_SUCCESS:
            return STATUS_PARTIAL if self.results or len(self.imports) > 1 else "error"
        return status

    @property
    def exit_code(self) -> int:
        return {STATUS_SUCCESS: EXIT_OK, STATUS_PARTIAL: EXIT_PARTIAL}.get(self.status, EXIT_ERROR)


@dataclass(frozen=True)
class SyncImportRequest:
    """sync with import_dirs: sync's own switches, and how the directories' archives are imported."""

    sync: SyncRequest
    imports: ImportRequest


def sync_with_imports(node: Node, reopen: Callable[[], Node], policy: Policy, open_runtime: OpenRuntime, cfg: Config,
                      job: SyncImportRequest, callbacks: ImportCallbacks) -> SyncImportReport:
    """sync, with import_dirs: each directory's archives imported (once) and pinned as the
    archive's own; with --prune, the pins an archive no longer gives removed. Then the policy's
    sync on the node as the imports left it. An empty policy prunes only archive pins unless
    --allow-empty-policy (sync's own guard)."""
    from pinctl.imports import dirs as import_dirs
    from pinctl.imports import run as importing
    from pinctl.imports.targets import choose_import_target

    sync_request, request = job.sync, job.imports
    settings = cfg.settings
    notes: list[str] = []
    try:
        target = choose_import_target(node, settings.namespaces, settings.containerd_address, settings.timeout,
                                      request.timeout, request.snapshotter, settings.containerd_config, open_runtime)
    except PinctlError as err:
        imports = [importing.ImportItem(directory, "", "", "failed", str(err)) for directory in settings.import_dirs]
        dirs_report = import_dirs.DirsReport(imports=imports)
    else:
        dirs_report = import_dirs.sync_dirs(node, target, request, settings.import_dirs, sync_request.prune,
                                            sync_request.dry_run, callbacks.progress, callbacks.finished)
    policy_request = sync_request
    if sync_request.prune and not policy and not sync_request.allow_empty_policy:
        notes.append("the policy has no pinned_images: only pins of import_dirs archives were pruned "
                     "(--allow-empty-policy prunes sync's own too)")
        policy_request = replace(sync_request, prune=False)
    report = sync(reopen(), policy, policy_request)
    return SyncImportReport(dirs_report.imports, dirs_report.results, report, notes + dirs_report.notes)


# -- sync --watch -------------------------------------------------------------------------------


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

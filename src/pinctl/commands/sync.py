"""pinctl sync: the policy applied once; with --pull, its exact names pulled first; with
import_dirs, the directories' archives imported and pinned first. (sync --watch is in
commands.services.)"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pinctl.commands import OpenRuntime
from pinctl.commands.importing import ImportCallbacks
from pinctl.commands.pin import ChangeReport
from pinctl.commands.pull import PullCallbacks, pull_refs
from pinctl.errors import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, PinctlError, UsageError
from pinctl.model import STATUS_PARTIAL, STATUS_SUCCESS, ItemResult, Status

if TYPE_CHECKING:
    from pinctl.config.loader import Config
    from pinctl.imports.run import ImportItem, ImportRequest
    from pinctl.node.sources import Node
    from pinctl.pins.policy import Policy
    from pinctl.pull.run import PullReport, PullRequest


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

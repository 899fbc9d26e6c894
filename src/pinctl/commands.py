"""One function per command: typed arguments in, a result out. cli.py parses options, calls
one of these, prints the result and exits with the code the result carries. Guards (an
empty policy before a prune), polling (check --wait) and filters live here, not in click.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pinctl.errors import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, UsageError
from pinctl.model import STATUS_PARTIAL, STATUS_SUCCESS, ImageRow, ItemResult, Status

if TYPE_CHECKING:
    from pinctl.backends.cri import CriRuntime, RuntimeVersion
    from pinctl.gc.model import GcSettings
    from pinctl.gc.kubelet import SourcedGcSettings
    from pinctl.gc.plan import GcReport, PruneItem, PrunePlan, PruneReport, PruneRequest
    from pinctl.check.compare import CheckResult, Clock, RuntimeImages
    from pinctl.config.loader import PatternEntry
    from pinctl.pins.export import Export
    from pinctl.pins.lint import Problem
    from pinctl.pins.policy import Policy
    from pinctl.pull.run import PullItem, PullReport, PullRequest
    from pinctl.node.sources import Node


@dataclass(frozen=True)
class LsQuery:
    """What `pinctl ls` asks for: filter terms and switches."""

    filters: Sequence[str] = ()
    pinned: Optional[bool] = None
    drift: bool = False
    dialect: str = "pinctl"

    @property
    def names_only_will_do(self) -> bool:
        return not (self.filters or self.drift or self.pinned is not None)


@dataclass
class LsResult:
    rows: list[ImageRow]
    errors: list[dict[str, str]] = field(default_factory=list)


def ls(node: Node, policy: Policy, label_rules: Sequence[str], query: LsQuery,
       runtime: Optional[RuntimeImages] = None) -> LsResult:
    """Rows with pins and reasons, filtered; with a runtime, what it tells the kubelet too."""
    from pinctl.pins.listing import filter_rows

    listing = node.rows(policy, label_rules)
    if runtime is not None:
        from pinctl.check.compare import annotate_cri

        annotate_cri(listing.rows, runtime.list_images())
    rows = filter_rows(listing.rows, query.filters, query.pinned, query.drift, query.dialect)
    return LsResult(rows, listing.errors)


def ls_names(node: Node) -> list[str]:
    """References alone, from the image lists: no manifest is read (what completion calls)."""
    return [ref for _namespace, ref in node.names()]


@dataclass
class ChangeReport:
    """The outcome of pin, unpin or sync: every item, and what that means for the exit code."""

    command: str
    results: list[ItemResult]
    dry_run: bool

    @property
    def status(self) -> Status:
        from pinctl.pins.plans import status_of

        return status_of(self.results)

    @property
    def exit_code(self) -> int:
        return {STATUS_SUCCESS: EXIT_OK, STATUS_PARTIAL: EXIT_PARTIAL}.get(self.status, EXIT_ERROR)


def change(node: Node, command: str, args: Sequence[str], dialect: str, dry_run: bool) -> ChangeReport:
    """pin or unpin: every argument parsed first (UsageError changes nothing), then applied."""
    from pinctl.pins import plans as pinning

    plan = pinning.make_plan(node.views(), command, args, dialect, node.refusal)
    return ChangeReport(command, pinning.apply_plan(plan, dry_run), dry_run)


def sync(node: Node, policy: Policy, prune: bool, dry_run: bool, allow_empty_policy: bool,
         files: Sequence[str]) -> ChangeReport:
    from pinctl.pins import plans as pinning

    refuse_empty_prune(policy, prune, allow_empty_policy, files)
    plan = pinning.make_sync_plan(node.views(), policy, prune)
    return ChangeReport("sync", pinning.apply_plan(plan, dry_run), dry_run)


def refuse_empty_prune(policy: Policy, prune: bool, allow_empty_policy: bool, files: Sequence[str]) -> None:
    """A mistyped config path must not unpin a node: an empty policy prunes only when told to."""
    if prune and not policy and not allow_empty_policy:
        read = ", ".join(files) or "no config file"
        raise UsageError(f"the policy has no pinned_images (read: {read}); --prune would remove every pin sync added",
                         "fix the config, or pass --allow-empty-policy if that is what you want")


@dataclass
class CheckReport:
    result: CheckResult
    waited: Optional[float]
    # pinctl's side of the last comparison, and the namespaces it was read from.
    rows: list[ImageRow] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.result.agree else EXIT_ERROR


def check(
    node: Node, policy: Policy, label_rules: Sequence[str], runtime: RuntimeImages, version: RuntimeVersion,
    refs: Sequence[str], wait: float, progress: Callable[[CheckResult, float], None],
    clock: Optional[Clock] = None,
) -> CheckReport:
    """pinctl's view against the runtime's, asked again until they agree or wait runs out."""
    from pinctl.check import compare as checking

    rows: list[ImageRow] = []

    def read() -> CheckResult:
        rows[:] = node.rows(policy, label_rules).rows
        return checking.check_runtime(rows, runtime, version, refs)

    result, waited = checking.wait_for_agreement(read, wait, clock or checking.SystemClock(), progress)
    return CheckReport(result, waited if wait > 0 else None, rows, node.selected_namespaces())


def namespaces(node: Node) -> list[tuple[str, bool]]:
    return node.namespaces()


def export(target: str, policy: Policy, label_rules: Sequence[str], node: Optional[Node]) -> Export:
    """The policy as a runtime's configuration; patterns it cannot express are expanded to the
    references present now (none with node None, i.e. --offline). sha256: IDs are not names."""
    from pinctl.pins import export as exporting

    present: Optional[list[str]] = None
    if node is not None:
        from pinctl.pins.policy import Policy as EmptyPolicy

        present = [row.ref for row in node.rows(EmptyPolicy(), []).rows if not row.ref.startswith("sha256:")]
    return exporting.export(target, policy, present, label_rules)



@dataclass
class LintReport:
    problems: list[Problem]

    @property
    def exit_code(self) -> int:
        return EXIT_ERROR if self.problems else EXIT_OK


def lint(entries: Sequence[PatternEntry], open_node: Optional[Callable[[], Node]]) -> LintReport:
    """The patterns checked alone and, given a way to open the node, against the images there."""
    from pinctl.pins import lint as linting

    return LintReport(linting.lint(entries, open_node))


def gc_plan(node: Node, policy: Policy, label_rules: Sequence[str], runtime: CriRuntime, version: RuntimeVersion,
            settings: SourcedGcSettings, usage: Optional[float]) -> GcReport:
    """The kubelet's next GC run as modelled from the runtime's images, containers and disk."""
    from datetime import datetime, timezone

    from pinctl.gc import plan as gc

    rows = node.rows(policy, label_rules).rows
    return gc.gc_plan(gc.CriDomain(runtime, version), rows, settings, datetime.now(timezone.utc), usage)


def prune(node: Node, policy: Policy, label_rules: Sequence[str], namespaces: Sequence[str],
          open_runtime: Callable[[], tuple[CriRuntime, RuntimeVersion]], settings: GcSettings,
          request: PruneRequest, dry_run: bool, confirm: Callable[[Sequence[PrunePlan]], None],
          progress: Callable[[PruneItem], None] = lambda _item: None) -> PruneReport:
    """Plan per runtime, have the plan confirmed (unless a dry run), then delete item by item."""
    from datetime import datetime, timezone

    from pinctl.gc import plan as gc

    if request.until_usage is not None and request.all_unused:
        raise UsageError("--until-usage and --all-unused do not go together", "pick one")
    rows = node.rows(policy, label_rules).rows
    now = datetime.now(timezone.utc)
    plans = [gc.plan_prune(domain, rows, settings, request, now)
             for domain in gc.prune_domains(node, namespaces, open_runtime)]
    if not dry_run and any(plan.delete for plan in plans):
        confirm(plans)
    return gc.PruneReport(gc.apply_prune(plans, gc.wanted_now(node, policy), dry_run, progress), dry_run)


def pull(node: Node, namespaces: Sequence[str], open_runtime: Callable[[], tuple[CriRuntime, RuntimeVersion]],
         request: PullRequest, registry_config: Optional[str], progress: Callable[[str, str], None],
         finished: Callable[[PullItem], None]) -> PullReport:
    """Every reference parsed first (a malformed one pulls nothing), then pulled through the
    runtime that will use it, within the disk budget, each pinned right after its pull."""
    from pinctl import refs as references
    from pinctl.pins.patterns import is_pattern

    wanted: list[str] = []
    for arg in request.refs:
        if is_pattern(arg) or arg.startswith("sha256:"):
            raise UsageError(f"cannot pull {arg}: only a reference names what to pull",
                             "give registry.example/team/app:1.0 or NAME@sha256:<digest>")
        wanted.append(references.normalize(arg))
    return _pull_refs(node, namespaces, open_runtime, request, registry_config, list(dict.fromkeys(wanted)),
                      progress, finished)


def _pull_refs(node: Node, namespaces: Sequence[str],
               open_runtime: Callable[[], tuple[CriRuntime, RuntimeVersion]], request: PullRequest,
               registry_config: Optional[str], wanted: Sequence[str], progress: Callable[[str, str], None],
               finished: Callable[[PullItem], None]) -> PullReport:
    from pinctl.backends import registry
    from pinctl.backends.registry_auth import load_auths
    from pinctl.pull import run as pulling
    from pinctl.pull.targets import NodeLabels, choose_target

    auths = load_auths(registry_config) if registry_config else {}
    target = choose_target(node, namespaces, open_runtime)
    if not wanted:
        return pulling.PullReport(target.name, [], request.max_usage)
    run = pulling.PullRun(target, NodeLabels(node), request, pulling.Budget(target, request.max_usage), auths,
                          registry.compressed_size, progress)
    items, interrupted = pulling.run(run, wanted, finished)
    return pulling.PullReport(target.name, items, request.max_usage, interrupted)


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


def sync_pull(node: Node, reopen: Callable[[], Node], policy: Policy, namespaces: Sequence[str],
              open_runtime: Callable[[], tuple[CriRuntime, RuntimeVersion]], request: PullRequest,
              registry_config: Optional[str], prune: bool, allow_empty_policy: bool, files: Sequence[str],
              progress: Callable[[str, str], None], finished: Callable[[PullItem], None]) -> SyncPullReport:
    """Pull every exact reference of the policy the node lacks, then sync on the node as the pulls
    left it (reopen: a first pull may create the namespace). Globs, keywords and image IDs name
    no one image to pull: each is reported as skipped, with why."""
    from dataclasses import replace

    from pinctl import refs as references
    from pinctl.pull import run as pulling

    refuse_empty_prune(policy, prune, allow_empty_policy, files)
    exact = [p for p in policy.patterns if p.kind == "exact" and not p.needle.startswith("sha256:")]
    wanted = list(dict.fromkeys(references.normalize(p.text) for p in exact))
    report = _pull_refs(node, namespaces, open_runtime, replace(request, refs=wanted, pin=False),
                        registry_config, wanted, progress, finished)
    for pattern in policy.patterns:
        if pattern not in exact:
            what = "an image ID" if pattern.kind == "exact" else f"a {pattern.kind}"
            report.items.append(pulling.PullItem(pattern.text, "", pulling.SKIPPED, unpullable=True,
                                                 why=f"{what} names no one image to pull ({pattern.source or 'policy'})"))
    if report.interrupted:
        return SyncPullReport(report, None)
    return SyncPullReport(report, sync(reopen(), policy, prune, False, allow_empty_policy, files))

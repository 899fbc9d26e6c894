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
    from pinctl.gcmodel import GcSettings
    from pinctl.kubelet import SourcedGcSettings
    from pinctl.service.gc import GcReport, PruneItem, PrunePlan, PruneReport, PruneRequest
    from pinctl.service.check import CheckResult, Clock, RuntimeImages
    from pinctl.config import PatternEntry
    from pinctl.service.export import Export
    from pinctl.service.lint import Problem
    from pinctl.service.policy import Policy
    from pinctl.service.sources import Node


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
    from pinctl.service.listing import filter_rows

    listing = node.rows(policy, label_rules)
    if runtime is not None:
        from pinctl.service.check import annotate_cri

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
        from pinctl.service.pinning import status_of

        return status_of(self.results)

    @property
    def exit_code(self) -> int:
        return {STATUS_SUCCESS: EXIT_OK, STATUS_PARTIAL: EXIT_PARTIAL}.get(self.status, EXIT_ERROR)


def change(node: Node, command: str, args: Sequence[str], dialect: str, dry_run: bool) -> ChangeReport:
    """pin or unpin: every argument parsed first (UsageError changes nothing), then applied."""
    from pinctl.service import pinning

    plan = pinning.make_plan(node.views(), command, args, dialect, node.refusal)
    return ChangeReport(command, pinning.apply_plan(plan, dry_run), dry_run)


def sync(node: Node, policy: Policy, prune: bool, dry_run: bool, allow_empty_policy: bool,
         files: Sequence[str]) -> ChangeReport:
    from pinctl.service import pinning

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
    from pinctl.service import check as checking

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
    from pinctl.service import export as exporting

    present: Optional[list[str]] = None
    if node is not None:
        from pinctl.service.policy import Policy as EmptyPolicy

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
    from pinctl.service import lint as linting

    return LintReport(linting.lint(entries, open_node))


def gc_plan(node: Node, policy: Policy, label_rules: Sequence[str], runtime: CriRuntime, version: RuntimeVersion,
            settings: SourcedGcSettings, usage: Optional[float]) -> GcReport:
    """The kubelet's next GC run as modelled from the runtime's images, containers and disk."""
    from datetime import datetime, timezone

    from pinctl.service import gc

    rows = node.rows(policy, label_rules).rows
    return gc.gc_plan(gc.CriDomain(runtime, version), rows, settings, datetime.now(timezone.utc), usage)


def prune(node: Node, policy: Policy, label_rules: Sequence[str], namespaces: Sequence[str],
          open_runtime: Callable[[], tuple[CriRuntime, RuntimeVersion]], settings: GcSettings,
          request: PruneRequest, dry_run: bool, confirm: Callable[[Sequence[PrunePlan]], None],
          progress: Callable[[PruneItem], None] = lambda _item: None) -> PruneReport:
    """Plan per runtime, have the plan confirmed (unless a dry run), then delete item by item."""
    from datetime import datetime, timezone

    from pinctl.service import gc

    if request.until_usage is not None and request.all_unused:
        raise UsageError("--until-usage and --all-unused do not go together", "pick one")
    rows = node.rows(policy, label_rules).rows
    now = datetime.now(timezone.utc)
    plans = [gc.plan_prune(domain, rows, settings, request, now)
             for domain in gc.prune_domains(node, namespaces, open_runtime)]
    if not dry_run and any(plan.delete for plan in plans):
        confirm(plans)
    return gc.PruneReport(gc.apply_prune(plans, gc.wanted_now(node, policy), dry_run, progress), dry_run)

"""pinctl gc plan and pinctl prune: the kubelet's next GC run modelled, and imitated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pinctl.commands import OpenRuntime
from pinctl.errors import EXIT_OK, EXIT_PARTIAL, UsageError, batch_exit_code
from pinctl.model import RUNTIME_CONTAINERD

if TYPE_CHECKING:
    from pinctl.gc.kubelet import SourcedGcSettings
    from pinctl.gc.model import GcSettings
    from pinctl.gc.plan import GcReport, PruneAction, PruneItem, PrunePlan, PruneRequest
    from pinctl.node.sources import Node
    from pinctl.pins.policy import Policy


def gc_plan(node: Node, policy: Policy, open_runtime: OpenRuntime, settings: SourcedGcSettings,
            usage: Optional[float]) -> GcReport:
    """The kubelet's next GC run as modelled from the runtime's images, containers and disk."""
    from datetime import datetime, timezone

    # The engines answer while pinctl works: the node's records while the CRI is opened and the
    # GC's modules load, the CRI's lists while the records are read. containerd's CRI answers from
    # memory, before containerd has encoded the records: its lists are taken and decoded first,
    # while pinctl would only wait. (Through cri-dockerd they are Docker's own, slow: taken after.)
    node.prefetch()
    runtime, version = open_runtime()
    from pinctl.gc import plan as gc

    runtime.prefetch("images", "containers")
    domain = gc.cri_domain(node, runtime, version)
    if version.name == RUNTIME_CONTAINERD:
        domain.take_listings()
    rows = node.rows(policy, runtime_sizes=False).rows
    kubelet = gc.kubelet_start_time(runtime.endpoint)
    return gc.gc_plan(domain, rows, settings, datetime.now(timezone.utc), usage, kubelet)


@dataclass(frozen=True)
class PruneJob:
    """pinctl prune: the kubelet's GC settings, how far to go, where (-n), and whether only to plan."""

    settings: GcSettings
    limits: PruneRequest
    namespaces: Sequence[str] = ()
    dry_run: bool = False


def prune(node: Node, policy: Policy, open_runtime: OpenRuntime, job: PruneJob,
          confirm: Callable[[Sequence[PrunePlan]], None],
          progress: Callable[[PruneItem], None] = lambda _item: None) -> PruneReport:
    """Plan per runtime, have the plan confirmed (unless a dry run), then delete item by item."""
    from datetime import datetime, timezone

    from pinctl.gc import plan as gc

    limits = job.limits
    if limits.until_usage is not None and (limits.all_unused or limits.images):
        raise UsageError(f"--until-usage and {'REF' if limits.images else '--all-unused'} do not go together", "pick one")
    rows = node.rows(policy, runtime_sizes=False).rows
    now = datetime.now(timezone.utc)
    plans = [gc.plan_prune(domain, rows, job.settings, limits, now)
             for domain in gc.prune_domains(node, job.namespaces, open_runtime)]
    unmatched = [term for term in limits.images if not any(term in plan.matched for plan in plans)]
    if unmatched:  # before anything is asked or deleted
        raise UsageError(f"no image matches {', '.join(unmatched)}: nothing was deleted", "pinctl ls lists the images")
    if not job.dry_run and any(plan.delete for plan in plans):
        confirm(plans)
    items = gc.apply_prune(plans, gc.wanted_now(node, policy), job.dry_run, progress)
    return PruneReport(items, job.dry_run, plans, named=bool(limits.images))


# A prune deleted an image, or (a dry run) would: a dry run exits as the prune it plans would.
DELETED: tuple[PruneAction, ...] = ("removed", "would-remove")


@dataclass
class PruneReport:
    items: list[PruneItem]
    dry_run: bool
    plans: Sequence[PrunePlan] = ()  # what the items came from: why nothing goes, when nothing does
    named: bool = False  # prune REF...: every item is an image the caller named

    @property
    def freed(self) -> int:
        return sum(item.size for item in self.items if item.action == "removed")

    @property
    def exit_code(self) -> int:
        return prune_exit_code([item.action for item in self.items], self.named)


def prune_exit_code(actions: Sequence[PruneAction], named: bool) -> int:
    """Without names a prune deletes what is due: an image it keeps is the rule at work, and only
    a delete that failed is a failure (3). With names the caller asked for those images, and each
    one not deleted (kept, or its delete failed) is an item not done, as in any batch: 0 every
    named image deleted, 1 none of them, 3 some."""
    if not named:
        return EXIT_PARTIAL if "failed" in actions else EXIT_OK
    deleted = [action in DELETED for action in actions]
    return batch_exit_code(False, bool(deleted) and all(deleted), not any(deleted))

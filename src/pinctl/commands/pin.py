"""pinctl pin and pinctl unpin; ChangeReport, which sync's report is too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

from pinctl.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_PARTIAL
from pinctl.model import (ACTION_ALREADY_UNPINNED, ACTION_UNPINNED, REASON_DOCKER_LABEL, REASON_PATTERN, STATUS_PARTIAL,
                          STATUS_SUCCESS, ImageRow, ItemResult, Reason, Status)

if TYPE_CHECKING:
    from pinctl.node.sources import Node
    from pinctl.pins.policy import Policy


@dataclass
class ChangeReport:
    """pin, unpin or sync: every item, the exit code, and warnings said after the items."""

    command: str
    results: list[ItemResult]
    dry_run: bool
    warnings: list[str] = field(default_factory=list)

    @property
    def status(self) -> Status:
        from pinctl.pins.plans import status_of

        return status_of(self.results)

    @property
    def exit_code(self) -> int:
        codes = {STATUS_SUCCESS: EXIT_OK, STATUS_PARTIAL: EXIT_PARTIAL}  # 130: a SIGINT left items not tried
        return EXIT_INTERRUPTED if any(r.interrupted for r in self.results) else codes.get(self.status, EXIT_ERROR)


def change(node: Node, command: str, args: Sequence[str], dialect: str, dry_run: bool,
           policy: Optional[Policy] = None) -> ChangeReport:
    """pin or unpin: every argument parsed first (UsageError changes nothing), then applied.
    unpin with the policy also says what will keep or pin again an image it unpinned."""
    from pinctl.pins import plans as pinning

    crio = node.crio()
    if crio is not None:
        from pinctl.node import crio as crio_node

        done = crio_node.change(crio, policy, command, args, dialect, dry_run)
        return ChangeReport(command, done.results, dry_run, done.warnings)
    plan = pinning.make_plan(node.views(), command, args, dialect, node.refusal)
    report = ChangeReport(command, pinning.apply_plan(plan, dry_run), dry_run)
    if command == pinning.UNPIN and policy is not None and any(r.action in UNPINNED for r in report.results):
        report.warnings = unpin_warnings(node.rows(policy, runtime_sizes=False).rows, report.results)
    return report


UNPINNED = (ACTION_UNPINNED, ACTION_ALREADY_UNPINNED)


def unpin_warnings(rows: Sequence[ImageRow], results: Sequence[ItemResult]) -> list[str]:
    """What will keep, or pin again, an image that unpin left without the pin label.

    rows: the node's rows as ls has them with the policy (their reasons); results: unpin's items.
    One line per image and cause, naming the image by a tag: a policy pattern (the next sync
    labels it again), cri-dockerd's sandbox image (it keeps it by name), a Docker config label
    that cri-dockerd's --pinned-image-labels selects. What containerd does with a record it
    relabels or does not (its pinned_images; its sandbox image) is each item's own warning."""
    from pinctl.pins import sandbox as sandbox_rules

    unpinned = {(r.namespace, r.ref) for r in results if r.action in UNPINNED}
    images: dict[tuple[Optional[str], str], list[ImageRow]] = {}
    for row in rows:
        if (row.namespace, row.ref) in unpinned:
            images.setdefault((row.namespace, row.group_key), []).append(row)
    warnings: list[str] = []
    for group in images.values():
        name = min((row.ref for row in group), key=lambda ref: (ref.startswith("sha256:"), "@" in ref, ref))
        reasons = list(dict.fromkeys(group[0].reasons))
        lines = [_keeps_it(name, reason) for reason in reasons]
        lines.append(sandbox_rules.docker_unpin_warning(name, reasons, group[0].source))
        warnings += [line for line in lines if line and line not in warnings]
    return warnings


def _keeps_it(name: str, reason: Reason) -> Optional[str]:
    if reason.kind == REASON_PATTERN:
        return f"{name}: pattern {reason.detail} ({reason.source}) pins it again at the next sync"
    if reason.kind == REASON_DOCKER_LABEL:
        return f"{name}: cri-dockerd keeps it anyway: its config label matches {reason.detail}"
    return None

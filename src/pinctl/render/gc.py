"""Rendering gc plan and prune: figures with their sources, the deletion order, what is kept and
why, and item-by-item prune results; tables for people, the versioned JSON envelope for programs."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence, TextIO

from pinctl import refs
from pinctl.commands.gc import prune_exit_code
from pinctl.display import counted, human_size
from pinctl.errors import batch_status
from pinctl.gc.kubelet import format_duration
from pinctl.model import FORMAT_JSON, FORMAT_WIDE, OutputFormat
from pinctl.render.cells import short_why
from pinctl.render.output import folded, print_table, warn, write_envelope
from pinctl.render.table import NO_FIT, Fit, give_way

if TYPE_CHECKING:
    from pinctl.gc.eviction import EvictionReport, SignalCheck
    from pinctl.gc.model import AtRisk, GcPlan, OrderEntry, ProtectedImage
    from pinctl.gc.records import TieGroup
    from pinctl.gc.plan import GcReport, PruneItem, PrunePlan

OUTCOME_TEXT = {
    "disabled": "the kubelet's image GC is off (high threshold 100%, no maximum age)",
    "invalid_capacity": "the image filesystem reports no capacity: the kubelet's GC fails",
    "below_threshold": "usage is below the high threshold: no image is deleted for space now",
    "freed_enough": "the GC would run now and free enough to reach the low threshold",
    "shortfall": "the GC would run now and could not free enough",
    "all_unused": "every unused image would go",
    "age_step_refused": "the runtime will refuse a delete of the maximum-age step: the kubelet ends this run there, "
                        "before its threshold step",
    "space_step_refused": "the GC would run now; the runtime will refuse a delete, which the kubelet passes over, "
                          "and the run ends in that error",
}
# The images at the head of the deletion order shown without -o wide, whatever their fate.
FIRST_IN_LINE = 3
FATE_TEXT = {
    "deleted_age": "deleted (unused past the maximum age)",
    "deleted_space": "deleted",
    "too_young": "skipped: too young",
    "used_now": "skipped: in use",
    "not_reached": "not reached",
    "refused_age": "delete refused (past the maximum age)",
    "refused_space": "delete refused, passed over",
}


def _iso(value: Optional[datetime]) -> Optional[str]:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def _seconds(value: timedelta) -> int:
    return int(value.total_seconds())


def _name(image_refs: Sequence[str], image_id: str) -> str:
    tags = [ref for ref in image_refs if "@" not in ref and not ref.startswith("sha256:")]
    return tags[0] if tags else (image_refs[0] if image_refs else refs.short_id(image_id))


def print_gc_plan(report: GcReport, fmt: OutputFormat, out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    if fmt == FORMAT_JSON:
        write_envelope(out, gc=gc_dict(report))
        return
    wide = fmt == FORMAT_WIDE
    for line in _summary_lines(report, wide):
        out.write(folded(line, out, SUMMARY_INDENT) + "\n")
    plan = report.plan
    # One image, one verdict: what the run does with an image shows once, in the order (what goes,
    # and what pinctl wants kept there) or under PROTECTED (the rest of what stays). The last
    # table says only why pinctl wants the images the runtime does not pin.
    in_order = _order_table(plan, "DELETION ORDER", wide, out)
    evicting = report.eviction.plan if report.eviction is not None else None
    if evicting is not None:
        _order_table(evicting, "EVICTION MANAGER'S DeleteUnusedImages", wide, out)
    # By name, so that a table reads the same on every run (JSON keeps the kubelet's order).
    protected = sorted((p for p in plan.protected if p.image.id not in in_order),
                       key=lambda p: (_name(p.image.refs, p.image.id), p.image.id))
    if protected:
        out.write("\nPROTECTED\n")
        _table(["IMAGE", "IMAGE ID", "SIZE", "WHY"], [_protected_cells(p) for p in protected], wide, out, WHY_FIT)
    if plan.at_risk:
        out.write("\nWANTED BUT NOT PINNED BY THE RUNTIME\n")
        _table(["IMAGE", "IMAGE ID", "WANTED BECAUSE"], [_risk_cells(risk) for risk in plan.at_risk], wide, out,
               RISK_FIT)
    skipped = plan.skipped_threshold
    if skipped is not None:
        warn(f"gc plan: the runtime will refuse {counted(len(plan.refused), 'delete')} of the kubelet's maximum-age "
             f"step, so its threshold step does not run this round although usage is {skipped.usage_percent}%; "
             "every run fails the same way while the refusal lasts")
    if plan.wanted_deleted:
        maybe = sum(risk.may_go for risk in plan.wanted_deleted)
        verb = "may be deleted" if maybe == len(plan.wanted_deleted) else "would be deleted"
        chance = f" ({maybe} of them only if the kubelet's pick within a tie takes them)" if maybe else ""
        warn(f"gc plan: {counted(len(plan.wanted_deleted), 'image')} pinctl wants kept {verb} at "
             f"{'the simulated' if plan.simulated else 'the current'} usage of {plan.usage_percent}%{chance}")
    dead = report.eviction.kept_by_dead_containers if report.eviction is not None else ()
    if dead:
        names = ", ".join(_name(image.refs, image.id) for image in dead)
        warn(f"gc plan: the eviction manager may delete {counted(len(dead), 'more image')} too, kept only by "
             f"containers that are not running, which it may remove first: {names}")
    if evicting is not None and evicting.wanted_deleted:
        warn(f"gc plan: {counted(len(evicting.wanted_deleted), 'image')} pinctl wants kept would be deleted by "
             "the eviction manager (a disk eviction threshold is met)")


def _order_table(plan: GcPlan, title: str, wide: bool, out: TextIO) -> set[str]:
    """What goes, and what pinctl wants kept there (everything with -o wide); the IDs shown."""
    wanted = {risk.image.id for risk in plan.at_risk}
    tie = plan.straddled_tie
    chance = set(tie.image_ids) if tie is not None else set()
    # The head of the order too: what goes first once the GC runs, when nothing goes now.
    shown = plan.order if wide else [e for index, e in enumerate(plan.order)
                                     if index < FIRST_IN_LINE or e.fate.deleted or e.fate.refused
                                     or e.image.id in wanted or e.image.id in chance]
    young = {p.image.id: p.eligible_at for p in plan.protected if p.eligible_at is not None}
    if shown:
        # Which rows these are (the first in line, what goes, what pinctl wants kept) is in the columns.
        more = "" if wide or len(shown) == len(plan.order) else f": {len(shown)} of {len(plan.order)} (-o wide lists all)"
        out.write("\n" + folded(f"{title}{more}", out) + "\n")
        headers = ["POS", "IMAGE", "IMAGE ID", "SIZE", "FREED", "FATE", "WANTED"]
        rows = [_order_cells(entry, entry.image.id in wanted, young.get(entry.image.id)) for entry in shown]
        if tie is not None:
            rows = [_tie_cells(row, tie) if entry.image.id in chance else row for entry, row in zip(shown, rows)]
            if not wide and tie.size > TIE_ROWS:
                rows = _folded_tie(rows, shown, tie, wanted)
        _table(headers, rows, wide, out, ORDER_FIT)
    return {entry.image.id for entry in shown}


# A tie the walk stops inside longer than this is one row without -o wide (wanted members
# still have their own): a node's first-day tie can be thousands of images, all alike.
TIE_ROWS = 10


def _folded_tie(rows: list[list[str]], shown: Sequence[OrderEntry], tie: TieGroup, wanted: set[str]) -> list[list[str]]:
    members = set(tie.image_ids) - wanted
    folded = [entry for entry in shown if entry.image.id in members]
    line = [f"{tie.positions[0]}-{tie.positions[-1]}", f"{len(folded)} tied images", "-",
            human_size(sum(entry.image.size for entry in folded)), "-", f"tie: {_tie_count(tie)} of {tie.size} go", "-"]
    kept: list[list[str]] = []
    for entry, row in zip(shown, rows):
        if entry.image.id not in members:
            kept.append(row)
        elif entry is folded[0]:
            kept.append(line)
    return kept


# How each table gives way on a terminal (render/table.py): the last column wraps, then the image's
# reference is shortened in its middle; FATE wraps under itself.
# Names stay whole before figures do: the running total, then the size, leave first.
ORDER_FIT = give_way("IMAGE", wrap=["FATE"], drop=["FREED", "SIZE"])
WHY_FIT = give_way("IMAGE", "WHY", drop=["SIZE"])
RISK_FIT = give_way("IMAGE", "WANTED BECAUSE")
PRUNE_FIT = give_way("IMAGE", "WHY")


def _table(headers: list[str], rows: list[list[str]], wide: bool, out: TextIO, fit: Fit) -> None:
    """IMAGE ID only with -o wide (the name says which image, JSON has the ID); on a terminal the
    table gives way as fit says, -o wide and pipes keep every value whole."""
    if not wide:
        at = headers.index("IMAGE ID")
        headers = headers[:at] + headers[at + 1:]
        rows = [row[:at] + row[at + 1:] for row in rows]
        named = headers.index("IMAGE")
        rows = [row[:-1] + [short_why(row[-1], row[named])] for row in rows]
    print_table(headers, rows, out, fit=NO_FIT if wide else fit)


SUMMARY_INDENT = 13


def _summary_lines(report: GcReport, wide: bool) -> list[str]:
    plan, sources = report.plan, report.settings_sources
    fs = plan.fs
    s = plan.settings
    usage = f"{plan.usage_percent}%" + (" (simulated, --usage)" if plan.simulated else "")
    lines = [
        f"Runtime:     {report.domain}",
        f"Image fs:    {usage} used of {human_size(fs.capacity_bytes)}, {human_size(fs.available)} free "
        f"({report.fs_source})",
        f"High:        {s.high_threshold_percent}% ({sources.get('high_threshold_percent', '')})",
        f"Low:         {s.low_threshold_percent}% ({sources.get('low_threshold_percent', '')})",
        f"Min age:     {_duration(s.min_age)} ({sources.get('min_age', '')})",
        f"Max age:     {_duration(s.max_age) if s.max_age else 'off'} ({sources.get('max_age', '')})",
        f"Kubelet:     started {_iso(report.kubelet_started) or 'unknown'} ({report.kubelet_started_source})",
        f"Verdict:     {OUTCOME_TEXT.get(plan.outcome.value, plan.outcome.value)}",
    ]
    tie = plan.straddled_tie
    if plan.amount_to_free is not None:
        low, high = (human_size(bound) for bound in plan.freed_bounds)
        frees = low if low == high else f"{low} to {high}"
        lines.append(f"To free:     {human_size(max(plan.amount_to_free, 0))} to reach {s.low_threshold_percent}%; "
                     f"the order below frees {frees}")
    if plan.skipped_threshold is not None:
        lines.append(f"Skipped:     {skipped_line(plan)}")
    if tie is not None:
        lines.append(f"Tie:         {tie_line(tie, wide)}")
    lines += [f"Refused:     {_name(entry.image.refs, entry.image.id)}: {entry.refused_because}"
              for entry in plan.order if entry.refused_because is not None and (wide or entry.fate.refused)]
    if wide or any(entry.refused_because for entry in plan.order):
        lines.append(f"Refusals:    {report.refusals_source or 'not read'}")
    if plan.kubelet_message:
        # The kubelet's error goes on with each refusal as the runtime words it.
        errors = "<each refusal, in the runtime's words>" if plan.refused else ""
        lines.append(f"Warning:     {plan.kubelet_message}{errors}")
    if report.eviction is not None:
        lines.append(f"Eviction:    {eviction_line(report.eviction)}")
    lines.append("Times:       pinctl estimates the kubelet's first-detected and last-used times "
                 "(see docs/gc-model.md)")
    return lines


def skipped_line(plan: GcPlan) -> str:
    """The threshold step a refused delete of the age step keeps from running, and what it would have done."""
    skipped = plan.skipped_threshold
    assert skipped is not None
    high, low = plan.settings.high_threshold_percent, plan.settings.low_threshold_percent
    step = f"the threshold step (usage {skipped.usage_percent}% >= {high}%) does not run this round"
    need = f"{human_size(max(skipped.amount_to_free, 0))} to free to reach {low}%"
    if not skipped.would_delete:
        # pinctl counts every unused image as unused since the kubelet's start: past any maximum age.
        return (f"{step} ({need}); pinctl sees nothing it would free beyond the age step, but the kubelet's walk "
                "would also take images it saw in use less than the maximum age ago")
    reach = "enough" if skipped.enough else "not enough"
    return (f"{step} ({need}); it would have freed {human_size(skipped.would_free_bytes)} "
            f"({counted(len(skipped.would_delete), 'image')}), {reach}")


def eviction_line(report: EvictionReport) -> str:
    """Whether a disk eviction threshold that deletes images is met, and what then goes."""
    checked = report.check
    met = [s for s in checked.signals if s.met and s.reclaims_images]
    if not met:
        closest = checked.closest
        if closest is None:
            return f"no imagefs or nodefs threshold that deletes images ({checked.config_source})"
        return f"not met: {_signal_text(closest)}"
    first = sorted(met, key=lambda s: not s.threshold.hard)[0]
    goes = list(report.plan.deletions) if report.plan is not None else []
    when = ("now (it checks every 10s)" if checked.deletes_now
            else f"once it has held for {_duration(checked.grace or timedelta(0))} (evictionSoftGracePeriod)")
    return (f"met: {_signal_text(first)}; {when} the eviction manager deletes every unused unpinned image past "
            f"the minimum age: {counted(len(goes), 'image')}, {human_size(sum(e.image.size for e in goes))} "
            "(listed below)")


def _signal_text(signal: SignalCheck) -> str:
    """imagefs.available<15% (hard, where it is set): 12 MiB free, 3 MiB below its 15 MiB."""
    threshold = signal.threshold
    value, available = signal.threshold_value or 0, signal.available or 0
    amount = (lambda n: f"{n} inodes") if signal.inodes else human_size
    side = "below" if available < value else "above"
    kind = "hard" if threshold.hard else f"soft, grace {_duration(threshold.grace or timedelta(0))}"
    return (f"{threshold.signal}<{threshold.text} ({kind}, {threshold.source}): {amount(available)} free, "
            f"{amount(abs(available - value))} {side} its {amount(value)}")


def _duration(value: timedelta) -> str:
    return format_duration(value)


def _order_cells(entry: OrderEntry, at_risk: bool, eligible_at: Optional[datetime]) -> list[str]:
    image = entry.image
    freed = human_size(entry.running_total) if entry.running_total is not None else "-"
    fate = FATE_TEXT.get(entry.fate.value, entry.fate.value)
    if entry.fate.value == "too_young" and eligible_at is not None:
        fate += f" until {_iso(eligible_at)}"
    if entry.refused_because is not None and not entry.fate.refused:
        fate += " (a delete would be refused)"
    return [str(entry.position), _name(image.refs, image.id), refs.short_id(image.id), human_size(image.size),
            freed, fate, "at risk" if at_risk else "-"]


def _tie_cells(row: list[str], tie: TieGroup) -> list[str]:
    """A member of the tie the walk stops inside: which members go is the kubelet's chance, so
    no running total and no verdict of its own, only the tie's."""
    return row[:4] + ["-", f"tie: {_tie_count(tie)} of {tie.size} go"] + row[6:]


def _tie_count(tie: TieGroup) -> str:
    return str(tie.deleted_min) if tie.deleted_min == tie.deleted_max else f"{tie.deleted_min} to {tie.deleted_max}"


def tie_line(tie: TieGroup, wide: bool) -> str:
    """The tie the threshold step stops inside, said as what is known: how many, what they free."""
    first, last = tie.positions[0], tie.positions[-1]
    freed = (human_size(tie.freed_min) if tie.freed_min == tie.freed_max
             else f"{human_size(tie.freed_min)} to {human_size(tie.freed_max)}")
    return (f"{_tie_count(tie)} of these {tie.size} (positions {first}-{last}) go, about {freed} freed; "
            "the kubelet ranks them equal and picks in Go map order, so which ones is chance "
            f"(prune takes the largest first{'' if wide or tie.size <= TIE_ROWS else '; -o wide lists each'})")


def _protected_cells(item: ProtectedImage) -> list[str]:
    why = []
    for reason in item.reasons:
        if reason.value == "in_use":
            names = ", ".join(c.name or c.id[:12] for c in item.containers) or "a container"
            why.append(f"in use by {names}")
        elif reason.value == "pinned":
            why.append("pinned by the runtime")
        elif reason.value == "too_young" and item.eligible_at is not None:
            why.append(f"too young until {_iso(item.eligible_at)}")
    image = item.image
    return [_name(image.refs, image.id), refs.short_id(image.id), human_size(image.size), "; ".join(why)]


def _risk_cells(risk: AtRisk) -> list[str]:
    image = risk.image
    return [_name(image.refs, image.id), refs.short_id(image.id), risk.wanted_because]


def gc_dict(report: GcReport) -> dict[str, Any]:
    plan = report.plan
    sources = report.settings_sources
    estimates = {e.image.id: e for e in report.estimates}
    s = plan.settings
    return {
        "runtime": report.domain,
        "now": _iso(plan.now),
        "mode": plan.mode,
        "outcome": plan.outcome.value,
        "usage_percent": plan.usage_percent,
        "simulated": plan.simulated,
        "filesystem": {"capacity_bytes": plan.fs.capacity_bytes, "available_bytes": plan.fs.available,
                       "source": report.fs_source},
        "settings": {
            "high_threshold_percent": {"value": s.high_threshold_percent, "source": sources.get("high_threshold_percent")},
            "low_threshold_percent": {"value": s.low_threshold_percent, "source": sources.get("low_threshold_percent")},
            "min_age_seconds": {"value": _seconds(s.min_age), "source": sources.get("min_age")},
            "max_age_seconds": {"value": _seconds(s.max_age), "source": sources.get("max_age")},
        },
        "amount_to_free": plan.amount_to_free,
        "freed_bytes": plan.freed_bytes,
        "kubelet_started": _iso(report.kubelet_started),
        "kubelet_started_source": report.kubelet_started_source,
        "message": plan.kubelet_message,
        "refusals_source": report.refusals_source,
        "skipped_threshold": _skipped_dict(plan),
        "order": _entry_dicts(plan, estimates),
        "ties": [_tie_dict(tie) for tie in plan.ties],
        "protected": [_protected_dict(item) for item in plan.protected],
        "at_risk": [_risk_dict(risk) for risk in plan.at_risk],
        "eviction": _eviction_dict(report.eviction, estimates) if report.eviction is not None else None,
    }


def _skipped_dict(plan: GcPlan) -> Optional[dict[str, Any]]:
    skipped = plan.skipped_threshold
    if skipped is None:
        return None
    return {
        "usage_percent": skipped.usage_percent,
        "amount_to_free": skipped.amount_to_free,
        "would_delete": list(skipped.would_delete),
        "would_free_bytes": skipped.would_free_bytes,
        "enough": skipped.enough,
    }


def _eviction_dict(report: EvictionReport, estimates: dict[str, Any]) -> dict[str, Any]:
    checked, plan = report.check, report.plan
    return {
        "met": checked.met,
        "deletes_now": checked.deletes_now,
        "dedicated_imagefs": checked.dedicated_imagefs,
        "config_source": checked.config_source,
        "signals": [_signal_dict(signal) for signal in checked.signals],
        "freed_bytes": plan.freed_bytes if plan is not None else 0,
        "order": _entry_dicts(plan, estimates) if plan is not None else [],
        "at_risk": [_risk_dict(risk) for risk in plan.at_risk] if plan is not None else [],
        "kept_by_dead_containers": [image.id for image in report.kept_by_dead_containers],
    }


def _signal_dict(signal: SignalCheck) -> dict[str, Any]:
    threshold = signal.threshold
    return {
        "signal": threshold.signal,
        "threshold": threshold.text,
        "hard": threshold.hard,
        "grace_period_seconds": _seconds(threshold.grace) if threshold.grace is not None else None,
        "source": threshold.source,
        "filesystem": signal.filesystem,
        "fs_source": signal.fs_source,
        "available": signal.available,
        "capacity": signal.capacity,
        "threshold_value": signal.threshold_value,
        "met": signal.met,
        "reclaims_images": signal.reclaims_images,
    }


def _entry_dicts(plan: GcPlan, estimates: dict[str, Any]) -> list[dict[str, Any]]:
    tie_of = {image_id: tie.number for tie in plan.ties for image_id in tie.image_ids}
    return [_entry_dict(entry, estimates.get(entry.image.id), tie_of.get(entry.image.id)) for entry in plan.order]


def _tie_dict(tie: TieGroup) -> dict[str, Any]:
    return {
        "number": tie.number,
        "positions": list(tie.positions),
        "image_ids": list(tie.image_ids),
        "total_bytes": tie.total_bytes,
        "straddled": tie.straddled,
        "deleted_min": tie.deleted_min,
        "deleted_max": tie.deleted_max,
        "freed_min": tie.freed_min,
        "freed_max": tie.freed_max,
    }


def _entry_dict(entry: OrderEntry, estimate: Any, tie_group: Optional[int]) -> dict[str, Any]:
    image = entry.image
    return {
        "position": entry.position,
        "id": image.id,
        "refs": list(image.refs),
        "size": image.size,
        "fate": entry.fate.value,
        "deleted": entry.fate.deleted,
        "refused_because": entry.refused_because,
        "running_total": entry.running_total,
        "tie": entry.tie,
        "tie_group": tie_group,
        "first_detected": _iso(image.first_detected),
        "first_detected_source": estimate.first_detected_source.value if estimate else None,
        "last_used": _iso(image.last_used),
        "last_used_source": estimate.last_used_source.value if estimate else None,
    }


def _protected_dict(item: ProtectedImage) -> dict[str, Any]:
    return {
        "id": item.image.id,
        "refs": list(item.image.refs),
        "size": item.image.size,
        "reasons": [reason.value for reason in item.reasons],
        "containers": [c.name or c.id for c in item.containers],
        "eligible_at": _iso(item.eligible_at),
    }


def _risk_dict(risk: AtRisk) -> dict[str, Any]:
    return {
        "id": risk.image.id,
        "refs": list(risk.image.refs),
        "wanted_because": risk.wanted_because,
        "position": risk.position,
        "fate": risk.fate.value if risk.fate else None,
        "deleted": risk.deleted,
        "may_go": risk.may_go,
        "protected_now_by": [p.value for p in risk.protected_now_by],
    }


# --- prune --------------------------------------------------------------------------------------


@contextmanager
def prune_progress(stream: Optional[TextIO] = None) -> Iterator[Callable[[PruneItem], None]]:
    """A transient line while images are deleted one by one, on a terminal only. It starts with
    the first deletion (not while the plan is being confirmed), is erased when the prune ends,
    and nothing of it reaches a pipe or a log."""
    err = stream or sys.stderr
    if not err.isatty():
        yield lambda _item: None
        return
    from rich.console import Console
    from rich.live import Live
    from rich.spinner import Spinner

    spinner = Spinner("dots", text="prune: checking and deleting")
    live = Live(spinner, console=Console(file=err, highlight=False), transient=True, redirect_stdout=False,
                refresh_per_second=8)
    done = {"images": 0, "bytes": 0}

    def heard(item: PruneItem) -> None:
        if not live.is_started:
            live.start()
        done["images"] += 1
        done["bytes"] += item.size if item.action == "removed" else 0
        spinner.update(text=f"prune: {counted(done['images'], 'image')} handled, {human_size(done['bytes'])} freed; "
                            f"last {_name(item.refs, item.image_id)}: {item.action}")

    try:
        yield heard
    finally:
        if live.is_started:
            live.stop()


def print_prune_plan(plans: Sequence[PrunePlan], out: Optional[TextIO] = None) -> None:
    """What a prune would delete, before asking: on stderr, so stdout keeps only the results. Folded
    to a terminal's window; every name whole, since it is what the operator confirms."""
    out = out or sys.stderr
    for plan in plans:
        target = (f"until usage is {plan.target_usage}%" if plan.target_usage is not None
                  else "the images named" if plan.matched else "every unused image")
        total = sum(image.size for image in plan.delete)
        out.write(folded(f"{plan.domain.name}: {plan.plan.usage_percent}% used; {target}: "
                         f"{counted(len(plan.delete), 'image')}, {human_size(total)}", out) + "\n")
        names = [_name(image.refs, image.id) for image in plan.delete]
        width = max(map(len, names), default=0)
        tie = plan.plan.straddled_tie
        chance = set(tie.image_ids) if tie is not None else set()
        for name, image in zip(names, plan.delete):
            line = f"  delete  {name.ljust(width)}  {refs.short_id(image.id)}  {human_size(image.size)}"
            out.write(folded(line + ("  (tie)" if image.id in chance else ""), out, indent=PLAN_INDENT) + "\n")
        note = prune_tie_note(plan)
        if note:
            out.write(folded(f"  {note}", out, indent=len("  tie: ")) + "\n")
    out.flush()


def prune_tie_note(plan: PrunePlan) -> Optional[str]:
    """How prune chose within the tie its walk stops inside, where the kubelet's pick is chance."""
    tie = plan.plan.straddled_tie
    if tie is None:
        return None
    return (f"tie: the kubelet ranks {tie.size} images equal and would take {_tie_count(tie)} of them in no set "
            "order; prune takes the largest first, then by image ID")


PLAN_INDENT = len("  delete  ")  # a delete line folded goes on under its image's name


def print_prune(items: Sequence[PruneItem], dry_run: bool, fmt: OutputFormat, out: Optional[TextIO] = None,
                plans: Sequence[PrunePlan] = (), named: bool = False) -> None:
    """What goes (in the order it goes) and what failed; with -o wide (and in JSON) also every image
    that stays, and why. Otherwise the kept images are a count in the summary line: a prune that
    removed one image is not fourteen lines of what it left. With named (prune REF...) every row
    shows: each is an image asked for. plans: to say why nothing goes when nothing does."""
    out = out or sys.stdout
    if fmt == FORMAT_JSON:
        body = [{"runtime": i.domain, "id": i.image_id, "refs": list(i.refs), "action": i.action, "size": i.size,
                 "why": i.why} for i in items]
        freed = sum(i.size for i in items if i.action == "removed")
        status = batch_status(prune_exit_code([i.action for i in items], named))
        write_envelope(out, command="prune", dry_run=dry_run, status=status, freed_bytes=freed, results=body)
        return
    wide = fmt == FORMAT_WIDE
    shown = items if wide or named else [i for i in items if i.action != "kept"]
    cells = [[i.action.replace("-", " "), _name(i.refs, i.image_id), refs.short_id(i.image_id), human_size(i.size),
              i.why or "-"] for i in shown]
    if cells:
        _table(["ACTION", "IMAGE", "IMAGE ID", "SIZE", "WHY"], cells, wide, out, PRUNE_FIT)
    removed = [i for i in items if i.action in ("removed", "would-remove")]
    kept, failures = sum(i.action == "kept" for i in items), sum(i.action == "failed" for i in items)
    command = f"prune{' (dry run)' if dry_run else ''}"
    why_kept = "" if wide or named or not kept else KEPT_HINT
    notes = [prune_tie_note(plan) for plan in plans] if dry_run else []  # else shown with the plan
    for note in filter(None, notes):
        warn(f"{command}: {note}")
    if removed or failures:
        size = human_size(sum(i.size for i in removed))
        gone = (f"{counted(len(removed), 'image')} would go, freeing {size}" if dry_run
                else f"{counted(len(removed), 'image')} removed, {size} freed")
        warn(f"{command}: {gone}; {kept} kept{why_kept}" + (f"; {failures} failed" if failures else ""))
        return
    for plan in plans:
        where = f"{plan.domain.name}: " if len(plans) > 1 else ""
        reason = nothing_goes_because(plan)
        hint = "" if reason.startswith("usage is") else why_kept
        warn(f"{command}: {where}nothing would go ({kept} kept{hint}): {reason}")
        could = could_go(plan)
        if could:
            names = ", ".join(_name(image.refs, image.id) for image in could[:3])
            more = f" and {len(could) - 3} more" if len(could) > 3 else ""
            warn(f"{counted(len(could), 'image')} could go with --all-unused: {names}{more}")


KEPT_HINT = "; -o wide says why"


def nothing_goes_because(plan: PrunePlan) -> str:
    """Why a prune plan deletes nothing: the disk is at its target already, or every image stays."""
    usage, target = plan.plan.usage_percent, plan.target_usage
    if target is not None and usage <= target:
        return f"usage is {usage}%, at or below the target of {target}%"
    if not plan.plan.order:
        return "every image is protected"
    if all(entry.fate.value == "too_young" for entry in plan.plan.order):
        return f"what nothing protects is younger than the minimum age ({_duration(plan.plan.settings.min_age)})"
    return "every image is protected"


def could_go(plan: PrunePlan) -> list[Any]:
    """The images a lower target would delete: in the kubelet's order, old enough, not reached."""
    return [entry.image for entry in plan.plan.order if entry.fate.value == "not_reached"]

"""Rendering pull: a table or the JSON envelope on stdout, and a live display on a terminal."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, TextIO

from pinctl.display import human_size
from pinctl.errors import batch_status
from pinctl.model import FORMAT_JSON
from pinctl.pins.plans import status_of
from pinctl.render import output
from pinctl.render.output import print_table, write_envelope
from pinctl.render.progress import live_progress
from pinctl.render.table import give_way

if TYPE_CHECKING:
    from pinctl.commands.sync import SyncPullReport
    from pinctl.model import OutputFormat
    from pinctl.pull.run import PullItem, PullReport

Progress = tuple[Callable[[str, str], None], Callable[["PullItem"], None]]


def pull_dict(item: PullItem) -> dict[str, Any]:
    return {
        "ref": item.ref,
        "namespace": item.namespace,
        "action": item.action,
        "why": item.why,
        "pin": item.pin,
        "image": item.image,
        "size": item.size,
        "attempts": item.attempts,
    }


# On a terminal an empty WHY takes no space, WHY wraps, then REF is shortened in its middle, never
# below 20 cells (render/table.py). RESULT is never split.
PULL_FIT = give_way("REF", "WHY")


def print_pull(report: PullReport, fmt: OutputFormat, out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    if fmt == FORMAT_JSON:
        write_envelope(out, command="pull", runtime=report.runtime, max_usage=report.max_usage,
                           status=report.status, interrupted=report.interrupted,
                           pulls=[pull_dict(item) for item in report.items])
        return
    # One reference that failed is one line on stderr, as pin's and import's are.
    lone = report.items[0] if len(report.items) == 1 and not report.interrupted else None
    if lone is not None and lone.action == "failed":
        output.warn(f"pull {lone.ref}: {lone.why or 'failed'}")
        if not out.isatty():
            print_table(["REF", "RESULT", "SIZE", "WHY"], [_row(lone)], out)
        return
    print_table(["REF", "RESULT", "SIZE", "WHY"], [_row(item) for item in report.items], out, fit=PULL_FIT)
    done = {action: sum(1 for i in report.items if i.action == action) for action in ("pulled", "present", "skipped",
                                                                                        "failed")}
    summary = ", ".join(f"{count} {action}" for action, count in done.items() if count)
    interrupted = "; interrupted" if report.interrupted else ""
    output.warn(f"pull: {summary or 'nothing to pull'} (through {report.runtime}){interrupted}")


def _row(item: PullItem) -> list[str]:
    result = item.action + (f", {output.human_word(item.pin)}" if item.pin else "")
    return [item.ref, result, human_size(item.size) if item.size is not None else "-", item.why or ""]


def print_sync_pull(report: SyncPullReport, fmt: OutputFormat, quiet: bool, out: Optional[TextIO] = None) -> None:
    """sync --pull: the pulls, then the sync's own results (none when interrupted)."""

    out = out or sys.stdout
    results = report.sync.results if report.sync is not None else []
    if fmt == FORMAT_JSON:
        write_envelope(out, command="sync", dry_run=False, status=batch_status(report.exit_code),
                           runtime=report.pulled.runtime, max_usage=report.pulled.max_usage,
                           interrupted=report.pulled.interrupted,
                           pulls=[pull_dict(item) for item in report.pulled.items],
                           results=[output.result_dict(r) for r in results])
        return
    if not quiet:
        print_pull(report.pulled, fmt, out=out)
    if report.sync is not None:
        output.print_results("sync", results, status_of(results), False, fmt, quiet, out)


@contextmanager
def pull_progress(stream: Optional[TextIO] = None) -> Iterator[Progress]:
    """A spinner per image in flight and "pull: N done, M in flight", on a terminal only; erased at
    the end (render/progress.py). The CRI tells no bytes while it pulls, so no byte counts are shown."""
    with live_progress("pull", in_flight=True, stream=stream) as (heard, finished):
        yield heard, lambda item: finished(item.ref)

"""Rendering import: a table or the JSON envelope on stdout, and a live line on a terminal."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, TextIO

from pinctl.display import human_size
from pinctl.model import FORMAT_JSON
from pinctl.render import output
from pinctl.render.output import print_table, write_envelope
from pinctl.render.progress import live_progress
from pinctl.render.table import give_way

if TYPE_CHECKING:
    from pinctl.commands import SyncImportReport
    from pinctl.imports.run import ImportItem, ImportReport
    from pinctl.model import OutputFormat

Progress = tuple[Callable[[str, str], None], Callable[["ImportItem"], None]]


def import_dict(item: ImportItem) -> dict[str, Any]:
    return {
        "archive": item.archive,
        "ref": item.ref or None,
        "namespace": item.namespace,
        "action": item.action,
        "why": item.why,
        "pin": item.pin,
        "digest": item.digest,
        "platforms": list(item.platforms),
        "size": item.size,
    }


def print_import(report: ImportReport, fmt: OutputFormat, out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    for note in report.notes:
        output.warn(note)
    if fmt == FORMAT_JSON:
        write_envelope(out, command="import", runtime=report.runtime, max_usage=report.max_usage,
                           status=report.status, interrupted=report.interrupted,
                           imports=[import_dict(item) for item in report.items])
        return
    _print_items(report.items, out)
    done = {action: sum(1 for i in report.items if i.action == action) for action in ("imported", "present", "failed")}
    summary = ", ".join(f"{count} {action}" for action, count in done.items() if count)
    interrupted = "; interrupted" if report.interrupted else ""
    output.note(f"import: {summary or 'nothing to import'} (through {report.runtime}){interrupted}")


def print_sync_imports(report: SyncImportReport, fmt: OutputFormat, quiet: bool, out: Optional[TextIO] = None) -> None:
    """sync with import_dirs: the archives' imports, then sync's results (the archives' pins and
    prunes among them)."""
    out = out or sys.stdout
    for note in report.notes:
        output.warn(note)
    if fmt == FORMAT_JSON:
        write_envelope(out, command="sync", dry_run=report.sync.dry_run, status=report.status,
                           imports=[import_dict(item) for item in report.imports],
                           results=[output.result_dict(r) for r in report.results])
        return
    if not quiet and report.imports:
        _print_items(report.imports, out)
    output.print_results("sync", report.results, report.status, report.sync.dry_run, fmt, quiet, out)


# On a terminal WHY wraps, then REF and ARCHIVE are shortened in their middle (render/table.py).
IMPORT_FIT = give_way("REF", "WHY", wrap=["RESULT"])


def _print_items(items: list[ImportItem], out: TextIO) -> None:
    # On a terminal a failure's reason gets lines of its own under its row, as pin's do, and
    # is said there only; into a pipe it stays in WHY, where a script reads it.
    on_terminal = out.isatty()
    failed = [bool(item.why) and (item.action == "failed" or item.pin == "failed") for item in items]
    rows = [[item.archive, item.ref or "-", item.action + (f", {item.pin}" if item.pin else ""),
             ",".join(item.platforms) or "-", human_size(item.size) if item.size is not None else "-",
             "" if on_terminal and bad else item.why or ""]
            for item, bad in zip(items, failed)]
    notes = [[("error", item.why or "")] if bad else [] for item, bad in zip(items, failed)]
    print_table(["ARCHIVE", "REF", "RESULT", "PLATFORMS", "SIZE", "WHY"], rows, out, fit=IMPORT_FIT, notes=notes)
    if not out.isatty():
        for item in items:
            if item.action == "failed" or item.pin == "failed":
                output.warn(f"{item.archive}{': ' + item.ref if item.ref else ''}: {item.why}")


@contextmanager
def import_progress(stream: Optional[TextIO] = None) -> Iterator[Progress]:
    """One spinner line for the archive being imported and "import: N done", on a terminal only;
    erased at the end. Nothing of it reaches a pipe or a file (render/progress.py)."""
    with live_progress("import", in_flight=False, stream=stream) as (heard, finished):
        yield heard, lambda item: finished(item.archive)

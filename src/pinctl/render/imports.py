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
    from pinctl.commands.sync import SyncImportReport
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
    # One archive that failed (it does not exist, it is refused) is one line on stderr, no more.
    lone_failure = len(report.items) == 1 and report.items[0].action == "failed" and not report.interrupted
    if lone_failure and out.isatty():
        output.warn(_failure_line(report.items[0]))
        return
    _print_items(report.items, out)
    if lone_failure:
        return  # said on stderr under the table already
    done = {action: sum(1 for i in report.items if i.action == action) for action in ("imported", "present", "failed")}
    summary = ", ".join(f"{count} {action}" for action, count in done.items() if count)
    interrupted = "; interrupted" if report.interrupted else ""
    output.warn(f"import: {summary or 'nothing to import'} (through {report.runtime}){interrupted}")


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


# On a terminal (render/table.py): ARCHIVE and PLATFORMS fold into heading lines when every row
# says the same, an empty WHY takes no space, WHY wraps, PLATFORMS wraps at its commas, ARCHIVE is
# shortened before REF, and REF keeps 20 cells at the least. RESULT is never split.
IMPORT_FIT = give_way("REF", "WHY", fold=["ARCHIVE", "PLATFORMS"], brief=["PLATFORMS"], wrap=["PLATFORMS"],
                      paths=["ARCHIVE"])


def _platforms_brief(platforms: tuple[str, ...]) -> str:
    """PLATFORMS on a narrow terminal: the architectures alone when every platform is Linux."""
    if not platforms or not all(p.startswith("linux/") for p in platforms):
        return ",".join(platforms) or "-"
    return ",".join(p[len("linux/"):] for p in platforms)


def _failed(item: ImportItem) -> bool:
    return item.action == "failed" or item.pin == "failed"


def _failure_line(item: ImportItem) -> str:
    """archive: ref: why, naming the archive once (a reader's error names it already)."""
    why = item.why or "failed"
    where = "" if why.startswith(f"{item.archive}:") else f"{item.archive}: "
    return f"{where}{item.ref + ': ' if item.ref else ''}{why}"


def result_text(action: str, pin: Optional[str]) -> str:
    """RESULT as people read it: 'present, already pinned' (JSON keeps already-pinned)."""
    return action + (f", {output.human_word(pin)}" if pin else "")


def _print_items(items: list[ImportItem], out: TextIO) -> None:
    # On a terminal a failure's reason gets lines of its own under its row, as pin's do, and
    # is said there only; into a pipe it stays in WHY, where a script reads it.
    on_terminal = out.isatty()
    failed = [bool(item.why) and _failed(item) for item in items]
    rows = [[item.archive, item.ref or "-", result_text(item.action, item.pin),
             ",".join(item.platforms) or "-", human_size(item.size) if item.size is not None else "-",
             "" if on_terminal and bad else item.why or ""]
            for item, bad in zip(items, failed)]
    notes = [[("error", item.why or "")] if bad else [] for item, bad in zip(items, failed)]
    brief = {"PLATFORMS": [_platforms_brief(item.platforms) for item in items]}
    print_table(["ARCHIVE", "REF", "RESULT", "PLATFORMS", "SIZE", "WHY"], rows, out, fit=IMPORT_FIT, notes=notes,
                brief=brief)
    if not on_terminal:
        for item in items:
            if _failed(item):
                output.warn(_failure_line(item))


@contextmanager
def import_progress(stream: Optional[TextIO] = None) -> Iterator[Progress]:
    """One spinner line for the archive being imported and "import: N done", on a terminal only;
    erased at the end. Nothing of it reaches a pipe or a file (render/progress.py)."""
    with live_progress("import", in_flight=False, stream=stream) as (heard, finished):
        yield heard, lambda item: finished(item.archive)

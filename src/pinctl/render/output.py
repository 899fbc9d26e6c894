"""Rendering results: tables for people, a versioned JSON envelope for programs.

Data goes to stdout, diagnostics to stderr. Colour only on a terminal and never with NO_COLOR
(rich honours both); rich itself is imported only when a table is drawn on a terminal.

On a terminal a table fits the window, as kubectl's and crictl's do: sha256: references
abbreviated, long explanations cut with an ellipsis or set on their own indented lines, and
no line padded past its last cell. Pipes and files get plain columns with every value in full:
scripts read them. Every name is shown through display.visible, so control characters in
image names (containerd accepts any string) cannot forge rows or reach the terminal.
"""

from __future__ import annotations

import json
import sys
import textwrap
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence, TextIO

from pinctl import refs
from pinctl.display import exact, visible
from pinctl.model import (
    ACTION_ADOPTED,
    ACTION_ALREADY_PINNED,
    ACTION_ALREADY_UNPINNED,
    ACTION_CHANGED_UNDER_US,
    ACTION_FAILED,
    ACTION_PINNED,
    ACTION_PRUNED,
    ACTION_UNPINNED,
    DEFAULT_NAMESPACES,
    FORMAT_JSON,
    FORMAT_WIDE,
    Action,
    ImageRow,
    ItemResult,
    OutputFormat,
    Status,
)
from pinctl.render import columns as ls_columns
from pinctl.render.cells import abbreviate

if TYPE_CHECKING:
    from rich.text import Text

    from pinctl.check.compare import CheckItem, CheckResult
    from pinctl.config.loader import Config
    from pinctl.pins.lint import Problem

# 2: ls "id" is Docker's image ID for Docker's images (id_kind says which; config_digest added).
RESULT_VERSION = 2
# Room between columns on a terminal; pipes keep their three spaces (scripts split on them).
TERMINAL_GAP = 2
# A column cut to fit keeps at least this many cells: a shorter stub tells nothing.
CUT_MIN = 8
Notes = Sequence[tuple[str, str]]


def envelope(**fields: Any) -> str:
    return json.dumps({"pinctl_result_version": RESULT_VERSION, **fields}, sort_keys=True, indent=2)


def image_dict(row: ImageRow) -> dict[str, Any]:
    return {column.json_key: column.value(row) for column in ls_columns.LS_COLUMNS if column.json_key}


def result_dict(result: ItemResult) -> dict[str, Any]:
    found = {
        "namespace": result.namespace,
        "ref": result.ref,
        "action": result.action,
        "error": result.error,
    }
    # Only on the items it concerns, so every other result keeps its four keys.
    if result.warning is not None:
        found["warning"] = result.warning
    return found


def print_images(
    rows: Sequence[ImageRow], errors: Sequence[dict[str, str]], fmt: OutputFormat, quiet: bool,
    out: Optional[TextIO] = None, show_drift: bool = False, show_cri: bool = False,
) -> None:
    out = out or sys.stdout
    if quiet:
        print_names([row.ref for row in rows], out)
    elif fmt == FORMAT_JSON:
        out.write(envelope(images=[image_dict(r) for r in rows], errors=list(errors)) + "\n")
    else:
        _print_image_table(rows, wide=fmt == FORMAT_WIDE, out=out, show_drift=show_drift, show_cri=show_cri)
    if fmt != FORMAT_JSON:
        for error in errors:
            warn(f"{error['namespace']}/{error['ref']}: {error['message']}")


def print_namespaces(found: Sequence[tuple[str, bool]], quiet: bool, out: Optional[TextIO] = None) -> None:
    """One namespace a line; those pinctl reads by default marked, unless only names are asked."""
    out = out or sys.stdout
    out.write("".join(f"{name}\n" if quiet or not default else f"{name}\t(default)\n" for name, default in found))


def print_names(names: Sequence[str], out: Optional[TextIO] = None) -> None:
    """One name a line, each exactly as containerd has it. A name that cannot be one exact line
    (a control character, or a character the output's encoding lacks) is left out, and said so
    once: an escaped name would look real and match nothing."""
    out = out or sys.stdout
    encoding = getattr(out, "encoding", None)
    shown = [name for name in names if exact(name, encoding)]
    out.write("".join(f"{name}\n" for name in shown))
    left_out = len(names) - len(shown)
    if left_out:
        what = "1 name holds" if left_out == 1 else f"{left_out} names hold"
        warn(f"{what} control characters or characters the output encoding ({encoding or 'unknown'}) cannot "
             f"write, left out here; -o json shows every name exactly")


def _print_image_table(
    rows: Sequence[ImageRow], wide: bool, out: TextIO, show_drift: bool = False, show_cri: bool = False
) -> None:
    fit = out.isatty() and not wide
    wanted: list[tuple[ls_columns.Switch, bool]] = [("drift", show_drift), ("cri", show_cri)]
    switches = frozenset(name for name, on in wanted if on)
    columns = [column for column in ls_columns.LS_COLUMNS if column.shown(wide, switches)]
    cell = ls_columns.Cell(wide, _ellipsis(out) if fit else "")
    headers = [str(column.header) for column in columns]
    table_rows = [[column.text(row, cell) for column in columns] for row in rows]
    brief = {str(c.header): [c.brief(row) for row in rows] for c in columns if c.brief} if fit else {}
    highlight = {str(c.header): c.highlight for c in columns if c.highlight}
    print_table(headers, table_rows, out, highlight=highlight,
                cut=[str(c.header) for c in columns if c.cut] if fit else (), brief=brief)


def print_results(
    command: str, results: Sequence[ItemResult], status: Status, dry_run: bool, fmt: OutputFormat, quiet: bool,
    out: Optional[TextIO] = None,
) -> None:
    """On a terminal each failure shows once, under its row. When the table goes to a pipe or a
    file, failures are also said on stderr, where the person running the command sees them."""
    out = out or sys.stdout
    # Said in every format: JSON carries it on the item too, but a person running the command
    # must not miss that containerd undoes what it just did.
    for r in results:
        if r.warning is not None:
            warn(f"{command} {r.ref}: {r.warning}")
    if fmt == FORMAT_JSON:
        body = [result_dict(r) for r in results]
        out.write(envelope(command=command, dry_run=dry_run, status=status, results=body) + "\n")
        return
    on_terminal = not quiet and out.isatty()
    if quiet:
        print_names([r.ref for r in results if r.action in CHANGED], out)
    elif on_terminal:
        _print_results_fitted(results, dry_run, out, ellipsis="" if fmt == FORMAT_WIDE else _ellipsis(out))
    else:
        _print_results_plain(results, dry_run, out)
    if not on_terminal:
        for r in results:
            if not r.done:
                warn(f"{command} {r.ref}: {r.error}")
    if on_terminal or len(results) != 1 or not results[0].failed:
        warn(summary(command, results, dry_run))  # a lone failure on stderr has said it all already


def _print_results_plain(results: Sequence[ItemResult], dry_run: bool, out: TextIO) -> None:
    failed = not all(r.done for r in results)
    headers = ["ACTION", "NAMESPACE", "REF", *(["ERROR"] if failed else [])]
    cells = [[action_text(r.action, dry_run), r.namespace or "-", r.ref, *([r.error or ""] if failed else [])]
             for r in results]
    print_table(headers, cells, out)


def _print_results_fitted(results: Sequence[ItemResult], dry_run: bool, out: TextIO, ellipsis: str) -> None:
    """ellipsis: what ends an abbreviated sha256: reference; none (-o wide) keeps them whole."""
    cells = [[action_text(r.action, dry_run), r.namespace or "-", abbreviate(r.ref, ellipsis) if ellipsis else r.ref]
             for r in results]
    notes = [[("error", r.error or "")] if not r.done else [] for r in results]
    print_table(["ACTION", "NAMESPACE", "REF"], cells, out, highlight={"ACTION": {ACTION_FAILED: "red"}}, notes=notes)


CHANGED: tuple[Action, ...] = (ACTION_PINNED, ACTION_UNPINNED, ACTION_PRUNED, ACTION_ADOPTED)
# How people read each action; JSON keeps the action values themselves (docs/json.md).
ACTION_TEXT: dict[Action, str] = {
    ACTION_ALREADY_PINNED: "already pinned",
    ACTION_ALREADY_UNPINNED: "already unpinned",
    ACTION_ADOPTED: "taken over from sync",
    ACTION_CHANGED_UNDER_US: "changed under pinctl",
}
# The order a summary counts them in: changes first, failures last.
ACTION_ORDER: tuple[Action, ...] = (*CHANGED, ACTION_ALREADY_PINNED, ACTION_ALREADY_UNPINNED, ACTION_CHANGED_UNDER_US,
                                    ACTION_FAILED)


def action_text(action: Action, dry_run: bool) -> str:
    """One vocabulary for the ACTION column and the summary: 'would be pinned' in a dry run."""
    text = ACTION_TEXT.get(action, action)
    return f"would be {text}" if dry_run and action in CHANGED else text


def summary(command: str, results: Sequence[ItemResult], dry_run: bool) -> str:
    counts: dict[Action, int] = {}
    for r in results:
        counts[r.action] = counts.get(r.action, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: _order(item[0]))
    parts = [f"{n} {action_text(action, dry_run)}" for action, n in ordered] or ["nothing to do"]
    return f"{command}{' (dry run)' if dry_run else ''}: " + ", ".join(parts)


def _order(action: Action) -> tuple[int, str]:
    return (ACTION_ORDER.index(action) if action in ACTION_ORDER else len(ACTION_ORDER), action)


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO,
    highlight: Optional[dict[str, dict[str, str]]] = None, *, cut: Sequence[str] = (),
    notes: Optional[Sequence[Notes]] = None, brief: Optional[Mapping[str, Sequence[str]]] = None,
) -> None:
    """cut: columns a terminal may shorten with an ellipsis. brief: shorter cells for a column,
    used on a terminal too narrow for the table. notes: per row, (label, text) lines shown
    indented under it, folded to the window; on a terminal only: pipes get columns."""
    encoding = getattr(out, "encoding", None)
    shown = [[visible(cell, encoding) for cell in row] for row in rows]
    notes = [[(label, visible(text, encoding)) for label, text in row_notes] for row_notes in notes or []]
    if not out.isatty():
        _plain_table(headers, shown, out)
        return
    _terminal_table(headers, shown, out, highlight or {}, cut, notes, brief or {})


def _terminal_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO, styles: dict[str, dict[str, str]],
    cut: Sequence[str], notes: Sequence[Notes], brief: Mapping[str, Sequence[str]],
) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(file=out, highlight=False, soft_wrap=True)
    rows, widths = _fitted(headers, rows, out, cut, brief, console.width)
    ellipsis = _ellipsis(out)
    text = Text()
    text.append_text(_line(headers, widths, ellipsis, lambda _h, _c: "bold"))
    for index, cells in enumerate(rows):
        text.append_text(_line(cells, widths, ellipsis, lambda h, c: styles.get(headers[h], {}).get(c, "")))
        row_notes = notes[index] if index < len(notes) else ()
        label_width = max((len(label) for label, _ in row_notes), default=0)
        for label, note in row_notes:
            text.append(_note(f"{label}:".ljust(label_width + 1), note, console.width))
    console.print(text, end="")


def _fitted(
    headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO, cut: Sequence[str],
    brief: Mapping[str, Sequence[str]], width: int,
) -> tuple[Sequence[Sequence[str]], list[int]]:
    """The rows to show and their column widths: whole when they fit; else brief cells; then
    cut columns shortened, to CUT_MIN first and to their header's width at the very least."""
    from rich.cells import cell_len

    def natural_of(table: Sequence[Sequence[str]]) -> list[int]:
        return [max([cell_len(h), *(cell_len(r[i]) for r in table)]) for i, h in enumerate(headers)]

    natural = natural_of(rows)
    if sum(natural) + TERMINAL_GAP * (len(natural) - 1) > width and brief:
        encoding = getattr(out, "encoding", None)
        columns = {headers.index(h): [visible(c, encoding) for c in cells] for h, cells in brief.items()}
        rows = [[columns[i][n] if i in columns else cell for i, cell in enumerate(row)] for n, row in enumerate(rows)]
        natural = natural_of(rows)
    for floor in (CUT_MIN, 0):
        minimum = [min(n, max(cell_len(h), floor)) if h in cut else n for n, h in zip(natural, headers)]
        widths = fit_widths(natural, minimum, width, TERMINAL_GAP)
        if sum(widths) + TERMINAL_GAP * (len(widths) - 1) <= width:
            break
    return rows, widths


def fit_widths(natural: Sequence[int], minimum: Sequence[int], width: int, gap: int) -> list[int]:
    """Column widths within width: the widest shrinkable column gives a cell at a time, down to
    its minimum. What cannot shrink stays whole, and the line is then longer than width."""
    widths = list(natural)
    excess = sum(widths) + gap * (len(widths) - 1) - width
    while excess > 0:
        shrinkable = [i for i, w in enumerate(widths) if w > minimum[i]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    return widths


def _line(cells: Sequence[str], widths: Sequence[int], ellipsis: str, style: Callable[[int, str], str]) -> Text:
    from rich.cells import cell_len, set_cell_size
    from rich.text import Text

    line = Text()
    for index, (cell, width) in enumerate(zip(cells, widths)):
        if cell_len(cell) > width:
            cell = set_cell_size(cell, max(width - cell_len(ellipsis), 0)) + ellipsis
        line.append(cell, style=style(index, cell) or None)
        if index < len(cells) - 1:
            line.append(" " * (width - cell_len(cell) + TERMINAL_GAP))
    line.rstrip()
    line.append("\n")
    return line


def _note(label: str, note: str, width: int) -> str:
    """  label: text, folded to width with the continuation under the text."""
    lead = f"  {label} "
    room = width - len(lead)
    if room < 20:
        return f"{lead}{note}\n"  # too narrow to fold usefully: let the terminal wrap it
    folded = textwrap.wrap(note, room, break_long_words=False, break_on_hyphens=False) or [""]
    return lead + ("\n" + " " * len(lead)).join(folded) + "\n"


def _ellipsis(out: TextIO) -> str:
    return "…" if exact("…", getattr(out, "encoding", None)) else "..."


def _plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """Aligned columns with no trailing blanks, for pipes, files and scripts."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for line in [list(headers), *map(list, rows)]:
        padded = [cell.ljust(width) for cell, width in zip(line, widths)]
        out.write("   ".join(padded).rstrip() + "\n")


def print_config(cfg: Config, fmt: OutputFormat, out: Optional[TextIO] = None) -> None:
    """The effective configuration: every key with its value and source, then every pattern."""
    out = out or sys.stdout
    values = {key: {"value": v.value, "source": v.source} for key, v in sorted(cfg.shown().items())}
    patterns = [{"pattern": p.text, "dialect": p.dialect, "source": p.source} for p in cfg.patterns]
    if fmt == FORMAT_JSON:
        out.write(envelope(config=values, pinned_images=patterns, files=list(cfg.files)) + "\n")
        return

    # An empty list of namespaces is no namespace at all to read, but each command's default.
    default_namespaces = f"({' and '.join(DEFAULT_NAMESPACES)} where they exist)"
    rows = [[key, default_namespaces if key == "namespaces" and not item["value"] else _config_text(item["value"]),
             item["source"]] for key, item in values.items()]
    rows += [["pinned_images", f"{p['pattern']} ({p['dialect']})", p["source"]] for p in patterns]
    if not patterns:
        rows.append(["pinned_images", "(none)", "default"])
    print_table(["KEY", "VALUE", "SOURCE"], rows, out)


def _config_text(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "(none)"
    return str(value)


def print_problems(problems: Sequence[Problem], fmt: OutputFormat, out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    if fmt == FORMAT_JSON:
        out.write(envelope(problems=[p.as_dict() for p in problems]) + "\n")
        return
    for p in problems:
        where = f"{p.source}: " if p.source else ""
        # An invalid pattern's error names its place itself; say it once, before the kind.
        message = p.message[len(where):] if where and p.message.startswith(where) else p.message
        out.write(f"{where}{p.kind}: {message}\n")
    count = len(problems)
    warn(f"config lint: {count} problem{'s' if count != 1 else ''}" if count else "config lint: no problems")


def print_check(result: CheckResult, fmt: OutputFormat, out: Optional[TextIO] = None,
                waited: Optional[float] = None) -> None:
    """Every disagreement with its cause and fix; JSON and wide list the agreeing images too.
    waited: how long check --wait polled, said in the verdict."""
    out = out or sys.stdout
    runtime = {"endpoint": result.endpoint, "name": result.runtime.name, "version": result.runtime.version}
    if fmt == FORMAT_JSON:
        items = [_check_dict(item) for item in result.items]
        out.write(envelope(runtime=runtime, agree=result.agree, images=items) + "\n")
        return
    shown = result.items if fmt == FORMAT_WIDE else [i for i in result.items if not i.agrees]
    if shown and out.isatty():
        _print_check_fitted(shown, out, ellipsis="" if fmt == FORMAT_WIDE else _ellipsis(out))
    elif shown:
        cells = [[i.refs[0], refs.short_id(i.image_id), _yes(i.desired), _yes(i.cri_pinned),
                  i.cause or "agrees", i.fix or "-"] for i in shown]
        print_table(["IMAGE", "IMAGE ID", "WANTED", "CRI PINNED", "CAUSE", "FIX"], cells, out)
    bad = sum(not i.agrees for i in result.items)
    verdict = "agree" if not bad else f"disagree on {bad} of {len(result.items)} image{'s' if len(result.items) != 1 else ''}"
    after = f" (after {waited:.1f} s)" if waited is not None else ""
    warn(f"check: pinctl and {result.runtime} at {result.endpoint} {verdict}{after}")


def _print_check_fitted(shown: Sequence[CheckItem], out: TextIO, ellipsis: str) -> None:
    """Cause and fix are sentences and commands: each gets its own lines under the image, whole."""
    cells = [[abbreviate(i.refs[0], ellipsis) if ellipsis else i.refs[0], refs.short_id(i.image_id), _yes(i.desired),
              _yes(i.cri_pinned)] for i in shown]
    notes = [[("cause", i.cause), ("fix", i.fix or "-")] if i.cause else [] for i in shown]
    print_table(["IMAGE", "IMAGE ID", "WANTED", "CRI PINNED"], cells, out, notes=notes)


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _check_dict(item: CheckItem) -> dict[str, Any]:
    return {
        "id": item.image_id,
        "refs": list(item.refs),
        "wanted": item.desired,
        "cri_pinned": item.cri_pinned,
        "reasons": [r.as_dict() for r in item.reasons],
        "agrees": item.agrees,
        "cause": item.cause,
        "fix": item.fix,
    }


@contextmanager
def check_progress(
    active: bool = True, stream: Optional[TextIO] = None
) -> Iterator[Callable[[CheckResult, float], None]]:
    """A transient status line while check --wait polls, on a terminal only: it is erased when
    the wait ends, and nothing of it reaches a pipe or a log."""
    err = stream or sys.stderr
    if not (active and err.isatty()):
        yield lambda _result, _left: None
        return
    from rich.console import Console
    from rich.live import Live
    from rich.spinner import Spinner

    spinner = Spinner("dots", text="check: asking the runtime")
    # stdout stays where it is (it may be a pipe); a warning on stderr meanwhile shows above the line.
    with Live(spinner, console=Console(file=err, highlight=False), transient=True, redirect_stdout=False,
              refresh_per_second=8):
        yield lambda result, left: spinner.update(text=_waiting_text(result, left))


def _waiting_text(result: CheckResult, seconds_left: float) -> str:
    bad = sum(not item.agrees for item in result.items)
    images = "1 image disagrees" if bad == 1 else f"{bad} images disagree"
    return f"check: {images}; waiting for the runtime, {seconds_left:.0f} s left"


def warn(message: str) -> None:
    """A warning: one line on stderr, named as pinctl's."""
    note(f"pinctl: {message}")


def note(message: str) -> None:
    """One diagnostic line on stderr, whatever names the message carries. Data written before it
    goes out first: the two stay in order on a shared terminal, and a failing stdout is said alone."""
    sys.stdout.flush()
    sys.stderr.write(f"{visible(message)}\n")
    sys.stderr.flush()

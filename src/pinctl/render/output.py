"""Rendering results: tables for people, a versioned JSON envelope for programs.

Data goes to stdout, diagnostics to stderr. Colour only on a terminal and never with NO_COLOR
(rich honours both); rich itself is imported only when a table is drawn on a terminal.

On a terminal a table fits the window: its columns give way in the order each table states
(render/table.py), sha256: references are abbreviated, explanations wrap onto indented lines,
and no line is padded past its last cell. Pipes and files get plain columns with every value in full:
scripts read them. Every name is shown through display.visible, so control characters in
image names (containerd accepts any string) cannot forge rows or reach the terminal.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, TextIO

from pinctl import refs
from pinctl.check import credentials
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
from pinctl.render import shape, table
from pinctl.render.cells import abbreviate, named_rows, not_applied
from pinctl.render.table import NO_FIT, Fit, Notes

if TYPE_CHECKING:
    from pinctl.check.compare import CheckItem, CheckResult
    from pinctl.config.loader import Config
    from pinctl.pins.lint import Problem

# 2: ls "id" is Docker's image ID for Docker's images (id_kind says which; config_digest added).
RESULT_VERSION = 2


def write_envelope(out: TextIO, **fields: Any) -> None:
    """The versioned envelope and a newline, as ``json.dumps(sort_keys=True, indent=2)`` writes
    it, but a top-level list or iterator is written an item at a time: 20,000 rows never exist
    at once as dicts or as one string."""
    fields["pinctl_result_version"] = RESULT_VERSION
    for n, key in enumerate(sorted(fields)):
        out.write(("{" if n == 0 else ",") + "\n  " + json.dumps(key) + ": ")
        value = fields[key]
        if isinstance(value, (list, Iterator)):
            _write_items(out, value)
        else:
            out.write(_indented(value, 2))
    out.write("\n}\n")


def _write_items(out: TextIO, items: Iterable[Any]) -> None:
    empty = True
    for item in items:
        out.write(("[" if empty else ",") + "\n    " + _indented(item, 4))
        empty = False
    out.write("[]" if empty else "\n  ]")


def _indented(value: Any, depth: int) -> str:
    # json never writes a newline inside a string (it escapes it), so every newline is layout.
    return json.dumps(value, sort_keys=True, indent=2).replace("\n", "\n" + " " * depth)


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
    out: Optional[TextIO] = None, show_drift: bool = False, show_cri: bool = False, id_refs: bool = False,
) -> None:
    """id_refs: the table shows the sha256:<id> references of images with a name too."""
    out = out or sys.stdout
    if quiet:
        print_names([row.ref for row in rows], out)
    elif fmt == FORMAT_JSON:
        write_envelope(out, images=(image_dict(r) for r in rows), errors=list(errors))
    else:
        shown = rows if id_refs else named_rows(rows)
        _print_image_table(shown, wide=fmt == FORMAT_WIDE, out=out, show_drift=show_drift, show_cri=show_cri)
        pending = not_applied(rows)
        if pending:
            warn(pending)
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
    if not out.isatty() and not wide and columns and columns[-1].brief is not None:
        _brief_when_long(table_rows, headers, [columns[-1].brief(row) for row in rows])
    print_table(headers, table_rows, out, highlight=highlight, fit=ls_columns.LS_FIT if fit else NO_FIT, brief=brief)


def _brief_when_long(rows: list[list[str]], headers: Sequence[str], brief: Sequence[str]) -> None:
    """Into a pipe the last column is the only one whose width moves no other: a row it would
    take to PIPE_ROW columns or more gets its brief cell (ls's WHY without patterns and files;
    -o wide and JSON keep the whole)."""
    if not rows:
        return
    widths = [max(len(header), *(len(row[i]) for row in rows)) for i, header in enumerate(headers[:-1])]
    before = sum(widths) + len(PLAIN_GAP) * len(widths)
    for row, short in zip(rows, brief):
        if before + len(row[-1]) >= ls_columns.PIPE_ROW:
            row[-1] = short


def print_results(
    command: str, results: Sequence[ItemResult], status: Status, dry_run: bool, fmt: OutputFormat, quiet: bool,
    out: Optional[TextIO] = None,
) -> None:
    """On a terminal each failure shows once, under its row; a lone item that failed is one line
    on stderr and nothing else. When the table goes to a pipe or a file, failures are also said on
    stderr, where the person running the command sees them."""
    out = out or sys.stdout
    # Said in every format: JSON carries it on the item too, but a person running the command
    # must not miss that containerd undoes what it just did.
    for r in results:
        if r.warning is not None:
            warn(f"{command} {r.ref}: {r.warning}")
    if fmt == FORMAT_JSON:
        body = [result_dict(r) for r in results]
        write_envelope(out, command=command, dry_run=dry_run, status=status, results=body)
        return
    on_terminal = not quiet and out.isatty()
    lone_failure = len(results) == 1 and results[0].failed
    if quiet:
        print_names([r.ref for r in results if r.action in CHANGED], out)
    elif on_terminal and not lone_failure:
        _print_results_fitted(results, dry_run, out, ellipsis="" if fmt == FORMAT_WIDE else _ellipsis(out))
    elif not on_terminal:
        _print_results_plain(results, dry_run, out)
    if not on_terminal or lone_failure:
        for r in results:
            if not r.done:
                warn(f"{command} {r.ref}: {r.error}")
    if not lone_failure:
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
    print_table(["ACTION", "NAMESPACE", "REF"], cells, out, highlight={"ACTION": {ACTION_FAILED: "red"}}, notes=notes,
                fit=RESULTS_FIT if ellipsis else NO_FIT)


RESULTS_FIT = table.give_way("REF", fold=["NAMESPACE"])


CHANGED: tuple[Action, ...] = (ACTION_PINNED, ACTION_UNPINNED, ACTION_PRUNED, ACTION_ADOPTED)
# How people read each action; JSON keeps the action values themselves (docs/json.md).
ACTION_TEXT: dict[Action, str] = {
    ACTION_ALREADY_PINNED: "already pinned",
    ACTION_ALREADY_UNPINNED: "already unpinned",
    ACTION_ADOPTED: "taken over from sync",
    # sync --prune takes pins back; "pruned" alone reads like pinctl prune, which deletes images.
    ACTION_PRUNED: "unpinned (no pattern)",
    ACTION_CHANGED_UNDER_US: "changed under pinctl",
}
# The order a summary counts them in: changes first, failures last.
ACTION_ORDER: tuple[Action, ...] = (*CHANGED, ACTION_ALREADY_PINNED, ACTION_ALREADY_UNPINNED, ACTION_CHANGED_UNDER_US,
                                    ACTION_FAILED)


def human_word(value: str) -> str:
    """An action or pin value (JSON's already-pinned) as people read it (already pinned)."""
    return next((text for action, text in ACTION_TEXT.items() if action == value), value)


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
    highlight: Optional[dict[str, dict[str, str]]] = None, *, fit: Fit = NO_FIT,
    notes: Optional[Sequence[Notes]] = None, brief: Optional[Mapping[str, Sequence[str]]] = None,
) -> None:
    """fit: how the columns give way on a terminal narrower than the table (render/table.py);
    brief: shorter cells for a column, taken when fit says so. notes: per row, (label, text)
    lines shown indented under it, folded to the window; on a terminal only: pipes get columns."""
    encoding = getattr(out, "encoding", None)
    # A row whose cells are all printable as they are (nearly every row) is checked once, whole.
    shown = [row if exact("".join(row), encoding) else [visible(cell, encoding) for cell in row] for row in rows]
    notes = [[(label, visible(text, encoding)) for label, text in row_notes] for row_notes in notes or []]
    if not out.isatty():
        _plain_table(headers, shown, out)
        return
    briefs = {h: [visible(c, encoding) for c in cells] for h, cells in (brief or {}).items()}
    table.draw(headers, shown, out, fit, styles=highlight or {}, notes=notes, brief=briefs, ellipsis=_ellipsis(out))


def folded(line: str, out: TextIO, indent: int = 4) -> str:
    """line folded to the terminal's width, its continuation indented; whole into a pipe or file,
    where a script reads it as one line."""
    if not out.isatty():
        return line
    width = terminal_width(out)
    if shape.cells(line) <= width:
        return line
    # A label padded to the indent ("Image fs:    ") stays as it is; the text after it wraps.
    lead = line[:indent] if line[:indent].endswith(" ") and line[:indent].strip() else ""
    lines = shape.wrap(line[len(lead):], width - len(lead), width - indent)
    return lead + ("\n" + " " * indent).join(lines)


def terminal_width(out: TextIO) -> int:
    """The width of the terminal out writes to; COLUMNS first, as rich and click read it."""
    try:
        return max(int(os.environ["COLUMNS"]), 20)
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(out.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 80


def _ellipsis(out: TextIO) -> str:
    return "…" if exact("…", getattr(out, "encoding", None)) else "..."


PLAIN_GAP = "   "  # between a pipe's columns: scripts split on runs of blanks


def _plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """Aligned columns with no trailing blanks, for pipes, files and scripts."""
    widths = [max(len(header), max(map(len, column), default=0)) for header, column in zip(headers, zip(*rows))] \
        if rows else [len(header) for header in headers]
    line = PLAIN_GAP.join(f"{{:<{width}}}" for width in widths)
    out.write("".join(line.format(*cells).rstrip() + "\n" for cells in [headers, *rows]))


def print_config(cfg: Config, fmt: OutputFormat, out: Optional[TextIO] = None) -> None:
    """The effective configuration: every key with its value and source, then every pattern."""
    out = out or sys.stdout
    values = {key: {"value": v.value, "source": v.source} for key, v in sorted(cfg.shown().items())}
    patterns = [{"pattern": p.text, "dialect": p.dialect, "source": p.source} for p in cfg.patterns]
    if fmt == FORMAT_JSON:
        write_envelope(out, config=values, pinned_images=patterns, files=list(cfg.files))
        return

    # An empty list of namespaces is no namespace at all to read, but each command's default.
    default_namespaces = f"({' and '.join(DEFAULT_NAMESPACES)} where they exist)"
    rows = [[key, default_namespaces if key == "namespaces" and not item["value"] else _config_text(item["value"]),
             item["source"]] for key, item in values.items()]
    rows += [["pinned_images", f"{p['pattern']} ({p['dialect']})", p["source"]] for p in patterns]
    if not patterns:
        rows.append(["pinned_images", "(none)", "default"])
    print_table(["KEY", "VALUE", "SOURCE"], rows, out, fit=CONFIG_FIT)
    # Which files these came from, beside the table for a person (JSON has them as "files").
    warn(f"config show: read {', '.join(cfg.files)}" if cfg.files else
         "config show: no config file was read; the values come from defaults, the environment and flags")


# Values (paths, lists) wrap at their separators under themselves; SOURCE wraps, then runs on
# indented lines under its row; a key is a name: never cut, its row folds.
CONFIG_FIT = table.give_way("KEY", last="SOURCE", wrap=["VALUE"])


def _config_text(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "(none)"
    return str(value)


def print_problems(problems: Sequence[Problem], fmt: OutputFormat, out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    if fmt == FORMAT_JSON:
        write_envelope(out, problems=[p.as_dict() for p in problems])
        return
    for p in problems:
        where = f"{p.source}: " if p.source else ""
        # An invalid pattern's error names its place itself; say it once, before the kind.
        message = p.message[len(where):] if where and p.message.startswith(where) else p.message
        out.write(folded(f"{where}{p.kind}: {message}", out, indent=4) + "\n")
    count = len(problems)
    warn(f"config lint: {count} problem{'s' if count != 1 else ''}" if count else "config lint: no problems")


def print_check(result: CheckResult, fmt: OutputFormat, out: Optional[TextIO] = None,
                waited: Optional[float] = None) -> None:
    """Every disagreement with its cause and fix, and every pinned image the kubelet will pull again
    (its KUBELET cell; the whole sentence and fix on stderr); JSON and wide list the agreeing
    images too. waited: how long check --wait polled, said in the verdict."""
    out = out or sys.stdout
    runtime = {"endpoint": result.endpoint, "name": result.runtime.name, "version": result.runtime.version}
    if fmt == FORMAT_JSON:
        items = [_check_dict(item) for item in result.items]
        write_envelope(out, runtime=runtime, agree=result.agree, kubelet=_kubelet_dict(result), images=items)
        return
    judged = result.kubelet is not None
    shown = result.items if fmt == FORMAT_WIDE else [
        i for i in result.items if not i.agrees or i.kubelet_warning is not None]
    if shown and out.isatty():
        _print_check_fitted(shown, out, ellipsis="" if fmt == FORMAT_WIDE else _ellipsis(out), judged=judged)
    elif shown:
        cells = [[_check_name(i), refs.short_id(i.image_id), _yes(i.desired), _yes(i.cri_pinned),
                  *([_kubelet_cell(i)] if judged else []), i.cause or "agrees", i.fix or "-"] for i in shown]
        print_table(["IMAGE", "IMAGE ID", "WANTED", "CRI PINNED", *(["KUBELET"] if judged else []), "CAUSE", "FIX"],
                    cells, out)
    bad = sum(not i.agrees for i in result.items)
    verdict = "agree" if not bad else f"disagree on {bad} of {len(result.items)} image{'s' if len(result.items) != 1 else ''}"
    after = f" (after {waited:.1f} s)" if waited is not None else ""
    warn(f"check: pinctl and {result.runtime} at {result.endpoint} {verdict}{after}")
    # On a terminal the table's notes say each name's sentence; into a pipe, stderr does.
    _warn_kubelet(result, per_name=not (shown and out.isatty()))


def _warn_kubelet(result: CheckResult, per_name: bool) -> None:
    """Each pinned image the kubelet will not run from disk for every pod: a line per name, with
    what it does and the fix; then each problem with its config or records, and a count."""
    view = result.kubelet
    if view is None:
        return
    for item in result.items:
        for judged in item.kubelet if per_name else ():
            if credentials.warns(judged):
                fix = f"; fix: {judged.fix}" if judged.fix else ""
                warn(f"check: kubelet: {judged.name} ({refs.short_id(item.image_id)}): {judged.why}{fix}")
    for problem in view.problems:
        warn(f"check: {problem}")
    count = result.kubelet_warnings
    policy = f"the kubelet's {view.policy.policy} ({view.policy.source})"
    warn(f"check: {policy}: {count} pinned image{'s' if count != 1 else ''} not run from disk by every pod" if count
         else f"check: {policy}: every pinned image runs from disk")


def _check_name(item: CheckItem) -> str:
    """The image's name in the table: the one the kubelet will pull again, else its first."""
    warned = item.kubelet_warning
    return warned.name if warned is not None else item.refs[0]


_KUBELET_CELLS = {"uses": "uses", "credentials": "with credentials", "pulls": "pulls again", "unknown": "unknown"}


def _kubelet_cell(item: CheckItem) -> str:
    found = credentials.worst(item.kubelet)
    return _KUBELET_CELLS[found.verdict] if found is not None else "-"


def _print_check_fitted(shown: Sequence[CheckItem], out: TextIO, ellipsis: str, judged: bool = False) -> None:
    """Cause and fix are sentences and commands: each gets its own lines under the image, whole."""
    cells = [[abbreviate(_check_name(i), ellipsis) if ellipsis else _check_name(i), refs.short_id(i.image_id), _yes(i.desired),
              _yes(i.cri_pinned), *([_kubelet_cell(i)] if judged else [])] for i in shown]
    notes = [[*([("cause", i.cause), ("fix", i.fix or "-")] if i.cause else []), *_kubelet_notes(i)] for i in shown]
    print_table(["IMAGE", "IMAGE ID", "WANTED", "CRI PINNED", *(["KUBELET"] if judged else [])], cells, out,
                notes=notes, fit=CHECK_FIT if ellipsis else NO_FIT)


def _kubelet_notes(item: CheckItem) -> list[tuple[str, str]]:
    """Under the row, each name the kubelet will not run from disk: what it does, and the fix."""
    found: list[tuple[str, str]] = []
    for judged in item.kubelet:
        if credentials.warns(judged):
            found += [("kubelet", f"{judged.name}: {judged.why}"), *([("kubelet fix", judged.fix)] if judged.fix else [])]
    return found


CHECK_FIT = table.give_way("IMAGE", drop=["IMAGE ID"])


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
        "kubelet_checks": [{"image_name": j.name, "verdict": j.verdict, "reason": j.reason, "why": j.why, "fix": j.fix}
                           for j in item.kubelet],
    }


def _kubelet_dict(result: CheckResult) -> Optional[dict[str, Any]]:
    view = result.kubelet
    if view is None:
        return None
    return {"policy": view.policy.policy, "policy_source": view.policy.source, "allowlist": list(view.policy.allowlist),
            "feature_gate": view.policy.gate_enabled, "kubelet_config": view.config, "records_dir": view.records,
            "kubelet_problems": list(view.problems), "warned_images": result.kubelet_warnings}


@contextmanager
def check_progress(
    active: bool = True, stream: Optional[TextIO] = None
) -> Iterator[Callable[[CheckResult, float], None]]:
    """check --wait's status line (waiting_line)."""
    with waiting_line("check: asking the runtime", active, stream) as say:
        yield lambda result, left: say(_waiting_text(result, left))


@contextmanager
def waiting_line(first: str, active: bool = True, stream: Optional[TextIO] = None) -> Iterator[Callable[[str], None]]:
    """A transient status line with a spinner while a command polls (check --wait, fleet status
    --wait), on a terminal only: it is erased when the wait ends, and nothing of it reaches a
    pipe or a log. Yields the function that changes its text."""
    err = stream or sys.stderr
    if not (active and err.isatty()):
        yield lambda _text: None
        return
    from rich.console import Console
    from rich.live import Live
    from rich.spinner import Spinner

    def fitted(text: str) -> str:
        # One line, whatever the window: the spinner and a space take two cells.
        return shape.cut_end(text, terminal_width(err) - 3, _ellipsis(err))

    spinner = Spinner("dots", text=fitted(first))
    # stdout stays where it is (it may be a pipe); a warning on stderr meanwhile shows above the line.
    with Live(spinner, console=Console(file=err, highlight=False), transient=True, redirect_stdout=False,
              refresh_per_second=8):
        yield lambda text: spinner.update(text=fitted(text))


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
    sys.stderr.write(folded(visible(message), sys.stderr) + "\n")
    sys.stderr.flush()

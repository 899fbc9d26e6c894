"""Rendering results: tables for people, a versioned JSON envelope for programs.

Data goes to stdout, diagnostics to stderr. Colour only on a terminal and never with NO_COLOR
(rich honours both); rich itself is imported only when a table is drawn.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Optional, Sequence, TextIO

from pinctl import refs
from pinctl.model import CHANGED_UNDER_US, ImageRow, ItemResult, Reason

RESULT_VERSION = 1
FORMATS = ("table", "wide", "json")


def envelope(**fields: Any) -> str:
    return json.dumps({"pinctl_result_version": RESULT_VERSION, **fields}, sort_keys=True, indent=2)


def image_dict(row: ImageRow) -> dict[str, Any]:
    return {
        "namespace": row.namespace,
        "ref": row.ref,
        "id": row.image_id,
        "digest": row.digest,
        "size": row.size,
        "pinned": row.pinned,
        "reasons": [reason.as_dict() for reason in row.reasons],
        "labels": dict(row.labels),
        "drift": row.drift,
        "source": row.source,
        "config_labels": row.config_labels,
        "cri_pinned": row.cri_pinned,
    }


def result_dict(result: ItemResult) -> dict[str, Any]:
    return {
        "namespace": result.namespace,
        "ref": result.ref,
        "action": result.action,
        "error": result.error,
    }


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def why(row: ImageRow) -> str:
    """A short WHY cell; the JSON reasons carry the full list."""
    parts = [_label_why(row)] if any(r.kind == "label" for r in row.reasons) else []
    parts += [_other_why(row, r) for r in row.reasons if r.kind != "label"]
    return "; ".join(parts) or "-"


def _label_why(row: ImageRow) -> str:
    carriers = [r.detail for r in row.reasons if r.kind == "label"]
    if row.ref in carriers:
        return "label"
    # Name a tag rather than the sha256: reference the CRI plugin adds, when there is one.
    named = sorted(carriers, key=lambda ref: (ref.startswith("sha256:"), ref))
    return f"label on {named[0]}"


def _other_why(row: ImageRow, reason: Reason) -> str:
    if reason.kind == "sandbox":
        return "sandbox"
    if reason.kind == "ignored":
        return f"but {reason.detail}"
    if reason.kind == "pattern":
        return f"pattern {reason.detail} ({reason.source})"
    if reason.kind == "docker-label":
        return f"docker label {reason.detail}"
    if reason.kind == "ineffective-label":
        own = f"{row.ref}: "
        detail = reason.detail[len(own) :] if reason.detail.startswith(own) else f"on {reason.detail}"
        return f"ineffective label {detail}"
    return f"{reason.kind} {reason.detail}"


def print_images(
    rows: Sequence[ImageRow], errors: Sequence[dict[str, str]], fmt: str, quiet: bool, out: TextIO = sys.stdout,
    show_drift: bool = False, show_cri: bool = False,
) -> None:
    if quiet:
        out.write("".join(f"{row.ref}\n" for row in rows))
    elif fmt == "json":
        out.write(envelope(images=[image_dict(r) for r in rows], errors=list(errors)) + "\n")
    else:
        _print_image_table(rows, wide=fmt == "wide", out=out, show_drift=show_drift, show_cri=show_cri)
    if fmt != "json":
        for error in errors:
            warn(f"{error['namespace']}/{error['ref']}: {error['message']}")


DRIFT_TEXT = {
    "unlabelled": "covered by a pattern, not labelled (pinctl sync)",
    "uncovered": "labelled, no pattern covers it",
}


def _print_image_table(
    rows: Sequence[ImageRow], wide: bool, out: TextIO, show_drift: bool = False, show_cri: bool = False
) -> None:
    headers = ["NAMESPACE", "REF", "IMAGE ID", "SIZE", "PINNED", "WHY"]
    if wide:
        headers = ["NAMESPACE", "REF", "IMAGE ID", "DIGEST", "SIZE", "PINNED", "WHY", "LABELS"]
    table_rows = [_image_cells(row, wide) for row in rows]
    if show_drift:
        headers.insert(headers.index("WHY"), "DRIFT")
        for row, cells in zip(rows, table_rows):
            cells.insert(headers.index("DRIFT"), DRIFT_TEXT.get(row.drift or "", "-"))
    if show_cri:
        headers.insert(headers.index("PINNED") + 1, "CRI PINNED")
        for row, cells in zip(rows, table_rows):
            cells.insert(headers.index("CRI PINNED"), {True: "yes", False: "no", None: "-"}[row.cri_pinned])
    print_table(headers, table_rows, out, highlight={"PINNED": {"yes": "green"}, "CRI PINNED": {"yes": "green"}})


def _image_cells(row: ImageRow, wide: bool) -> list[str]:
    pinned = "yes" if row.pinned else "no"
    where = row.namespace or "docker"
    if not wide:
        return [where, row.ref, refs.short_id(row.image_id), human_size(row.size), pinned, why(row)]
    labels = ",".join(f"{k}={v}" for k, v in sorted({**(row.config_labels or {}), **row.labels}.items())) or "-"
    return [where, row.ref, row.image_id or "<none>", row.digest, human_size(row.size), pinned, why(row), labels]


def print_results(
    command: str, results: Sequence[ItemResult], status: str, dry_run: bool, fmt: str, quiet: bool,
    out: TextIO = sys.stdout,
) -> None:
    if fmt == "json":
        body = [result_dict(r) for r in results]
        out.write(envelope(command=command, dry_run=dry_run, status=status, results=body) + "\n")
        return
    if quiet:
        out.write("".join(f"{r.ref}\n" for r in results if r.action in CHANGED))
    else:
        headers = ["ACTION", "NAMESPACE", "REF", "ERROR"]
        cells = [[_action_text(r.action, dry_run), r.namespace or "-", r.ref, r.error or ""] for r in results]
        print_table(headers, cells, out, highlight={"ACTION": {"failed": "red"}})
    for r in results:
        if not r.done:
            warn(f"{command} {r.ref}: {r.action}: {r.error}" if r.action == CHANGED_UNDER_US else f"{command} {r.ref}: {r.error}")
    if len(results) != 1 or not results[0].failed:
        warn(summary(command, results, dry_run))  # a lone failure has said it all already


CHANGED = ("pinned", "unpinned", "pruned", "adopted")


def _action_text(action: str, dry_run: bool) -> str:
    return f"would be {action}" if dry_run and action in CHANGED else action


def summary(command: str, results: Sequence[ItemResult], dry_run: bool) -> str:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.action] = counts.get(r.action, 0) + 1
    parts = [f"{n} {action.replace('-', ' ')}" for action, n in sorted(counts.items())] or ["nothing to do"]
    return f"{command}{' (dry run)' if dry_run else ''}: " + ", ".join(parts)


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO,
    highlight: Optional[dict[str, dict[str, str]]] = None,
) -> None:
    if not out.isatty():
        _plain_table(headers, rows, out)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for header in headers:
        table.add_column(header, no_wrap=True)
    styles = highlight or {}
    for cells in rows:
        table.add_row(*[_styled(h, c, styles) for h, c in zip(headers, cells)])
    # Never shrink a column to the terminal: a cut reference or ID is worse than a long line.
    console = Console(file=out)
    console.width = max(console.width, _natural_width(headers, rows))
    console.print(table)


def _styled(header: str, cell: str, styles: dict[str, dict[str, str]]) -> Any:
    from rich.text import Text

    style = styles.get(header, {}).get(cell)
    return Text(cell, style=style or "")


def _natural_width(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    return sum(widths) + 2 * (len(widths) - 1)


def _plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """Aligned columns with no trailing blanks, for pipes, files and scripts."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for line in [list(headers), *map(list, rows)]:
        padded = [cell.ljust(width) for cell, width in zip(line, widths)]
        out.write("   ".join(padded).rstrip() + "\n")


def print_config(cfg: Any, fmt: str, out: TextIO = sys.stdout) -> None:
    """The effective configuration: every key with its value and source, then every pattern."""
    values = {key: {"value": v.value, "source": v.source} for key, v in sorted(cfg.values.items())}
    patterns = [{"pattern": p.text, "dialect": p.dialect, "source": p.source} for p in cfg.patterns]
    if fmt == "json":
        out.write(envelope(config=values, pinned_images=patterns, files=list(cfg.files)) + "\n")
        return
    from pinctl.service.namespaces import DEFAULT_NAMESPACES

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
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "(none)"
    return str(value)


def print_problems(problems: Sequence[Any], fmt: str, out: TextIO = sys.stdout) -> None:
    if fmt == "json":
        out.write(envelope(problems=[p.as_dict() for p in problems]) + "\n")
        return
    for p in problems:
        where = f"{p.source}: " if p.source else ""
        # An invalid pattern's error names its place itself; say it once, before the kind.
        message = p.message[len(where):] if where and p.message.startswith(where) else p.message
        out.write(f"{where}{p.kind}: {message}\n")
    count = len(problems)
    warn(f"config lint: {count} problem{'s' if count != 1 else ''}" if count else "config lint: no problems")


def print_check(result: Any, fmt: str, out: TextIO = sys.stdout) -> None:
    """Every disagreement with its cause and fix; JSON and wide list the agreeing images too."""
    runtime = {"endpoint": result.endpoint, "name": result.runtime.name, "version": result.runtime.version}
    if fmt == "json":
        items = [_check_dict(item) for item in result.items]
        out.write(envelope(runtime=runtime, agree=result.agree, images=items) + "\n")
        return
    shown = result.items if fmt == "wide" else [i for i in result.items if not i.agrees]
    cells = [[i.refs[0], refs.short_id(i.image_id), _yes(i.desired), _yes(i.cri_pinned),
              i.cause or "agrees", i.fix or "-"] for i in shown]
    if shown:
        print_table(["IMAGE", "IMAGE ID", "WANTED", "CRI PINNED", "CAUSE", "FIX"], cells, out,
                    highlight={"CAUSE": {"agrees": "green"}})
    bad = sum(not i.agrees for i in result.items)
    verdict = "agree" if not bad else f"disagree on {bad} of {len(result.items)} image{'s' if len(result.items) != 1 else ''}"
    warn(f"check: pinctl and {result.runtime} at {result.endpoint} {verdict}")


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _check_dict(item: Any) -> dict[str, Any]:
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


def warn(message: str) -> None:
    sys.stderr.write(f"pinctl: {message}\n")

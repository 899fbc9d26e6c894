"""pinctl history on a terminal, into a pipe, as JSON and with -q; the journal's problems on stderr.

A row answers "who deleted it, and why": when (local time; -o wide and JSON in UTC), the image's
name, why pinctl wanted it (WANTED), how it was pinned the moment before (PINNED), who deleted it
as far as the node can tell (DELETER), and the evidence in a few words (WHY; -o wide: the
watcher's own sentence). With --all an EVENT column tells deletions from the RemoveImage requests
cri-proxy saw and from restores.
"""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, Optional, Sequence, TextIO

from pinctl.commands.history import KINDS_IN_WORDS, names_of, primary_name, summary_counts
from pinctl.display import human_size
from pinctl.journal import (DELETER_CRI_CLIENT, DELETER_KUBELET, DELETER_KUBELET_LOG, DELETER_OUTSIDE_CRI,
                            REQUEST_FAILED, REQUEST_FORWARDED, REQUEST_REFUSED, RESTORE_DONE, RESTORE_FAILED,
                            Deletion, Entry, RemoveRequest, Restore, stamp)
from pinctl.model import FORMAT_JSON, FORMAT_WIDE, OutputFormat
from pinctl.render import table
from pinctl.render.cells import abbreviate
from pinctl.render.output import _ellipsis, print_names, print_table, warn, write_envelope
from pinctl.render.table import NO_FIT

if TYPE_CHECKING:
    from pinctl.commands.history import HistoryResult


def _history_fit() -> table.Fit:
    """The order the table gives way in is render.table.give_way's (docs/output.md): EVENT folds
    when every row says the same, DELETER takes its short form, WHY wraps, WANTED and PINNED wrap
    down to their longest word. Where give_way drops figures, this table has none; its short
    forms of WANTED and PINNED (the kind of each reason) and of TIME (the time of day within the
    last day, else the day) take that place, then --all's EVENT leaves (WHY still says what
    happened: "refused by cri-proxy", "imported again"). Then WHY goes on under its row. The
    image's name is never shortened: at 60 columns a 24-cell name stays whole, and a row whose
    name does not fit folds."""
    fit = table.give_way("IMAGE", last="WHY", fold=["EVENT"], brief=["DELETER"], wrap=["WANTED", "PINNED"])
    steps = list(fit.steps)
    hang = next(index for index, step in enumerate(steps) if step.column == "WHY" and step.floor == 0)
    steps[hang:hang] = [table.Give("WANTED", brief=True), table.Give("PINNED", brief=True),
                        table.Give("TIME", brief=True), table.Give("EVENT", drop=True)]
    return table.Fit(fit.shapes, tuple(steps), fit.least, fit.drop_empty, fit.name)


HISTORY_FIT = _history_fit()

DELETER_WORDS = {DELETER_KUBELET: "kubelet", DELETER_OUTSIDE_CRI: "outside the CRI", DELETER_KUBELET_LOG: "kubelet log"}
DELETER_BRIEF = {DELETER_KUBELET: "kubelet", DELETER_OUTSIDE_CRI: "not CRI", DELETER_KUBELET_LOG: "kubelet"}
# Why, in a few words, by who deleted it: what the verdict rests on.
WHY_WORDS = {
    DELETER_KUBELET: "the kubelet's image GC: cri-proxy saw its RemoveImage",
    DELETER_OUTSIDE_CRI: "no RemoveImage while cri-proxy served: ctr, nerdctl or docker",
    DELETER_KUBELET_LOG: "the kubelet's image GC: its log names the image ID",
}
UNKNOWN_WHY = "neither cri-proxy nor the kubelet's log can tell"
DAY = 86400.0


def print_history(result: HistoryResult, fmt: OutputFormat, quiet: bool = False, everything: bool = False,
                  out: Optional[TextIO] = None, now: Optional[float] = None) -> None:
    """The entries, newest first; then, on stderr, what the journal could not read, the terms
    no entry names, and a count (for tables)."""
    out = out or sys.stdout
    moment = time.time() if now is None else now
    if fmt == FORMAT_JSON:
        write_envelope(out, journal=result.directory, entries=(entry_dict(entry) for entry in result.entries),
                       problems=list(result.problems), unmatched=list(result.unmatched))
    elif quiet:
        print_names(quiet_names(result.entries), out)
    else:
        _print_table(result.entries, fmt == FORMAT_WIDE, everything, out, moment)
    for problem in result.problems:
        warn(f"history: {problem}")
    if not result.journal_found:
        warn(f"history: no deletion journal in {result.directory} yet: pinctl sync --watch writes it there as "
             "images go (history_dir, PINCTL_HISTORY_DIR)")
    for term in result.unmatched:
        what = "entry" if everything else "deletion"
        more = "" if everything else " (--all also shows RemoveImage requests and restores)"
        warn(f"history: no {what} of {term} in {result.directory}{more}")
    if result.journal_found and not quiet and fmt != FORMAT_JSON:
        warn(f"history: {counted(result.entries)} in {result.directory}")


def counted(entries: Sequence[Entry]) -> str:
    """'3 deletions (2 of images pinctl wanted), 1 restore', or 'no deletion'."""
    counts = summary_counts(entries)
    if not counts:
        return "no deletion"
    parts = []
    for kind, (one, many) in KINDS_IN_WORDS.items():
        n = counts.get(kind, 0)
        if not n:
            continue
        part = f"{n} {one if n == 1 else many}"
        if isinstance(next(e for e in entries if e.kind == kind), Deletion):
            kept = sum(1 for e in entries if isinstance(e, Deletion) and e.wanted)
            part += f" ({kept} of images pinctl wanted)" if kept else ""
        parts.append(part)
    return ", ".join(parts)


def _print_table(entries: Sequence[Entry], wide: bool, everything: bool, out: TextIO, now: float) -> None:
    fit = out.isatty() and not wide
    ellipsis = _ellipsis(out) if fit else ""
    headers = ["TIME", *(["EVENT"] if everything else []), "IMAGE"]
    if wide:
        headers += ["IMAGE ID", "SIZE", "NAMESPACE", "RUNTIME"]
    headers += ["WANTED", "PINNED", "DELETER", "WHY"]
    known = names_by_id(entries)
    rows = [_cells(entry, wide, everything, ellipsis, known) for entry in entries]
    brief = {"TIME": [short_time(entry.time, now) for entry in entries],
             "DELETER": [deleter_brief(entry) for entry in entries],
             "WANTED": [_kinds(entry.wanted) if isinstance(entry, Deletion) else "-" for entry in entries],
             "PINNED": [(_kinds(entry.pinned) if entry.pinned else "no") if isinstance(entry, Deletion) else "-"
                        for entry in entries]} if fit else {}
    print_table(headers, rows, out, fit=HISTORY_FIT if fit else NO_FIT, brief=brief)


def names_by_id(entries: Sequence[Entry]) -> dict[str, str]:
    """The name each image ID went by, from the entries that name it: the kubelet's RemoveImage
    names the image by its ID alone, and a row shows the image's name where one is known."""
    known: dict[str, str] = {}
    for entry in entries:
        name = primary_name(entry)
        if entry.image_id and not name.startswith("sha256:"):
            known.setdefault(entry.image_id, name)
    return known


def _image_name(entry: Entry, known: dict[str, str]) -> str:
    name = primary_name(entry)
    return known.get(entry.image_id, name) if name.startswith("sha256:") else name


def _cells(entry: Entry, wide: bool, everything: bool, ellipsis: str, known: dict[str, str]) -> list[str]:
    when = stamp(entry.time) if wide else local_time(entry.time)
    names = ", ".join(names_of(entry)) if wide and names_of(entry) else _image_name(entry, known)
    image = abbreviate(names, ellipsis) if ellipsis else names
    cells = [when, *([event(entry)] if everything else []), image]
    if wide:
        size = getattr(entry, "size", None)
        cells += [entry.image_id or "-", human_size(size) if isinstance(size, int) else "-",
                  getattr(entry, "namespace", "") or "-", getattr(entry, "runtime", "") or "-"]
    return cells + [wanted_text(entry), pinned_text(entry), deleter_text(entry), why(entry, wide)]


def _kinds(reasons: Sequence[str]) -> str:
    """The kind of each reason, its first word: pattern, import, pin; label, runtime, cri."""
    kinds = dict.fromkeys(re.split(r"[\s_]", reason, maxsplit=1)[0] for reason in reasons)
    return "; ".join(kinds) or "-"


def local_time(seconds: float) -> str:
    """Dec 06 14:03, in the node's local time: short, and what the operator's clock says."""
    return datetime.fromtimestamp(seconds).strftime("%b %d %H:%M")


def short_time(seconds: float, now: float) -> str:
    """On a narrow terminal: the time of day within the last day, else the day."""
    moment = datetime.fromtimestamp(seconds)
    return moment.strftime("%H:%M") if 0 <= now - seconds < DAY else moment.strftime("%b %d")


def event(entry: Entry) -> str:
    if isinstance(entry, Deletion):
        return "deleted" if entry.image_gone else "untagged"
    if isinstance(entry, RemoveRequest):
        return "RemoveImage"
    return {RESTORE_DONE: "restored", RESTORE_FAILED: "restore failed"}.get(entry.outcome, "not restored")


def wanted_text(entry: Entry) -> str:
    return "; ".join(entry.wanted) or "-" if isinstance(entry, Deletion) else "-"


def pinned_text(entry: Entry) -> str:
    return "; ".join(entry.pinned) or "no" if isinstance(entry, Deletion) else "-"


def deleter_text(entry: Entry) -> str:
    """Who deleted it (a deletion) or who asked (a RemoveImage); '-' for a restore."""
    if isinstance(entry, Restore):
        return "-"
    if isinstance(entry, RemoveRequest):
        return _client(entry.client)
    if entry.deleter == DELETER_CRI_CLIENT:
        return _client(entry.client) if entry.client != DELETER_KUBELET else "kubelet"
    return DELETER_WORDS.get(entry.deleter, "unknown")


def deleter_brief(entry: Entry) -> str:
    """On a narrow terminal: the client's name alone, `not CRI`, `kubelet`."""
    if isinstance(entry, Restore):
        return "-"
    if isinstance(entry, RemoveRequest) or entry.deleter == DELETER_CRI_CLIENT:
        return entry.client or "CRI"
    return DELETER_BRIEF.get(entry.deleter, "unknown")


def _client(name: str) -> str:
    if name == DELETER_KUBELET:
        return "kubelet"
    return f"{name} (cri-client)" if name else "cri-client"


def why(entry: Entry, wide: bool = False) -> str:
    """The evidence in a few words; wide: the full sentence the journal keeps."""
    if isinstance(entry, RemoveRequest):
        return request_words(entry, wide)
    if isinstance(entry, Restore):
        return restore_words(entry)
    stays = "" if entry.image_gone else "untagged, the image stays; "
    if wide and entry.evidence:
        return stays + entry.evidence
    if entry.deleter == DELETER_CRI_CLIENT:
        return stays + f"{entry.client or 'a CRI client'} called RemoveImage, seen by cri-proxy"
    return stays + WHY_WORDS.get(entry.deleter, UNKNOWN_WHY)


def request_words(entry: RemoveRequest, wide: bool = False) -> str:
    """'refused by cri-proxy: pinned by label': what became of a RemoveImage cri-proxy saw."""
    caller = f" (pid {entry.pid})" if wide and entry.pid else ""
    if entry.outcome == REQUEST_REFUSED:
        said = f"refused by cri-proxy: {entry.detail}" if entry.detail else "refused by cri-proxy: the image is pinned"
    elif entry.outcome == REQUEST_FORWARDED:
        said = "passed on by cri-proxy; the runtime removed it"
    elif entry.outcome == REQUEST_FAILED:
        said = f"passed on by cri-proxy; the runtime refused: {entry.detail or 'no reason given'}"
    else:
        said = entry.outcome
    return said + caller


def restore_words(entry: Restore) -> str:
    how = entry.how
    if how.startswith("import "):
        done = f"imported again from {how[len('import '):]}"
    elif how == "pull":
        done = "pulled again"
    else:
        done = how or "brought back"
    if entry.outcome == RESTORE_DONE:
        return done
    tried = f" ({how})" if how else ""
    if entry.outcome == RESTORE_FAILED:
        return f"restore failed{tried}: {entry.detail or 'no reason given'}"
    return f"not tried: {entry.detail or 'no source to restore from'}"


def entry_dict(entry: Entry) -> dict[str, Any]:
    """Every field the journal keeps, as it keeps them: time in RFC 3339 UTC, lists for tuples."""
    found: dict[str, Any] = {"kind": entry.kind, "time": stamp(entry.time)}
    for name, value in vars(entry).items():
        if name not in found:
            found[name] = list(value) if isinstance(value, tuple) else value
    return found


def quiet_names(entries: Sequence[Entry]) -> list[str]:
    """-q: every name of each entry, newest first, once each; an image that had none by its ID.
    Names, not IDs: they are what pinctl pull, import_dirs and grep take, and the ID of an image
    that is gone names nothing on the node."""
    found: dict[str, None] = {}
    known = names_by_id(entries)
    for entry in entries:
        names = [name for name in names_of(entry) if not name.startswith("sha256:")]
        for name in names or [known.get(entry.image_id) or entry.image_id or (names_of(entry) or ("",))[0]]:
            if name:
                found.setdefault(name, None)
    return list(found)


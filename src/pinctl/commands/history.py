"""pinctl history: the deletion journal, newest first; and the journal entry ls and check point at.

It reads the journal's files alone (pinctl.journal.store): no engine, no watcher, no daemon is
asked anything, so it works on a node whose runtime is down, and as any user who can read
history_dir. What the journal could not read (a line cut short by a kill, a corrupt line, lines
of a newer pinctl) comes back as problems, one sentence each, beside every entry that could be.

The pointer ls and check give for an image that is not on the node (`latest_deletions`) reads
at most the two newest files, and decodes only the lines that name the image: it runs inside
commands an operator runs often.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional, Sequence

from pinctl import refs as references
from pinctl.errors import EXIT_ERROR, EXIT_OK, UsageError
from pinctl.journal import (DELETER_CRI_CLIENT, DELETER_KUBELET, DELETER_KUBELET_LOG, DELETER_OUTSIDE_CRI,
                            KIND_DELETED, KIND_REMOVE_REQUEST, KIND_RESTORED, REQUEST_REFUSED, Deletion, Entry,
                            RemoveRequest, decode)

if TYPE_CHECKING:
    from pinctl.pins.patterns import Pattern

# A duration for --since: 90s, 30m, 2h, 7d, 1w, or several (1d12h).
_SPAN_PART = re.compile(r"(\d+(?:\.\d+)?)(s|m|h|d|w)")
_SPAN_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# ls and check read the current file and, if the image is not found there, the one before it.
POINTER_FILES = 2
# A file larger than this (a journal written with a larger bound) is read from its end only.
POINTER_TAIL_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class HistoryRequest:
    """pinctl history: where the journal is, what to show of it."""

    directory: str
    terms: Sequence[str] = ()  # REF, image ID (prefix) or pattern: entries naming any of them
    since: Optional[float] = None  # seconds since the epoch
    wanted_only: bool = False  # only images pinctl wanted kept
    everything: bool = False  # RemoveImage requests and restores too, not deletions alone
    dialect: str = "pinctl"


@dataclass
class HistoryResult:
    directory: str
    entries: list[Entry]  # newest first
    problems: list[str] = field(default_factory=list)  # what the journal could not read, one sentence each
    unmatched: list[str] = field(default_factory=list)  # terms no entry shown names
    journal_found: bool = True  # False: no journal file yet (nothing was ever written there)

    @property
    def exit_code(self) -> int:
        return EXIT_ERROR if self.unmatched else EXIT_OK


def history(request: HistoryRequest) -> HistoryResult:
    """The entries asked for, newest first. Every term is read first (a malformed one reads
    nothing); JournalError when the directory cannot be read."""
    from pinctl.journal.store import Journal, rotated

    matchers = {term: term_matcher(term, request.dialect) for term in request.terms}
    journal = Journal(request.directory)
    read = journal.read(request.since)
    shown = [entry for entry in reversed(read.entries) if _selected(entry, request)]
    shown.sort(key=lambda entry: -entry.time)  # stable: lines of one moment stay newest first
    unmatched = [term for term, match in matchers.items() if not any(match(entry) for entry in shown)]
    if matchers:
        named = {id(entry) for entry in shown if any(match(entry) for match in matchers.values())}
        # The kubelet removes by image ID: its RemoveImage names no tag, but the image is the one asked for.
        ids = {entry.image_id for entry in shown if id(entry) in named and entry.image_id}
        shown = [entry for entry in shown if id(entry) in named or entry.image_id in ids]
    found = bool(read.entries or read.problems) or any(
        os.path.exists(journal.path(rotated(index))) for index in range(journal.keep + 1))
    return HistoryResult(request.directory, shown, list(read.problems), unmatched, found)


def _selected(entry: Entry, request: HistoryRequest) -> bool:
    if not request.everything and entry.kind != KIND_DELETED:
        return False
    if request.wanted_only:
        return wanted(entry)
    return True


def wanted(entry: Entry) -> bool:
    """Whether the entry is about an image pinctl wanted kept: a deletion with a reason, every
    restore (only wanted images are restored), a RemoveImage refused because of a pin."""
    if isinstance(entry, Deletion):
        return bool(entry.wanted)
    if isinstance(entry, RemoveRequest):
        return entry.outcome == REQUEST_REFUSED
    return True


def names_of(entry: Entry) -> tuple[str, ...]:
    return (entry.ref,) if isinstance(entry, RemoveRequest) else entry.refs


def term_matcher(term: str, dialect: str = "pinctl") -> Callable[[Entry], bool]:
    """Whether an entry names term: a pattern (with *) matching one of its names; a reference,
    as typed or normalised (alpine:3 is docker.io/library/alpine:3, as Docker's familiar names
    are); or an image ID (prefix) of its image. UsageError for a malformed term."""
    from pinctl.pins import patterns

    if patterns.is_pattern(term):
        pattern = patterns.parse_pattern(term, dialect, "command line")
        return lambda entry: any(patterns.matches(pattern, name) for name in _spellings(names_of(entry)))
    selector = references.parse_selector(term)
    return lambda entry: (selector.names(_spellings(names_of(entry)))
                          or selector.has_id((entry.image_id,) + tuple(n for n in names_of(entry)
                                                                        if n.startswith("sha256:"))))


def _spellings(names: Iterable[str]) -> list[str]:
    """Each name as the runtime wrote it and normalised (Docker writes alpine:3)."""
    found: list[str] = []
    for name in names:
        found.append(name)
        if not name.startswith("sha256:"):
            try:
                normal = references.normalize(name)
            except UsageError:
                continue
            if normal != name:
                found.append(normal)
    return found


def primary_name(entry: Entry) -> str:
    """The name a row shows: a tag before a digest reference before the image ID."""
    names = names_of(entry)
    if not names:
        return entry.image_id or "-"
    return min(names, key=lambda ref: (ref.startswith("sha256:"), "@" in ref))


# -- --since ---------------------------------------------------------------------------------


def parse_since(text: str, now: Optional[float] = None) -> float:
    """--since as seconds since the epoch: a span back from now (2h, 7d, 1d12h, 90s) or a moment
    (RFC 3339: 2026-12-06T14:00:00Z; a date alone or a time without an offset is local time).
    ValueError with what to write instead."""
    value = text.strip()
    parts = _SPAN_PART.findall(value)
    if value and "".join(number + unit for number, unit in parts) == value:
        span = sum(float(number) * _SPAN_UNITS[unit] for number, unit in parts)
        return (time.time() if now is None else now) - span
    try:
        moment = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value)
    except ValueError:
        raise ValueError(f"{text!r} is neither a span like 2h or 7d nor a time like 2026-12-06T14:00:00Z") from None
    return (moment.astimezone() if moment.tzinfo is None else moment).timestamp()


# -- the pointer of ls and check -------------------------------------------------------------


def latest_deletions(directory: str, names: Sequence[str], files: int = POINTER_FILES) -> dict[str, Deletion]:
    """The newest deletion naming each of names (a reference or an image ID), from the newest
    files of the journal only; names with none are left out. Never raises: a journal that
    cannot be read points at nothing, and ls and check go on as before.

    One pass over each file whatever the number of names (a policy may name a hundred images
    this node never had): each line's refs are compared, as JSON writes them, with every
    spelling of every name, and only the lines that name one are decoded."""
    from pinctl.journal.store import rotated

    matchers: dict[str, Callable[[Entry], bool]] = {}
    spellings: set[bytes] = set()
    id_prefixes: set[bytes] = set()
    for name in names:
        try:
            matchers[name] = term_matcher(name)
        except UsageError:
            continue
        hex_part = name[len("sha256:"):] if name.startswith("sha256:") else name
        if _HEX_ID.fullmatch(hex_part):
            id_prefixes.add(hex_part.encode())
        if not name.startswith("sha256:"):
            spellings.update(_json_spellings(name))
    found: dict[str, Deletion] = {}
    for index in range(files):
        missing = {name: match for name, match in matchers.items() if name not in found}
        if not missing:
            break
        text = _tail(os.path.join(directory, rotated(index)))
        if text is None:
            break  # no such file: no older one either
        for start in _lines_naming(text, spellings, tuple(id_prefixes)):
            end = text.find(b"\n", start)
            entry = _decoded(text[start:len(text) if end < 0 else end])
            if not isinstance(entry, Deletion):
                continue
            for name, match in missing.items():
                if (name not in found or entry.time >= found[name].time) and match(entry):
                    found[name] = entry
    return found


_HEX_ID = re.compile(r"[0-9a-f]{4,64}")
# A line's refs and image ID as the journal writes them (pinctl.journal.encode: no blanks).
_REFS = re.compile(rb'"refs":\[([^\]]*)\]')
_IMAGE_ID = re.compile(rb'"image_id":"sha256:([0-9a-f]+)"')


def _tail(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            if size > POINTER_TAIL_BYTES:
                stream.seek(size - POINTER_TAIL_BYTES)
            return stream.read()
    except OSError:
        return None


def _lines_naming(text: bytes, spellings: set[bytes], id_prefixes: tuple[bytes, ...]) -> list[int]:
    """Where each line starts that names one of spellings among its refs, or an image ID
    starting with one of id_prefixes."""
    starts: set[int] = set()
    if spellings:
        for found in _REFS.finditer(text):
            inner = found.group(1)
            if inner and any(part in spellings for part in inner[1:-1].split(b'","')):
                starts.add(text.rfind(b"\n", 0, found.start()) + 1)
    if id_prefixes:
        for found in _IMAGE_ID.finditer(text):
            if found.group(1).startswith(id_prefixes):
                starts.add(text.rfind(b"\n", 0, found.start()) + 1)
    return sorted(starts)


def _json_spellings(name: str) -> set[bytes]:
    """Each way a runtime may have written name (as typed, normalised, Docker's short form), as
    a JSON string's inside: escaped, without its quotes, UTF-8."""
    spelled = {name}
    for spelling in _spellings([name]):
        spelled.update((spelling, references.familiar(spelling)))
    return {json.dumps(spelling, ensure_ascii=False)[1:-1].encode() for spelling in spelled if spelling}


def _decoded(line: bytes) -> Optional[Entry]:
    try:
        return decode(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None


# -- words -----------------------------------------------------------------------------------


def ago(seconds: float) -> str:
    """How long ago, in one unit: 45s, 12m, 5h, 3d."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def deleted_by(deletion: Deletion) -> str:
    """Who deleted it and what says so, as a clause: 'by the kubelet (cri-proxy saw its RemoveImage)'."""
    if deletion.deleter == DELETER_KUBELET:
        return "by the kubelet (cri-proxy saw its RemoveImage)"
    if deletion.deleter == DELETER_CRI_CLIENT:
        return f"by {deletion.client or 'a CRI client'} through the CRI (cri-proxy saw its RemoveImage)"
    if deletion.deleter == DELETER_OUTSIDE_CRI:
        return "outside the CRI (ctr, nerdctl or docker: cri-proxy saw no RemoveImage)"
    if deletion.deleter == DELETER_KUBELET_LOG:
        return "by the kubelet (its log names the image)"
    return "by something the node cannot name"


def went(deletion: Deletion, now: Optional[float] = None) -> str:
    """'deleted 2h ago by the kubelet (cri-proxy saw its RemoveImage)'; 'untagged' when the image stayed."""
    moment = time.time() if now is None else now
    what = "deleted" if deletion.image_gone else "untagged"
    return f"{what} {ago(moment - deletion.time)} ago {deleted_by(deletion)}"


def pointer(name: str, deletion: Deletion, now: Optional[float] = None) -> str:
    """What ls says of an image that is not on the node and was deleted:
    'deleted 2h ago by the kubelet (cri-proxy saw its RemoveImage); see pinctl history NAME'."""
    return f"{went(deletion, now)}; see pinctl history {name}"


def absent_exact_patterns(patterns: Sequence[Pattern], covered: Iterable[str]) -> list[Pattern]:
    """The policy's exact names that cover no image on the node (not image IDs: an ID names no
    image to look up by name). covered: the texts of the patterns some row names."""
    seen = set(covered)
    return [p for p in patterns if p.kind == "exact" and p.text not in seen and not p.text.startswith("sha256:")]


def summary_counts(entries: Sequence[Entry]) -> Mapping[str, int]:
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry.kind] = counts.get(entry.kind, 0) + 1
    return counts


KINDS_IN_WORDS = {KIND_DELETED: ("deletion", "deletions"), KIND_REMOVE_REQUEST: ("RemoveImage request", "RemoveImage requests"),
                  KIND_RESTORED: ("restore", "restores")}

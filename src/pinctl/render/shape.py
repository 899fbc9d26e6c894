"""Making one cell's text narrower for a terminal: a reference shortened in its middle, a sentence
wrapped onto lines, any other text cut with an ellipsis. Widths are terminal cells (rich's
cell_len), so wide characters count double. No I/O; only a terminal table calls these."""

from __future__ import annotations

import re
from collections import Counter
from typing import Optional, Sequence

# Where a word too long for its line may be broken: after a path separator or a list comma, never
# inside a name (an environment variable, a host name).
_BREAK_AFTER = re.compile(r"[^/,;]*[/,;]|[^/,;]+")
# An image reference: an optional registry (a first part with a dot or a port, or localhost), the
# path, and the last part with its tag or digest.
_DIGEST = re.compile(r"(sha256:[0-9a-f]{12})[0-9a-f]{52}")


def cells(text: str) -> int:
    from rich.cells import cell_len

    return int(cell_len(text))


def cut_end(text: str, width: int, ellipsis: str) -> str:
    """text in at most width cells, its end replaced by ellipsis when it is longer."""
    if cells(text) <= width:
        return text
    from rich.cells import set_cell_size

    room = max(width - cells(ellipsis), 0)
    return str(set_cell_size(text, room)).rstrip() + ellipsis if room else ellipsis[:width]


def _cut_start(text: str, width: int, ellipsis: str) -> str:
    """text in at most width cells, its start replaced by ellipsis: the end is what tells tags apart."""
    if cells(text) <= width:
        return text
    kept = text
    while kept and cells(ellipsis + kept) > width:
        kept = kept[1:]
    return ellipsis + kept


def shorten_ref(ref: str, width: int, ellipsis: str) -> str:
    """An image reference in at most width cells, shortened in its middle.

    In order, until it fits: a digest's hex cut to 12 digits; path parts between the registry
    and the last part left out (registry/…/app:1.0); the registry cut at its end; the last part's
    name cut before its tag; at the very least the end of the reference.
    """
    if cells(ref) <= width:
        return ref
    ref = _DIGEST.sub(lambda match: match.group(1) + ellipsis, ref)
    if cells(ref) <= width:
        return ref
    parts = ref.split("/")
    if len(parts) < 2:
        return _shorten_name(ref, width, ellipsis)
    first, middle, last = parts[0], parts[1:-1], parts[-1]
    for keep in range(len(middle) - 1, -1, -1):  # as many leading path parts as fit
        candidate = "/".join([first, *middle[:keep], ellipsis, last])
        if cells(candidate) <= width:
            return candidate
    tail = ("/" + ellipsis + "/" if middle else "/") + last
    room = width - cells(tail)
    if room >= 4:  # a registry cut to fewer cells than that says nothing
        return cut_end(first, room, ellipsis) + tail
    # The last part alone, marked as the end of a longer name.
    lead = ellipsis + "/"
    return lead + _shorten_name(last, width - cells(lead), ellipsis)


def _shorten_name(name: str, width: int, ellipsis: str) -> str:
    """The last part of a reference: its name cut before the tag, else only its end kept."""
    repository, colon, tag = name.rpartition(":")
    if colon and "@" not in name:
        room = width - cells(colon + tag)
        if room >= cells(ellipsis) + 3:
            return cut_end(repository, room, ellipsis) + colon + tag
    return _cut_start(name, width, ellipsis)


def tokens(text: str) -> list[str]:
    """The pieces text may be broken between: words, and a long word's pieces after / , ;."""
    return [piece for word in text.split() for piece in _BREAK_AFTER.findall(word)]


def widest_token(texts: list[str]) -> int:
    """The narrowest a wrapped column can be without breaking inside a word."""
    return max((cells(piece) for text in texts for piece in tokens(text)), default=0)


def wrap(text: str, first: int, rest: int) -> list[str]:
    """text as lines, the first at most first cells wide and the others at most rest.

    Words break at blanks; a word longer than a line breaks after / , ; and, if a piece is
    still too long, anywhere. The first line may be empty when even its first word does not fit
    (the text then starts on the next line, which is wider)."""
    lines: list[str] = []
    line = ""

    def room() -> int:
        return first if not lines else rest

    def push(piece: str, joiner: str) -> None:
        nonlocal line
        if line and cells(line + joiner + piece) <= room():
            line += joiner + piece
            return
        if line or (not lines and first < rest and cells(piece) > first):
            lines.append(line)  # an empty first line: the piece goes where there is room
            line = ""
        while cells(piece) > room():
            head = cut_end(piece, room(), "")
            if not head:
                break
            lines.append(head)
            piece = piece[len(head):]
        line = piece

    for word in text.split():
        # A word is broken only when no line could hold it whole.
        pieces = _BREAK_AFTER.findall(word) if cells(word) > max(room(), rest) else [word]
        for index, piece in enumerate(pieces):
            push(piece, " " if index == 0 else "")
    lines.append(line)
    return lines


class NameCuts:
    """Names wider than the whole window, as the lines that show them.

    Cut, a name becomes one of pinctl's own patterns, so that it can be pasted back
    (`pinctl ls '*tools/alpha:1.0*'`): a keyword `*PART*` holding as much of the name's end as
    fits, or, failing that, another part of it or a prefix `START*`. A cut is taken only when it
    matches no other of the table's names (case-insensitively, as patterns match); when no cut
    of that width does, the name is kept whole, broken over as many lines as it takes."""

    def __init__(self, names: Sequence[str], width: int) -> None:
        self.width = width
        self.room = width - 2
        self.names = names
        self._counts: Optional[Counter[str]] = None

    def _alone(self, text: str) -> bool:
        """Whether text (a part of room cells, or a prefix marked by a leading NUL) is in one
        name only. Counted once for every part of every name long enough to hold it, when the
        first name needs a cut: a look-up per cut after that."""
        if self._counts is None:
            counts: Counter[str] = Counter()
            room = self.room
            for name in {name.lower() for name in self.names if len(name) >= room}:
                counts.update({name[start:start + room] for start in range(len(name) - room + 1)})
                counts["\x00" + name[: self.width - 1]] += 1
            self._counts = counts
        return self._counts[text] == 1

    def lines(self, name: str) -> list[str]:
        width, room = self.width, self.room
        if cells(name) <= width:
            return [name]
        if room >= 4:
            for start in range(len(name) - room, -1, -1):
                part = name[start:start + room]
                if cells(part) <= room and self._alone(part.lower()):
                    return [f"*{part}*"]
        prefix = name[: max(width - 1, 0)]
        if width > 4 and self._alone("\x00" + prefix.lower()):
            return [f"{prefix}*"]
        lines = []
        rest = name
        while rest:
            head = cut_end(rest, width, "") or rest[0]
            lines.append(head)
            rest = rest[len(head):]
        return lines


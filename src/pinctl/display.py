"""Names as a terminal or a line-reading script can take them.

containerd accepts any string as an image name, control characters included: written as it is,
a newline forges a table row or a log line and an ESC reaches the terminal. Human output shows
such characters escaped, as Python writes them (\\n, \\x1b, \\u202e); output that must stay exact
(-q, JSON) either leaves a name out or escapes it in its own syntax.
"""

from __future__ import annotations

import codecs
from functools import lru_cache
from typing import Optional, Sequence


def visible(text: str, encoding: Optional[str] = None) -> str:
    """text with every character that would not show as itself escaped: control and format
    characters, separators other than the space, and what encoding cannot carry."""
    if exact(text, encoding):
        return text
    return "".join(ch if exact(ch, encoding) else _escape(ch) for ch in text)


def exact(text: str, encoding: Optional[str] = None) -> bool:
    """True when text can be written as itself, on one line, in encoding."""
    return text.isprintable() and _encodable(text, encoding)


def _escape(ch: str) -> str:
    return ch.encode("unicode_escape").decode("ascii")


def _encodable(text: str, encoding: Optional[str]) -> bool:
    if encoding is None or _is_utf(encoding):
        return True  # printable text has no lone surrogates, the one thing UTF-8 cannot carry
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


@lru_cache(maxsize=8)
def _is_utf(encoding: str) -> bool:
    try:
        return codecs.lookup(encoding).name.startswith("utf")
    except LookupError:
        return False


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def counted(count: int, noun: str, plural: Optional[str] = None) -> str:
    """'1 image', '2 images': a count with its noun in the right number (plural: when not noun+s)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def closest(typed: str, candidates: Sequence[str]) -> list[str]:
    """The candidates fewest edits away from typed, when that is few enough to be a typo."""
    distances = {candidate: _edits(typed, candidate) for candidate in candidates}
    if not distances:
        return []
    best = min(distances.values())
    if best > max(2, len(typed.lstrip("-")) // 3):
        return []
    return sorted(candidate for candidate, distance in distances.items() if distance == best)


def _edits(a: str, b: str) -> int:
    """Levenshtein distance, with a swap of two neighbours counted as one edit."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            cost = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                cost = min(cost, previous2[j - 2] + 1)
            current.append(cost)
        previous2, previous = previous, current
    return previous[-1]

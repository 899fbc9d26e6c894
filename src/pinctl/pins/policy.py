"""The pin policy: patterns from the config, compiled once, matched against images."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

from pinctl.errors import PatternError
from pinctl.model import ImageRow
from pinctl.pins.patterns import Matcher, parse_pattern

if TYPE_CHECKING:
    from pinctl.config.loader import PatternEntry
    from pinctl.pins.patterns import Pattern


@dataclass
class Policy:
    patterns: list[Pattern] = field(default_factory=list)
    _matcher: Optional[Matcher] = None

    @property
    def matcher(self) -> Matcher:
        if self._matcher is None:
            self._matcher = Matcher(self.patterns)
        return self._matcher

    def __bool__(self) -> bool:
        return bool(self.patterns)


ID_PREFIX = "sha256:"
_WHOLE_ID = re.compile(r"sha256:[0-9a-f]{64}")
_HEX = re.compile(r"[0-9a-f]{0,64}")


def matches_ids(pattern: Pattern) -> bool:
    """Whether the dialect matches image IDs at all. CRI-O (v1.34.0, FilterPinnedImage) tests
    each of an image's names, never its ID, so the crio dialect does not either; pinctl's own
    dialect pins by ID by design (sha256:<id>, an ID prefix glob)."""
    return pattern.dialect != "crio"


def could_match_an_id(pattern: Pattern) -> bool:
    """Whether any image ID (sha256:<64 hex>) can match: only then are manifests worth reading.

    Errs towards yes: a needless yes costs a read of the manifests, a wrong no a missed pin.
    """
    if not matches_ids(pattern):
        return False
    needle = pattern.needle
    if pattern.anchored_start and pattern.anchored_end:
        return _WHOLE_ID.fullmatch(needle) is not None
    if pattern.anchored_start:
        if len(needle) <= len(ID_PREFIX):
            return ID_PREFIX.startswith(needle)
        return needle.startswith(ID_PREFIX) and _HEX.fullmatch(needle[len(ID_PREFIX) :]) is not None
    if needle in ID_PREFIX:
        return True
    tails = (ID_PREFIX[cut:] for cut in range(len(ID_PREFIX) + 1))
    return any(needle.startswith(t) and _HEX.fullmatch(needle[len(t) :]) for t in tails)


def compile_policy(entries: Sequence[PatternEntry]) -> Policy:
    """Every pattern parsed; the first invalid one raises PatternError naming its source."""
    policy, invalid = compile_collecting(entries)
    if invalid:
        raise invalid[0][1]
    return policy


def compile_collecting(entries: Sequence[PatternEntry]) -> tuple[Policy, list[tuple[PatternEntry, PatternError]]]:
    """Parse what can be parsed and return every invalid pattern with its error, for lint."""

    policy = Policy()
    invalid: list[tuple[PatternEntry, PatternError]] = []
    for entry in entries:
        try:
            policy.patterns.append(parse_pattern(entry.text, entry.dialect, entry.source))
        except PatternError as err:
            invalid.append((entry, err))
    return policy, invalid


@dataclass
class Coverage:
    """Which patterns match each reference by name, and each image by any of its names. An image
    no pattern covers has no entry in by_image: on a node, that is nearly every image."""

    by_ref: dict[str, list[int]] = field(default_factory=dict)
    by_image: dict[str, list[int]] = field(default_factory=dict)


def coverage(policy: Policy, rows: Sequence[ImageRow]) -> Coverage:
    """Match every name of every image once: each ref and, for the dialects that match IDs,
    each image ID. A ref that is itself sha256:... (an image the CRI lists by digest alone) is
    a name like any other, for every dialect."""
    result = Coverage()
    if not policy:
        return result
    id_patterns = {i for i, p in enumerate(policy.patterns) if matches_ids(p)}
    ids = sorted({row.image_id for row in rows if row.image_id}) if id_patterns else []
    names = [row.ref for row in rows] + ids
    hits = policy.matcher.match(names)
    by_id = {image_id: found for image_id, hits_of_id in zip(ids, hits[len(rows) :])
             if (found := [i for i in hits_of_id if i in id_patterns])}
    result.by_ref = dict(zip(names, hits[: len(rows)]))
    by_image = result.by_image
    for row, ref_hits in zip(rows, hits):
        id_hits = by_id.get(row.image_id or "") if by_id else None
        if ref_hits or id_hits:  # most rows of a node have neither: nothing to merge
            key = row.group_key
            by_image[key] = sorted(set(by_image.get(key, ())) | set(ref_hits) | set(id_hits or ()))
    return result


def sync_targets(rows: Sequence[ImageRow], cover: Coverage) -> list[ImageRow]:
    """The refs the policy wants labelled: those a pattern names, or every ref of an image
    that a pattern names only by its ID."""
    targets: list[ImageRow] = []
    named_images = {row.group_key for row in rows if cover.by_ref.get(row.ref)}
    for row in rows:
        if cover.by_ref.get(row.ref):
            targets.append(row)
        elif cover.by_image.get(row.group_key) and row.group_key not in named_images:
            targets.append(row)
    return targets

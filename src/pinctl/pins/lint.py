"""config lint: what is wrong with the pin policy, one problem per finding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Final, Literal, Optional, Protocol, Sequence

from pinctl.errors import PinctlError
from pinctl.model import ConfigPin
from pinctl.pins.containerd_entries import dead_entries
from pinctl.pins.patterns import PATTERN_GLOB, crio_equivalent, first_shadowing, matches, shadowed_by
from pinctl.pins.policy import Policy, compile_collecting, matches_ids

if TYPE_CHECKING:
    from pinctl.config.loader import PatternEntry
    from pinctl.pins.listing import Listing
    from pinctl.pins.patterns import Pattern


class Node(Protocol):
    """What lint reads of the node it opens (node.sources.Node is one): its rows, then close.
    Typed here, since pins sits below the node."""

    def rows(self, policy: Policy, runtime_sizes: bool = True) -> Listing: ...

    def close(self) -> None: ...


# How lint reads containerd's own pinned_images entries (its config and imports) when it wants them.
ConfigPins = Callable[[], Sequence[ConfigPin]]
# Names a problem's message quotes at most, so one line stays one line.
EXAMPLES = 2

# What is wrong (Problem.kind).
ProblemKind = Literal["invalid", "shadowed", "unmatched", "crio-differs", "engine", "containerd-entry"]
PROBLEM_INVALID: Final = "invalid"  # the pattern cannot be read
PROBLEM_SHADOWED: Final = "shadowed"  # another pattern already covers all it can match
PROBLEM_UNMATCHED: Final = "unmatched"  # it matches no image present
PROBLEM_CRIO_DIFFERS: Final = "crio-differs"  # CRI-O, which does not anchor globs, would match more
PROBLEM_ENGINE: Final = "engine"  # the images could not be read to check against
PROBLEM_CONTAINERD_ENTRY: Final = "containerd-entry"  # containerd's own pinned_images entry pins nothing


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    pattern: str
    source: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "pattern": self.pattern, "source": self.source, "message": self.message}


def lint(entries: Sequence[PatternEntry], open_node: Optional[Callable[[], Node]],
         containerd_pins: ConfigPins = lambda: ()) -> list[Problem]:
    """Check the patterns themselves and, given a way to reach the engines, against the images
    present; and the entries of containerd's own pinned_images (its config and imports)."""
    policy, invalid = compile_collecting(entries)
    problems = [Problem(PROBLEM_INVALID, entry.text, entry.source, str(err)) for entry, err in invalid]
    problems += shadowed(policy.patterns)
    problems += containerd_entries(containerd_pins)
    if open_node is not None:
        problems += _against_images(policy, open_node)
    return problems


def containerd_entries(read_pins: ConfigPins) -> list[Problem]:
    """Each entry of containerd 2.x's pinned_images that pins nothing, at its file and line,
    with the entry that would work."""
    try:
        pins = read_pins()
    except PinctlError as err:
        return [Problem(PROBLEM_CONTAINERD_ENTRY, "", "", f"cannot read containerd's pinned_images: {err}")]
    return [Problem(PROBLEM_CONTAINERD_ENTRY, dead.pin.ref, dead.pin.place, dead.message) for dead in dead_entries(pins)]


def shadowed(patterns: Sequence[Pattern]) -> list[Problem]:
    """Each pattern that another one already covers; of two identical ones, the later."""

    problems: list[Problem] = []
    for narrow, found in zip(patterns, first_shadowing(patterns)):
        if found is None:
            continue
        broad = patterns[found]
        what = "duplicates" if shadowed_by(broad, narrow) else "is shadowed by"
        problems.append(Problem(PROBLEM_SHADOWED, narrow.text, narrow.source,
                                f"{narrow.text!r} {what} {broad.text!r} ({broad.source})"))
    return problems


def _against_images(policy: Policy, open_node: Callable[[], Node]) -> list[Problem]:
    try:
        node = open_node()
        try:
            rows = node.rows(Policy(), runtime_sizes=False).rows
        finally:
            node.close()
        names = sorted({row.ref for row in rows if row.ref})
        ids = sorted({row.image_id for row in rows if row.image_id} - set(names))
    except PinctlError as err:
        return [Problem(PROBLEM_ENGINE, "", "", f"cannot check the patterns against images: {err}")]
    return unmatched(policy, names, ids) + crio_differences(policy, names)


def unmatched(policy: Policy, names: Sequence[str], ids: Sequence[str] = ()) -> list[Problem]:
    """Patterns that match no name present, nor (in a dialect that matches IDs) any image ID:
    a crio pattern that only an ID would fit pins nothing under CRI-O."""
    hits = policy.matcher.match(list(names) + list(ids))
    used = {i for per_name in hits[: len(names)] for i in per_name}
    used |= {i for per_id in hits[len(names) :] for i in per_id if matches_ids(policy.patterns[i])}
    return [
        Problem(PROBLEM_UNMATCHED, p.text, p.source, f"{p.text!r} matches no image present")
        for i, p in enumerate(policy.patterns)
        if i not in used
    ]


def crio_differences(policy: Policy, names: Sequence[str]) -> list[Problem]:
    """pinctl anchors globs at the start of a name; CRI-O does not. Show where that matters now.

    names are refs only: CRI-O never matches an image ID."""

    problems: list[Problem] = []
    for p in policy.patterns:
        if p.kind != PATTERN_GLOB or p.dialect != "pinctl":
            continue
        crio = crio_equivalent(p)
        extra = [n for n in names if matches(crio, n) and not matches(p, n)]
        if extra:
            problems.append(Problem(PROBLEM_CRIO_DIFFERS, p.text, p.source,
                                    f"{p.text!r} would also match {len(extra)} more under CRI-O, "
                                    f"e.g. {', '.join(extra[:EXAMPLES])}"))
    return problems

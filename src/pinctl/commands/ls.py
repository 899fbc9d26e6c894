"""pinctl ls and pinctl namespaces: the node's rows with pins and reasons, filtered; and where
ls names an image the node lacks, the deletion journal's newest word on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

from pinctl.errors import EXIT_ERROR, EXIT_OK
from pinctl.model import REASON_PATTERN, ImageRow

if TYPE_CHECKING:
    from pinctl.check.compare import RuntimeImages
    from pinctl.node.sources import Node
    from pinctl.pins.policy import Policy


@dataclass(frozen=True)
class LsQuery:
    """What `pinctl ls` asks for: filter terms and switches."""

    filters: Sequence[str] = ()
    pinned: Optional[bool] = None
    drift: bool = False
    dialect: str = "pinctl"
    # The deletion journal's directory ("": none is read), and whether the policy's exact names
    # missing from the node are looked up in it too (filter terms that match nothing always are).
    history_dir: str = ""
    point_absent: bool = False

    @property
    def names_only_will_do(self) -> bool:
        return not (self.filters or self.drift or self.pinned is not None)


@dataclass
class LsResult:
    rows: list[ImageRow]
    errors: list[dict[str, str]] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)  # filter terms that match no image
    # An unmatched term the deletion journal names -> how it went, and where to read more.
    went: dict[str, str] = field(default_factory=dict)
    # The policy's exact names missing from the node that the journal says were deleted, one line each.
    deleted_wanted: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """1 when a term named what the node does not have, as history REF (and grep) do: a
        script asking for an image reads its absence from the code, the rows of the rest still
        shown. A term that matched only rows the switches (--pinned, --drift) left out is no miss."""
        return EXIT_ERROR if self.unmatched else EXIT_OK


def ls(node: Node, policy: Policy, query: LsQuery, runtime: Optional[RuntimeImages] = None) -> LsResult:
    """Rows with pins and reasons, filtered; with a runtime, what it tells the kubelet too."""
    node.prefetch()  # the records come while the modules load and the CRI's sizes are asked for
    from pinctl.pins.listing import filter_rows, unmatched_terms

    listing = node.rows(policy)
    if runtime is not None:
        from pinctl.check.compare import annotate_cri

        annotate_cri(listing.rows, runtime.list_images())
    rows = filter_rows(listing.rows, query.filters, query.pinned, query.drift, query.dialect)
    lost = {term: said for term in query.filters for said in unmatched_terms(listing.rows, [term], query.dialect)}
    result = LsResult(rows, listing.errors, list(lost.values()))
    if query.history_dir:
        _point_at_journal(result, lost, listing.rows, policy, query)
    return result


# At most this many lines name wanted images the journal says were deleted; the rest are counted.
DELETED_WANTED_LINES = 5


def _point_at_journal(result: LsResult, lost: dict[str, str], rows: Sequence[ImageRow], policy: Policy,
                      query: LsQuery) -> None:
    """Where ls names an image that is not on the node, the journal's newest word on it. The
    journal is read only when there is such an image: a filter term that matched nothing, or
    (point_absent) an exact name of the policy no image has."""
    from pinctl.pins.patterns import is_pattern

    terms = [term for term in lost if not is_pattern(term)]
    if not terms and not (query.point_absent and policy.patterns):
        return  # nothing to look up: the journal's module stays unloaded
    from pinctl.commands.history import absent_exact_patterns, latest_deletions, pointer

    absent = absent_exact_patterns(policy.patterns, (reason.detail for row in rows for reason in row.reasons
                                                     if reason.kind == REASON_PATTERN)) if query.point_absent else []
    if not terms and not absent:
        return
    found = latest_deletions(query.history_dir, [*terms, *(pattern.text for pattern in absent)])
    result.went = {lost[term]: pointer(term, found[term]) for term in terms if term in found}
    lines = [f"{pattern.text}, wanted by the policy ({pattern.source or 'pattern'}), is not on the node: "
             f"{pointer(pattern.text, found[pattern.text])}" for pattern in absent if pattern.text in found]
    if len(lines) > DELETED_WANTED_LINES:
        more = len(lines) - DELETED_WANTED_LINES + 1
        lines[DELETED_WANTED_LINES - 1:] = [f"and {more} more wanted images deleted: pinctl history --wanted"]
    result.deleted_wanted = lines


def ls_names(node: Node) -> list[str]:
    """References alone, from the image lists: no manifest is read (what completion calls)."""
    return [ref for _namespace, ref in node.names()]



def namespaces(node: Node) -> list[tuple[str, bool]]:
    return node.namespaces()


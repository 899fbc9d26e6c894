"""The figures pinctl reports to monitoring, worked out from what ls, check and gc plan compute.

Pure: rows, check results and GC reports in, counts out. Every label these figures are keyed by
comes from a small closed set (namespaces, yes/no, a cause, a drift kind) or from the operator's
own policy (its patterns), never an image name from the engine: a series per image would grow
and churn with every pull on every node, while a policy's patterns change only when it does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Optional, Sequence

from pinctl.check.compare import MISMATCH_NOT_CAUGHT_UP, MISMATCHES
from pinctl.model import (DRIFT_UNCOVERED, DRIFT_UNLABELLED, REASON_CRIO_PIN, REASON_LABEL, REASON_PATTERN, Drift,
                          ImageRow)
from pinctl.service.monitoring import Runtime

if TYPE_CHECKING:
    from pinctl.backends.cri import RuntimeVersion
    from pinctl.pins.patterns import Pattern
    from pinctl.check.compare import CheckResult, Mismatch
    from pinctl.gc.plan import GcReport

# What the namespace label says of an image in Docker's classic store (it has no namespace), as ls does.
NO_NAMESPACE = "docker"
DRIFTS: tuple[Drift, ...] = (DRIFT_UNLABELLED, DRIFT_UNCOVERED)
# What became of the images a policy pattern covers, on this node: kept by the runtime (pinned);
# without pinctl's label or CRI-O item (unpinned: is sync --watch running?); labelled, but the
# runtime does not keep it (ignored: an old containerd, Docker's moby namespace); and absent, 1
# when the pattern covers no image here at all (an exact one: the image was never pulled).
PATTERN_STATES = ("pinned", "unpinned", "ignored", "absent")


@dataclass(frozen=True)
class NodeFigures:
    """Images and references as `pinctl ls` sees them, counted per namespace.

    images and image_bytes: distinct images (by image ID) per (namespace, pinned), pinned as the
    runtime will keep them. policy_refs: references a policy pattern covers, per (namespace,
    labelled), labelled meaning the image carries the pin label. drift: references per
    (namespace, drift kind), as `ls --drift` shows them.
    """

    namespaces: tuple[str, ...]
    images: dict[tuple[str, bool], int]
    image_bytes: dict[tuple[str, bool], int]
    policy_refs: dict[tuple[str, bool], int]
    drift: dict[tuple[str, Drift], int]
    # Images per (pattern, pattern kind, state of PATTERN_STATES), every state of every pattern.
    patterns: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # The policy as a whole: distinct images by state (absent: exact patterns with no image), and
    # the first image (by name) not kept, with its state; what the agent's Node condition says.
    policy: dict[str, int] = field(default_factory=dict)
    first_not_kept: tuple[str, str] = ("", "")


@dataclass(frozen=True)
class CheckFigures:
    """Images the runtime and pinctl disagree on, per mismatch kind, and how many were compared."""

    mismatches: dict[Mismatch, int]
    images: int
    not_caught_up: frozenset[str] = frozenset()  # image IDs, for the next round's with_cri_verdict


@dataclass(frozen=True)
class GcFigures:
    """The image filesystem against the kubelet's thresholds, and the wanted images at risk."""

    capacity_bytes: int
    available_bytes: int
    usage_percent: int
    high_threshold_percent: int
    low_threshold_percent: int
    at_risk: int
    at_risk_bytes: int
    at_risk_deleted: int


@dataclass(frozen=True)
class Figures:
    """What one round of reading the node gave; a part is None when it could not be read."""

    node: Optional[NodeFigures] = None
    check: Optional[CheckFigures] = None
    gc: Optional[GcFigures] = None
    runtime: Optional[Runtime] = None
    taken_at: Optional[float] = None  # seconds since the epoch
    errors: dict[str, str] = field(default_factory=dict)


def node_figures(rows: Sequence[ImageRow], namespaces: Sequence[str] = (),
                 patterns: Sequence[Pattern] = ()) -> NodeFigures:
    """namespaces: those read, so that an empty one still shows its zeros; patterns: the policy's."""
    names = tuple(dict.fromkeys([*namespaces, *(_namespace(row) for row in rows)]))
    images: dict[tuple[str, bool], int] = {(ns, pinned): 0 for ns in names for pinned in (True, False)}
    image_bytes = dict(images)
    policy_refs = dict(images)
    drift: dict[tuple[str, Drift], int] = {(ns, kind): 0 for ns in names for kind in DRIFTS}
    sizes: dict[tuple[str, bool, str], int] = {}
    for row in rows:
        namespace = _namespace(row)
        key = (namespace, row.pinned, row.group_key)
        sizes[key] = max(sizes.get(key, 0), row.size)
        if any(reason.kind == REASON_PATTERN for reason in row.reasons):
            labelled = any(reason.kind == REASON_LABEL for reason in row.reasons)
            policy_refs[(namespace, labelled)] += 1
        if row.drift is not None:
            drift[(namespace, row.drift)] += 1
    for (namespace, pinned, _image), size in sizes.items():
        images[(namespace, pinned)] += 1
        image_bytes[(namespace, pinned)] += size
    by_pattern = pattern_figures(rows, patterns)
    policy, first = policy_figures(rows, by_pattern)
    return NodeFigures(names, images, image_bytes, policy_refs, drift, by_pattern, policy, first)


def pattern_figures(rows: Sequence[ImageRow], patterns: Sequence[Pattern]) -> dict[tuple[str, str, str], int]:
    """Each pattern's images (one per namespace and image ID, as the CRI counts them) by state.
    Patterns are told apart by their text: the same text in two files is one pattern here."""
    kinds = {pattern.text: pattern.kind for pattern in patterns}
    states: dict[str, dict[tuple[str, str], str]] = {text: {} for text in kinds}
    for row in rows:
        covering = [reason.detail for reason in row.reasons if reason.kind == REASON_PATTERN]
        if not covering:
            continue
        state = _state(row)
        for text in covering:
            # Any reference of an image pinned pins it: pinned wins over the others.
            image = (_namespace(row), row.group_key)
            if text in states and states[text].get(image) != "pinned":
                states[text][image] = state
    found: dict[tuple[str, str, str], int] = {}
    for text, images in states.items():
        counted = list(images.values())
        for state in PATTERN_STATES:
            found[(text, kinds[text], state)] = counted.count(state) if state != "absent" else int(not counted)
    return found


def policy_figures(rows: Sequence[ImageRow], by_pattern: dict[tuple[str, str, str], int],
                   cri_unpinned: frozenset[str] = frozenset()) -> tuple[dict[str, int], tuple[str, str]]:
    """Distinct images any pattern covers, by state (pinned wins, as in pattern_figures), and the
    first reference by name of an image not kept. absent: the exact patterns that cover nothing.
    cri_unpinned: image IDs and names the runtime's CRI lists unpinned (with_cri_verdict)."""
    states: dict[tuple[str, str], str] = {}
    names: dict[tuple[str, str], str] = {}
    for row in rows:
        if not any(reason.kind == REASON_PATTERN for reason in row.reasons):
            continue
        image = (_namespace(row), row.group_key)
        state = _state(row)
        if state == "pinned" and {row.image_id or "", row.digest, row.ref} & cri_unpinned:
            state = "ignored"
        if states.get(image) != "pinned":
            states[image] = state
        names[image] = min(names.get(image, row.ref), row.ref)
    counted = list(states.values())
    found = {state: counted.count(state) for state in PATTERN_STATES if state != "absent"}
    found["absent"] = sum(n for (_text, kind, state), n in by_pattern.items() if state == "absent" and kind == "exact")
    not_kept = sorted((names[image], state) for image, state in states.items() if state != "pinned")
    return found, (not_kept[0] if not_kept else ("", ""))


def with_cri_verdict(found: NodeFigures, rows: Sequence[ImageRow], result: CheckResult,
                     before: Optional[CheckFigures] = None) -> NodeFigures:
    """The policy's images as the kubelet's GC will find them: one pinctl's rows call pinned that
    the CRI lists unpinned is not kept, whatever pinctl's model of the runtime says. An image the
    CRI has not caught up with (labelled where it reads) counts only if it had not in the round
    before too: a round meeting a pin within its first second would otherwise report it not kept
    for a whole check interval. Only the images pinctl expects pinned are looked at (check's
    desired): on a node of 10,000 unpinned images nothing is gathered and nothing recounted."""
    lagged = before.not_caught_up if before is not None else frozenset()
    unpinned = frozenset(key for item in result.items
                         if item.desired and item.image_id and not item.cri_pinned
                         and (item.mismatch != MISMATCH_NOT_CAUGHT_UP or item.image_id in lagged)
                         for key in (item.image_id, *item.refs))
    if not unpinned:
        return found
    policy, first = policy_figures(rows, found.patterns, unpinned)
    return replace(found, policy=policy, first_not_kept=first)


def _state(row: ImageRow) -> str:
    if row.pinned:
        return "pinned"
    return "ignored" if any(reason.kind in (REASON_LABEL, REASON_CRIO_PIN) for reason in row.reasons) else "unpinned"


def check_figures(result: CheckResult) -> CheckFigures:
    mismatches: dict[Mismatch, int] = {kind: 0 for kind in MISMATCHES}
    for item in result.items:
        if item.mismatch is not None:
            mismatches[item.mismatch] += 1
    lagging = frozenset(item.image_id for item in result.items if item.mismatch == MISMATCH_NOT_CAUGHT_UP)
    return CheckFigures(mismatches, len(result.items), lagging)


def gc_figures(report: GcReport) -> GcFigures:
    plan = report.plan
    return GcFigures(
        capacity_bytes=plan.fs.capacity_bytes,
        available_bytes=plan.fs.available,
        usage_percent=plan.usage_percent,
        high_threshold_percent=plan.settings.high_threshold_percent,
        low_threshold_percent=plan.settings.low_threshold_percent,
        at_risk=len(plan.at_risk),
        at_risk_bytes=sum(risk.image.size for risk in plan.at_risk),
        at_risk_deleted=len(plan.wanted_deleted),
    )


def runtime_of(version: RuntimeVersion) -> Runtime:
    return Runtime(version.name, version.version)


def _namespace(row: ImageRow) -> str:
    return row.namespace or NO_NAMESPACE

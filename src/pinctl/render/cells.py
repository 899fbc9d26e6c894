"""The text of one cell of pinctl's tables: WHY, drift, abbreviated references. No I/O."""

from __future__ import annotations

import re
from typing import Sequence

from pinctl.model import (
    DRIFT_UNCOVERED,
    DRIFT_UNLABELLED,
    REASON_CONTAINERD_CONFIG,
    REASON_CRIO_CONFIG,
    REASON_CRIO_PIN,
    REASON_DOCKER_LABEL,
    REASON_IGNORED,
    REASON_INEFFECTIVE_LABEL,
    REASON_LABEL,
    REASON_PATTERN,
    REASON_SANDBOX,
    REASON_UNLABELLED_SANDBOX,
    SOURCE_CRIO,
    Drift,
    ImageRow,
    Reason,
)

FULL_DIGEST_REF = re.compile(r"sha256:[0-9a-f]{64}")
# After a pattern that covers an image nothing pins yet (drift "unlabelled").
NOT_APPLIED = "not applied: pinctl sync"
# After a containerd pinned_images entry on an image without the label: containerd labels what
# its entries name when it starts, so the entry came after its last start.
NOT_READ = "not applied: restart containerd"


def why(row: ImageRow, wide: bool = True) -> str:
    """WHY: with wide (-o wide) the whole, each pattern with the file and line it came from; in a
    table the short thing, each reason without where it was set (`pattern web:* not applied:
    pinctl sync`). The JSON reasons carry the whole list."""
    if not row.reasons:
        return "-"
    if len(row.reasons) == 1 and row.reasons[0].kind == REASON_LABEL and row.reasons[0].detail == row.ref:
        return "label"  # the common pinned row, without building the parts
    parts = [_label_why(row)] if any(r.kind == REASON_LABEL for r in row.reasons) else []
    parts += [_other_why(row, r, wide) for r in row.reasons if r.kind != REASON_LABEL]
    return "; ".join(parts) or "-"


def why_brief(row: ImageRow) -> str:
    """WHY in the fewest words: each reason by its kind alone, no pattern, file or name. What a
    row into a pipe takes when the short thing would make it 120 columns or more."""
    if not row.reasons:
        return "-"
    labels = [reason.detail for reason in row.reasons if reason.kind == REASON_LABEL]
    parts = [("label" if row.ref in labels else "label on another name")] if labels else []
    parts += [_brief(row, reason) for reason in row.reasons if reason.kind != REASON_LABEL]
    return "; ".join(dict.fromkeys(parts))  # two patterns are one "pattern"


# A reason's fewest words, where they do not depend on the row.
_BRIEF = {REASON_CRIO_CONFIG: "crio config", REASON_CRIO_PIN: "pinctl drop-in", REASON_IGNORED: "but not reported",
          REASON_UNLABELLED_SANDBOX: "no label", REASON_DOCKER_LABEL: "docker label",
          REASON_INEFFECTIVE_LABEL: "ineffective label"}


def _brief(row: ImageRow, reason: Reason) -> str:
    if reason.kind == REASON_PATTERN:
        return NOT_APPLIED if row.drift == DRIFT_UNLABELLED else "pattern"
    if reason.kind == REASON_CONTAINERD_CONFIG:
        return "containerd config" if row.pinned else NOT_READ
    if reason.kind in _BRIEF:
        return _BRIEF[reason.kind]
    return _other_why(row, reason, False)


def short_why(why: str, name: str) -> str:
    """gc plan's and prune's WHY beside an image's name: "pin label", not "pin label on NAME"
    again; -o wide and JSON say the whole."""
    return why.replace(f" on {name}", "") if name else why


def _label_why(row: ImageRow) -> str:
    carriers = [r.detail for r in row.reasons if r.kind == REASON_LABEL]
    if row.ref in carriers:
        return "label"
    # Name a tag rather than the sha256: reference the CRI plugin adds, when there is one.
    named = sorted(carriers, key=lambda ref: (ref.startswith("sha256:"), ref))
    return f"label on {named[0]}"


def _other_why(row: ImageRow, reason: Reason, wide: bool = True) -> str:
    if reason.kind == REASON_SANDBOX:
        return "sandbox" if row.source != SOURCE_CRIO else "pause_image"
    if reason.kind == REASON_CONTAINERD_CONFIG:
        # pinned_images.NAME in FILE: the entry says it all, unless containerd has not read it yet.
        return reason.detail if row.pinned else f"{reason.detail}, {NOT_READ}"
    if reason.kind in (REASON_CRIO_CONFIG, REASON_CRIO_PIN):
        # The item is worth showing only when it is not this very name (a pattern, another name).
        who = "crio" if reason.kind == REASON_CRIO_CONFIG else "pinctl"
        item = "" if reason.detail.lower() == row.ref.lower() else f" {reason.detail}"
        return f"{who}{item} ({reason.source})" if wide else f"{who}{item}"
    if reason.kind == REASON_IGNORED:
        return f"but {reason.detail}"
    if reason.kind == REASON_UNLABELLED_SANDBOX:
        # The rule itself (which releases label it when) is in the JSON detail and check's cause.
        return "no label, and containerd puts none back"
    if reason.kind == REASON_PATTERN:
        # A pattern keeps nothing by itself: until sync writes the pin, the row says so. Where it
        # was written is for -o wide and JSON: in a table it would double a long row.
        if not wide:
            return f"pattern {reason.detail}" + (f" {NOT_APPLIED}" if row.drift == DRIFT_UNLABELLED else "")
        pending = f", {NOT_APPLIED}" if row.drift == DRIFT_UNLABELLED else ""
        return f"pattern {reason.detail} ({reason.source or ''}){pending}"
    if reason.kind == REASON_DOCKER_LABEL:
        return f"docker label {reason.detail}"
    if reason.kind == REASON_INEFFECTIVE_LABEL:
        own = f"{row.ref}: "
        detail = reason.detail[len(own) :] if reason.detail.startswith(own) else f"on {reason.detail}"
        return f"ineffective label {detail}"
    return f"{reason.kind} {reason.detail}"


DRIFT_TEXT: dict[Drift, str] = {
    DRIFT_UNLABELLED: "covered by a pattern, not labelled (pinctl sync)",
    DRIFT_UNCOVERED: "labelled, no pattern covers it",
}
# On CRI-O, pins are items of its pinned_images (pinctl's in its own drop-in), not labels.
CRIO_DRIFT_TEXT: dict[Drift, str] = {
    DRIFT_UNLABELLED: "covered by a pattern, not in CRI-O's pinned_images (pinctl sync)",
    DRIFT_UNCOVERED: "pinned by pinctl's drop-in, no pattern covers it",
}
CRIO_DRIFT_BRIEF: dict[Drift, str] = {
    DRIFT_UNLABELLED: "not in CRI-O",
    DRIFT_UNCOVERED: "no pattern",
}
# On a terminal too narrow for the sentences: what is missing.
DRIFT_BRIEF: dict[Drift, str] = {
    DRIFT_UNLABELLED: "no label",
    DRIFT_UNCOVERED: "no pattern",
}


def not_applied(rows: Sequence[ImageRow]) -> str:
    """The line after a table with rows that a pattern covers, or a containerd pinned_images entry
    names, and nothing pins yet; "" when there are none."""
    images = {(row.namespace, row.group_key) for row in rows if row.drift == DRIFT_UNLABELLED}
    entries = {(row.namespace, row.group_key) for row in rows
               if not row.pinned and any(r.kind == REASON_CONTAINERD_CONFIG for r in row.reasons)}
    said = []
    if images:
        what = "1 image is" if len(images) == 1 else f"{len(images)} images are"
        said.append(f"{what} covered by a pattern but not pinned yet: pinctl sync pins them (ls --drift lists them)")
    if entries:
        what = "1 image is" if len(entries) == 1 else f"{len(entries)} images are"
        said.append(f"{what} named in containerd's pinned_images but not pinned yet: containerd reads them at "
                    "its next start")
    return "; ".join(said)


def named_rows(rows: Sequence[ImageRow]) -> list[ImageRow]:
    """The rows a table shows by default: an image's names, without the sha256:<id> reference
    containerd's CRI adds to it; that reference stays when it is the image's only one."""
    named = {(row.namespace, row.group_key) for row in rows if not FULL_DIGEST_REF.fullmatch(row.ref)}
    return [row for row in rows if not FULL_DIGEST_REF.fullmatch(row.ref) or (row.namespace, row.group_key) not in named]


def abbreviate(ref: str, ellipsis: str = "…") -> str:
    """sha256:<64 hex> as sha256:<12 hex>…, like a short image ID; any other reference whole."""
    if FULL_DIGEST_REF.fullmatch(ref):
        return ref[: len("sha256:") + 12] + ellipsis
    return ref

"""What pinctl wants kept, image by image, and why: the rows' pin labels, policy patterns, Docker
config labels and sandbox image, matched to the images a runtime lists."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from pinctl.model import (
    REASON_CRIO_CONFIG,
    REASON_CRIO_PIN,
    REASON_DOCKER_LABEL,
    REASON_INEFFECTIVE_LABEL,
    REASON_LABEL,
    REASON_PATTERN,
    REASON_SANDBOX,
    WANTED_KINDS,
)

if TYPE_CHECKING:
    from pinctl.gc.estimate import ObservedImage
    from pinctl.model import ImageRow



class RowIndex:
    """pinctl's rows by image ID or target digest, and by reference: one pass over the rows, so
    a node's thousand images cost look-ups, not a thousand passes. Matches come in row order."""

    def __init__(self, rows: Sequence[ImageRow]) -> None:
        self.rows = rows
        self._by_key: dict[str, list[int]] = {}
        self._by_ref: dict[str, list[int]] = {}
        by_key, by_ref = self._by_key, self._by_ref
        for position, row in enumerate(rows):
            image_id, digest = row.image_id, row.target.digest
            for key in (image_id, digest) if digest != image_id else (image_id,):
                if key:
                    by_key.setdefault(key, []).append(position)
            by_ref.setdefault(row.ref, []).append(position)

    def may_match(self, image_id: str, refs: Sequence[str]) -> bool:
        """False when no row can match: a look-up or two for most images of a node."""
        by_key, by_ref = self._by_key, self._by_ref
        return image_id in by_key or any(ref in by_ref or ref.partition("@")[2] in by_key for ref in refs)

    def matching(self, keys: set[str], refs: Sequence[str] = ()) -> list[ImageRow]:
        found = {position for key in keys for position in self._by_key.get(key, ())}
        found.update(position for ref in refs for position in self._by_ref.get(ref, ()))
        return [self.rows[position] for position in sorted(found)]


def wanted_by_pinctl(images: Sequence[ObservedImage], rows: Sequence[ImageRow]) -> dict[str, str]:
    """Image ID -> why pinctl wants it kept: a pin label (also where the runtime ignores it), a
    policy pattern, a Docker config label, the sandbox image."""
    why: dict[str, str] = {}
    # Only rows with such a reason can make an image wanted: on most nodes a few of thousands.
    index = RowIndex([row for row in rows if row.reasons and any(reason.kind in WANTED_KINDS for reason in row.reasons)])
    for image in images:
        if not index.may_match(image.id, image.refs):
            continue
        keys = {image.id, *(ref.partition("@")[2] for ref in image.refs if "@" in ref)}
        reasons = [reason for row in index.matching(keys, image.refs)
                   for reason in row.reasons if reason.kind in WANTED_KINDS]
        if reasons:
            # Every record of an image repeats its reasons, and one pin label is enough to name (a tag first).
            reasons.sort(key=lambda r: (r.kind, r.detail.startswith("sha256:"), r.detail))
            labels = [r for r in reasons if r.kind == REASON_LABEL][:1]
            kept = labels + [r for r in reasons if r.kind != REASON_LABEL]
            why[image.id] = "; ".join(dict.fromkeys(_reason_text(r.kind, r.detail) for r in kept))
    return why


def _reason_text(kind: str, detail: str) -> str:
    return {REASON_LABEL: f"pin label on {detail}", REASON_SANDBOX: "the sandbox image",
            REASON_PATTERN: f"pattern {detail}", REASON_DOCKER_LABEL: f"Docker label {detail}",
            REASON_INEFFECTIVE_LABEL: f"ineffective pin label on {detail}",
            REASON_CRIO_CONFIG: f"CRI-O pinned_images item {detail}",
            REASON_CRIO_PIN: f"pinctl's CRI-O item {detail}"}.get(kind, f"{kind} {detail}")

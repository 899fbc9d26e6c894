"""pin and unpin: resolve arguments to references, plan label changes, apply them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from pinctl import labels as pin_labels
from pinctl import refs
from pinctl.backends import ImageStore
from pinctl.errors import AmbiguousRef, ImageNotFound, PinctlError
from pinctl.model import PIN_LABEL, PIN_VALUE, ImageRow, ItemResult, StoredImage
from pinctl.service.listing import group_by_image, id_matches, list_namespace

PIN = "pin"
UNPIN = "unpin"


@dataclass(frozen=True)
class Change:
    """One label write: set the pin label (value) or remove it (None) on one record."""

    namespace: str
    image: StoredImage
    value: Optional[str]
    action: str


@dataclass
class Plan:
    command: str
    changes: list[Change] = field(default_factory=list)
    settled: list[ItemResult] = field(default_factory=list)


def make_plan(store: ImageStore, namespaces: Sequence[str], command: str, args: Sequence[str]) -> Plan:
    """Every argument is parsed first, so a malformed one changes nothing (UsageError)."""
    selectors = [refs.parse_selector(arg) for arg in args]
    plan = Plan(command)
    listings = {ns: list_namespace(store, ns, None).rows for ns in namespaces}
    seen: set[tuple[str, str]] = set()
    for selector in selectors:
        _plan_selector(plan, selector, listings, seen)
    return plan


def _plan_selector(
    plan: Plan, selector: refs.Selector, listings: dict[str, list[ImageRow]], seen: set[tuple[str, str]]
) -> None:
    found = False
    for namespace, rows in listings.items():
        try:
            targets = resolve(selector, rows)
        except PinctlError as err:
            plan.settled.append(ItemResult(namespace, selector.text, "failed", str(err)))
            found = True
            continue
        if plan.command == UNPIN:
            targets = _whole_images(targets, rows)
        for row in targets:
            if (namespace, row.ref) not in seen:
                seen.add((namespace, row.ref))
                _plan_row(plan, row)
        found = found or bool(targets)
    if not found:
        where = ", ".join(listings) or "no namespace"
        error = ImageNotFound(f"no image {selector.text} in {where}", "check the name with pinctl ls, or pick the namespace with -n")
        plan.settled.append(ItemResult("", selector.text, "failed", str(error)))


def resolve(selector: refs.Selector, rows: Sequence[ImageRow]) -> list[ImageRow]:
    """The rows an argument names: one ref by name, or every ref of the image an ID picks."""
    by_name = [row for row in rows if row.ref in (selector.text, selector.ref)]
    if by_name and not (selector.text.startswith("sha256:")):
        return by_name
    if selector.id_prefix is None:
        return by_name
    images = group_by_image(row for row in rows if id_matches(row, selector.id_prefix))
    if len(images) > 1:
        ids = sorted({refs.short_id(group[0].image_id or group[0].digest) for group in images.values()})
        raise AmbiguousRef(
            f"image ID prefix {selector.text} matches {len(images)} images ({', '.join(ids)})",
            "give more digits of the ID",
        )
    return next(iter(images.values()), by_name)


def _whole_images(targets: Sequence[ImageRow], rows: Sequence[ImageRow]) -> list[ImageRow]:
    """Every ref of the images hit: a label left on any sibling would keep the image pinned."""
    keys = {row.group_key for row in targets}
    siblings = [row for row in rows if row.group_key in keys and row not in targets]
    return list(targets) + siblings


def _plan_row(plan: Plan, row: ImageRow) -> None:
    image = StoredImage(row.ref, row.labels, row.target)
    if plan.command == PIN:
        if pin_labels.carries_pin(row.labels):
            plan.settled.append(ItemResult(row.namespace, row.ref, "already-pinned"))
        else:
            plan.changes.append(Change(row.namespace, image, PIN_VALUE, "pinned"))
    elif PIN_LABEL in row.labels:
        plan.changes.append(Change(row.namespace, image, None, "unpinned"))
    else:
        plan.settled.append(ItemResult(row.namespace, row.ref, "already-unpinned"))


def apply_plan(store: ImageStore, plan: Plan, dry_run: bool) -> list[ItemResult]:
    results = list(plan.settled)
    by_namespace: dict[str, list[Change]] = {}
    for change in plan.changes:
        by_namespace.setdefault(change.namespace, []).append(change)
    for namespace, changes in by_namespace.items():
        if dry_run:
            errors: list[Optional[str]] = [None] * len(changes)
        else:
            errors = store.set_labels(namespace, [(c.image, c.value) for c in changes], PIN_LABEL)
        for change, error in zip(changes, errors):
            action = "failed" if error else change.action
            results.append(ItemResult(namespace, change.image.name, action, error))
    return sorted(results, key=lambda r: (r.namespace, r.ref))


def status_of(results: Sequence[ItemResult]) -> str:
    failed = sum(r.failed for r in results)
    if not failed:
        return "success"
    return "error" if failed == len(results) else "partial"

"""pin and unpin: resolve arguments to references, plan label changes, apply them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from pinctl import labels as pin_labels
from pinctl import refs
from pinctl.backends import ImageStore
from pinctl.errors import AmbiguousRef, ImageNotFound, PinctlError
from pinctl.model import PIN_LABEL, PIN_VALUE, ImageRow, ItemResult, StoredImage
from pinctl.service.listing import build_rows, group_by_image, id_matches

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


class NamespaceView:
    """One namespace's records, indexed by name; image IDs are read only when an argument needs them."""

    def __init__(self, store: ImageStore, namespace: str) -> None:
        self.store = store
        self.namespace = namespace
        self.by_name = {img.name: img for img in store.list_images(namespace)}
        self._images: Optional[dict[str, list[ImageRow]]] = None
        self._image_key: dict[str, str] = {}

    @property
    def images(self) -> dict[str, list[ImageRow]]:
        """Rows grouped by image (ID, else target digest): reading manifests, once."""
        if self._images is None:
            rows = build_rows(self.store, self.namespace, list(self.by_name.values())).rows
            self._images = {key: group for (_, key), group in group_by_image(rows).items()}
            self._image_key = {row.ref: row.group_key for row in rows}
        return self._images

    def named(self, selector: refs.Selector) -> list[StoredImage]:
        return [self.by_name[n] for n in dict.fromkeys((selector.text, selector.ref)) if n in self.by_name]

    def by_id(self, selector: refs.Selector) -> list[ImageRow]:
        """Every ref of the one image an ID (prefix) names; AmbiguousRef when it names several."""
        prefix = selector.id_prefix or ""
        exact = self.images.get(f"sha256:{prefix}")
        if exact:
            return exact
        hits = [group for group in self.images.values() if id_matches(group[0], prefix)]
        if len(hits) > 1:
            ids = sorted(refs.short_id(group[0].group_key) for group in hits)
            raise AmbiguousRef(
                f"image ID prefix {selector.text} matches {len(hits)} images ({', '.join(ids)})",
                "give more digits of the ID",
            )
        return hits[0] if hits else []

    def image_of(self, image: StoredImage) -> list[StoredImage]:
        """Every record of the image this record belongs to, itself first."""
        group = self.images[self._image_key[image.name]]
        return [image, *(self.by_name[row.ref] for row in group if row.ref != image.name)]


def make_plan(store: ImageStore, namespaces: Sequence[str], command: str, args: Sequence[str]) -> Plan:
    """Every argument is parsed first, so a malformed one changes nothing (UsageError)."""
    selectors = [refs.parse_selector(arg) for arg in args]
    plan = Plan(command)
    views = [NamespaceView(store, ns) for ns in namespaces]
    seen: set[tuple[str, str]] = set()
    for selector in selectors:
        _plan_selector(plan, selector, views, seen)
    return plan


def _plan_selector(plan: Plan, selector: refs.Selector, views: Sequence[NamespaceView], seen: set[tuple[str, str]]) -> None:
    found = False
    for view in views:
        try:
            targets = _targets(view, selector, plan.command)
        except PinctlError as err:
            plan.settled.append(ItemResult(view.namespace, selector.text, "failed", str(err)))
            found = True
            continue
        for image in targets:
            if (view.namespace, image.name) not in seen:
                seen.add((view.namespace, image.name))
                _plan_image(plan, view.namespace, image)
        found = found or bool(targets)
    if not found:
        where = ", ".join(v.namespace for v in views) or "no namespace"
        name = selector.text if selector.ref in (None, selector.text) else f"{selector.text} ({selector.ref})"
        error = ImageNotFound(f"no image {name} in {where}", "check the name with pinctl ls, or pick the namespace with -n")
        plan.settled.append(ItemResult("", selector.text, "failed", str(error)))


def _targets(view: NamespaceView, selector: refs.Selector, command: str) -> list[StoredImage]:
    """A name picks that record; an ID (or a sha256: name) picks every record of the image.

    unpin widens a name to the whole image, since a label left on any sibling keeps it pinned.
    """
    named = view.named(selector)
    if named and not selector.text.startswith("sha256:"):
        if command != UNPIN:
            return named
        return [img for hit in named for img in view.image_of(hit)]
    if selector.id_prefix is None:
        return named
    rows = view.by_id(selector)
    return [view.by_name[row.ref] for row in rows] or named


def _plan_image(plan: Plan, namespace: str, image: StoredImage) -> None:
    if plan.command == PIN:
        if pin_labels.carries_pin(image.labels):
            plan.settled.append(ItemResult(namespace, image.name, "already-pinned"))
        else:
            plan.changes.append(Change(namespace, image, PIN_VALUE, "pinned"))
    elif PIN_LABEL in image.labels:
        plan.changes.append(Change(namespace, image, None, "unpinned"))
    else:
        plan.settled.append(ItemResult(namespace, image.name, "already-unpinned"))


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

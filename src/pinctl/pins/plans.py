"""pin, unpin and sync: resolve arguments or the policy to references, plan label changes, apply them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Sequence, Union

from pinctl import refs
from pinctl.backends import ImageStore, sigint_deferred
from pinctl.backends import guard as writes
from pinctl.errors import AmbiguousRef, ImageNotFound, PinctlError
from pinctl.model import (
    ACTION_ADOPTED,
    ACTION_ALREADY_PINNED,
    ACTION_ALREADY_UNPINNED,
    ACTION_CHANGED_UNDER_US,
    ACTION_FAILED,
    ACTION_PINNED,
    ACTION_PRUNED,
    ACTION_UNPINNED,
    CRI_NAMESPACE,
    MANAGED_LABEL,
    MANAGED_VALUE,
    PIN_LABEL,
    PIN_VALUE,
    STATUS_ERROR,
    STATUS_PARTIAL,
    STATUS_SUCCESS,
    VERDICT_ALREADY,
    VERDICT_MOVED,
    VERDICT_WRITTEN,
    Action,
    ConfigPin,
    ImageRow,
    ItemResult,
    LabelChange,
    Status,
    StoredImage,
    Verdict,
    WriteOutcome,
)
from pinctl.pins import labels as pin_labels
from pinctl.pins import patterns
from pinctl.pins import sandbox as sandbox_rules
from pinctl.pins.listing import build_rows, config_pins, group_by_image, id_matches
from pinctl.pins.policy import Policy, could_match_an_id, coverage, sync_targets

if TYPE_CHECKING:
    from pinctl.pins.patterns import Pattern

    # What one command-line argument asks for: a reference or ID, or a pattern.
    Wanted = Union[refs.Selector, Pattern]
    # Why an argument names an image no view can label (Docker's classic store), or None.
    Refusal = Callable[[refs.Selector], Optional[str]]

UNPIN = "unpin"
SYNC = "sync"


@dataclass(frozen=True)
class Change:
    """One label write on one record: each named label set to a value or removed (None)."""

    store: ImageStore
    namespace: str
    image: StoredImage
    labels: LabelChange
    action: Action
    warning: Optional[str] = None


@dataclass
class Plan:
    command: str
    changes: list[Change] = field(default_factory=list)
    settled: list[ItemResult] = field(default_factory=list)


class NamespaceView:
    """One namespace's records, indexed by name; image IDs are read only when something needs them."""

    def __init__(self, store: ImageStore, namespace: str) -> None:
        self.store = store
        self.namespace = namespace
        self.by_name = {img.name: img for img in store.list_images(namespace)}
        self._rows: Optional[list[ImageRow]] = None
        self._images: dict[str, list[ImageRow]] = {}
        self._image_key: dict[str, str] = {}
        self._config_pins: Optional[list[ConfigPin]] = None
        self._sandbox: Optional[str] = None

    @property
    def config_pins(self) -> list[ConfigPin]:
        """containerd 2.x's own pinned_images, which its CRI applies in k8s.io only; read when first asked."""
        if self._config_pins is None:
            self._config_pins = config_pins(self.store) if self.namespace == CRI_NAMESPACE else []
        return self._config_pins

    def sandbox_warning(self, name: str) -> Optional[str]:
        """What unpinning record `name` means if it is the CRI sandbox image that this containerd
        will not label again (pins/sandbox.py); its config and version are read when first needed."""
        if self.namespace != CRI_NAMESPACE:
            return None
        if self._sandbox is None:
            self._sandbox = self.store.sandbox_image() or ""
        if not sandbox_rules.names_sandbox(name, self._sandbox):
            return None
        entry = next((pin.ref for pin in self.config_pins if pin.is_sandbox), self._sandbox)
        return sandbox_rules.unpin_warning(self.store.version(), entry, name)

    def _read_manifests(self) -> list[ImageRow]:
        """Every record with its image ID, grouped by image: the manifests are read once."""
        if self._rows is None:
            self._rows = build_rows(self.store, self.namespace, list(self.by_name.values())).rows
            self._images = {key: group for (_, key), group in group_by_image(self._rows).items()}
            self._image_key = {row.ref: row.group_key for row in self._rows}
        return self._rows

    @property
    def rows(self) -> list[ImageRow]:
        return self._read_manifests()

    @property
    def images(self) -> dict[str, list[ImageRow]]:
        """Rows grouped by image (ID, else target digest)."""
        self._read_manifests()
        return self._images

    def named(self, selector: refs.Selector) -> list[StoredImage]:
        return [self.by_name[n] for n in dict.fromkeys((selector.text, selector.ref)) if n in self.by_name]

    def by_id(self, selector: refs.Selector) -> list[ImageRow]:
        """Every ref of the one image an ID (prefix) names; AmbiguousRef when it names several."""
        prefix = selector.id_prefix or ""
        exact = self.images.get(f"sha256:{prefix}")
        if exact:
            return exact
        hits = [group for group in self.images.values() if any(id_matches(row, prefix) for row in group)]
        if len(hits) > 1:
            which = sorted(_matched_by(group, prefix) for group in hits)
            raise AmbiguousRef(
                f"{selector.text} matches {len(hits)} images: {'; '.join(which)}",
                "give more digits (image IDs and manifest digests both count)",
            )
        return hits[0] if hits else []

    def image_of(self, image: StoredImage) -> list[StoredImage]:
        """Every record of the image this record belongs to, itself first."""
        self._read_manifests()
        group = self._images[self._image_key[image.name]]
        return [image, *(self.by_name[row.ref] for row in group if row.ref != image.name)]

    def records(self, rows: Sequence[ImageRow]) -> list[StoredImage]:
        return [self.by_name[row.ref] for row in rows]

    def wanted(self, policy: Policy) -> list[StoredImage]:
        """The records a policy asks to pin. Manifests are read only when a pattern could
        match an image ID; otherwise the names alone decide."""
        if needs_image_ids(policy):
            return self.records(sync_targets(self.rows, coverage(policy, self.rows)))
        names = sorted(self.by_name)
        picked = wanted_names(policy, names)
        return [self.by_name[n] for n in names if n in picked]


def _matched_by(group: Sequence[ImageRow], prefix: str) -> str:
    """Which digest of an image a prefix matched: its ID, else a reference's manifest digest."""
    image = refs.short_id(group[0].group_key)
    if any((row.image_id or "").split(":", 1)[-1].startswith(prefix) for row in group):
        return f"image {image} by its ID"
    row = next(row for row in group if row.digest.split(":", 1)[-1].startswith(prefix))
    return f"image {image} by the manifest digest {refs.short_digest(row.digest)} of {row.ref}"


def make_plan(
    views: Sequence[NamespaceView],
    command: str,
    args: Sequence[str],
    dialect: str = "pinctl",
    refusal: Optional[Refusal] = None,
) -> Plan:
    """Every argument is parsed first, so a malformed one changes nothing (UsageError).
    refusal says why an argument found in no view names an image that cannot be labelled."""

    parsed: list[Wanted] = [
        patterns.parse_pattern(arg, dialect, "command line") if patterns.is_pattern(arg) else refs.parse_selector(arg)
        for arg in args
    ]
    plan = Plan(command)
    seen: set[tuple[str, str]] = set()
    for arg, what in zip(args, parsed):
        _plan_argument(plan, arg, what, views, seen, refusal)
    return plan


def _plan_argument(
    plan: Plan,
    arg: str,
    what: Wanted,
    views: Sequence[NamespaceView],
    seen: set[tuple[str, str]],
    refusal: Optional[Refusal] = None,
) -> None:
    found = False
    for view in views:
        try:
            targets = _targets(view, what, plan.command)
        except PinctlError as err:
            plan.settled.append(ItemResult(view.namespace, arg, ACTION_FAILED, str(err)))
            found = True
            continue
        for image in targets:
            if (view.namespace, image.name) not in seen:
                seen.add((view.namespace, image.name))
                _plan_image(plan, view, image)
        found = found or bool(targets)
    if found:
        return
    refused = refusal(what) if refusal is not None and isinstance(what, refs.Selector) else None
    error = refused or str(_not_found(arg, what, views))
    plan.settled.append(ItemResult("", arg, ACTION_FAILED, error))


def _not_found(arg: str, what: Wanted, views: Sequence[NamespaceView]) -> ImageNotFound:
    where = ", ".join(v.namespace for v in views) or "no namespace"
    hint = refs.not_found_hint(arg) or "check the name with pinctl ls, or pick the namespace with -n"
    if isinstance(what, refs.Selector) and what.ref not in (None, arg):
        arg = f"{arg} ({what.ref})"
    kind = "image" if isinstance(what, refs.Selector) else "image matches"
    return ImageNotFound(f"no {kind} {arg} in {where}", hint)


def _targets(view: NamespaceView, what: Wanted, command: str) -> list[StoredImage]:
    """A name picks that record; an ID (or a sha256: name) picks every record of the image;
    a pattern picks what it matches. unpin widens everything to whole images, since a label
    left on any sibling keeps the image pinned."""
    if isinstance(what, refs.Selector):
        picked = _selected(view, what)
    else:
        picked = view.wanted(Policy([what]))
    if command == UNPIN:
        return list({img.name: img for hit in picked for img in view.image_of(hit)}.values())
    return picked


def _selected(view: NamespaceView, selector: refs.Selector) -> list[StoredImage]:
    named = view.named(selector)
    if named and not selector.text.startswith("sha256:"):
        return named
    if selector.id_prefix is None:
        return named
    return view.records(view.by_id(selector)) or named


def _plan_image(plan: Plan, view: NamespaceView, image: StoredImage) -> None:
    if plan.command == UNPIN:
        warning = repinned_warning(view.config_pins, image.name) or view.sandbox_warning(image.name)
        if PIN_LABEL in image.labels or MANAGED_LABEL in image.labels:
            plan.changes.append(Change(view.store, view.namespace, image, _removal(image), ACTION_UNPINNED, warning))
        else:
            plan.settled.append(ItemResult(view.namespace, image.name, ACTION_ALREADY_UNPINNED, warning=warning))
    elif pin_labels.carries_pin(image.labels) and MANAGED_LABEL in image.labels:
        # A hand pin of what sync pinned: the operator owns it now, so sync --prune must leave it.
        plan.changes.append(Change(view.store, view.namespace, image, {MANAGED_LABEL: None}, ACTION_ADOPTED))
    elif pin_labels.carries_pin(image.labels):
        plan.settled.append(ItemResult(view.namespace, image.name, ACTION_ALREADY_PINNED))
    else:
        # The mark goes too: a hand pin over an ineffective value sync wrote is the operator's.
        change: LabelChange = {PIN_LABEL: PIN_VALUE, **({MANAGED_LABEL: None} if MANAGED_LABEL in image.labels else {})}
        plan.changes.append(Change(view.store, view.namespace, image, change, ACTION_PINNED))


def repinned_warning(pins: Sequence[ConfigPin], name: str) -> Optional[str]:
    """Why containerd will put back a pin unpin removes: an entry of its own pinned_images names
    the record (compared as a plain string, as containerd does). 2.1 relabels such a record on
    every change to it, the unpin's own write included, and at every start."""
    naming = [pin for pin in pins if pin.ref == name]
    if not naming:
        return None
    where = " and ".join(pin.where for pin in naming)
    if any(pin.is_sandbox for pin in naming):
        # Removing that entry is no way to unpin it: containerd's default sandbox image would take its place.
        return f"containerd will pin it again, at once and at its next start: it is the CRI sandbox image ({where})"
    return (f"containerd will pin it again, at once and at its next start: {where} "
            "names it; remove the entry there and restart containerd to unpin it")


def _removal(image: StoredImage) -> LabelChange:
    """Remove the pin and, when sync put it there, the mark saying so; nothing else."""
    return {key: None for key in (PIN_LABEL, MANAGED_LABEL) if key in image.labels}


def make_sync_plan(views: Sequence[NamespaceView], policy: Policy, prune: bool) -> Plan:
    """Label every ref the policy covers; with prune, unlabel refs sync labelled that it no longer covers."""
    plan = Plan(SYNC)
    for view in views:
        wanted = {image.name for image in view.wanted(policy)}
        for image in sorted(view.by_name.values(), key=lambda img: img.name):
            _plan_sync_image(plan, view.store, view.namespace, image, image.name in wanted, prune)
    return plan


def needs_image_ids(policy: Policy) -> bool:
    return any(could_match_an_id(p) for p in policy.patterns)


def id_patterns(policy: Policy) -> Policy:
    """The policy's patterns that may match an image ID, as a policy of their own."""
    return Policy([p for p in policy.patterns if could_match_an_id(p)])


def wanted_names(policy: Policy, names: Sequence[str]) -> set[str]:
    """The names a policy covers by name alone."""
    if not policy:
        return set()
    return {name for name, hits in zip(names, policy.matcher.match(names)) if hits}


def make_batch_sync_plan(
    store: ImageStore, namespace: str, records: Sequence[StoredImage], policy: Policy, prune: bool
) -> Plan:
    """sync for some records of a namespace, as the watcher does for a burst of image events."""
    plan = Plan(SYNC)
    names = [image.name for image in records]
    wanted = wanted_names(policy, names)
    if needs_image_ids(policy):
        rows = build_rows(store, namespace, records).rows
        # Only the patterns whose dialect matches IDs: a crio pattern never does (as in coverage).
        by_id = wanted_names(id_patterns(policy), [row.image_id for row in rows if row.image_id])
        wanted |= {row.ref for row in rows if row.image_id in by_id}
    for image in records:
        _plan_sync_image(plan, store, namespace, image, image.name in wanted, prune)
    return plan


def _plan_sync_image(
    plan: Plan, store: ImageStore, namespace: str, image: StoredImage, wanted: bool, prune: bool
) -> None:
    managed = image.labels.get(MANAGED_LABEL) == MANAGED_VALUE
    if wanted and pin_labels.carries_pin(image.labels):
        plan.settled.append(ItemResult(namespace, image.name, ACTION_ALREADY_PINNED))
    elif wanted:
        # An ineffective value is ours to correct; the mark records that sync owns this pin.
        change: LabelChange = {PIN_LABEL: PIN_VALUE, MANAGED_LABEL: MANAGED_VALUE}
        plan.changes.append(Change(store, namespace, image, change, ACTION_PINNED))
    elif prune and managed:
        plan.changes.append(Change(store, namespace, image, _removal(image), ACTION_PRUNED))


def apply_plan(plan: Plan, dry_run: bool) -> list[ItemResult]:
    """Write every change, one batch per store and namespace; each item reports its own outcome."""
    results = list(plan.settled)
    batches: dict[tuple[int, str], list[Change]] = {}
    for change in plan.changes:
        batches.setdefault((id(change.store), change.namespace), []).append(change)
    # A SIGINT ends the writes early, each batch's reported (LabelWriter.set_labels), and the
    # batches after it are not tried.
    with sigint_deferred() as interrupted:
        for changes in batches.values():
            if dry_run:
                outcomes = [writes.WRITTEN] * len(changes)
            elif interrupted():
                outcomes = [writes.INTERRUPTED] * len(changes)
            else:
                outcomes = changes[0].store.set_labels(changes[0].namespace, [(c.image, c.labels) for c in changes])
            results += [_item_result(change, outcome) for change, outcome in zip(changes, outcomes)]
    return sorted(results, key=lambda r: (r.namespace, r.ref))


def _item_result(change: Change, outcome: WriteOutcome) -> ItemResult:
    already = change.labels.get(PIN_LABEL) or change.action == ACTION_ADOPTED
    actions: dict[Verdict, Action] = {
        VERDICT_WRITTEN: change.action,
        VERDICT_ALREADY: ACTION_ALREADY_PINNED if already else ACTION_ALREADY_UNPINNED,
        VERDICT_MOVED: ACTION_CHANGED_UNDER_US,
    }
    action = actions.get(outcome.verdict, ACTION_FAILED)
    return ItemResult(change.namespace, change.image.name, action, outcome.detail,
                      change.warning if action != ACTION_FAILED else None, outcome.interrupted)


def status_of(results: Sequence[ItemResult]) -> Status:
    """success when every item ended as asked; error when every one failed; else partial."""
    if all(r.done for r in results):
        return STATUS_SUCCESS
    return STATUS_ERROR if all(r.failed for r in results) else STATUS_PARTIAL

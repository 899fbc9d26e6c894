"""Build the rows of `pinctl ls`: every reference, its image, and why the runtime keeps it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Iterable, Optional, Protocol, Sequence, runtime_checkable

from pinctl import refs
from pinctl.backends import ImageStore
from pinctl.errors import UsageError
from pinctl.model import (
    CRI_NAMESPACE,
    DRIFT_UNCOVERED,
    DRIFT_UNLABELLED,
    REASON_CONTAINERD_CONFIG,
    REASON_CRIO_CONFIG,
    REASON_CRIO_PIN,
    REASON_IGNORED,
    REASON_INEFFECTIVE_LABEL,
    REASON_LABEL,
    REASON_PATTERN,
    REASON_SANDBOX,
    REASON_UNLABELLED_SANDBOX,
    ConfigPin,
    Drift,
    ImageRow,
    Reason,
    ResolvedTarget,
    StoredImage,
)
from pinctl.pins import labels as pin_labels
from pinctl.pins import patterns
from pinctl.pins import sandbox as sandbox_rules
from pinctl.pins.policy import Policy, coverage


@dataclass
class Listing:
    rows: list[ImageRow] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)


@runtime_checkable
class ConfigPinned(Protocol):
    """A store that can say what its containerd's own config pins (containerd 2.x's pinned_images)."""

    def config_pins(self) -> list[ConfigPin]: ...


def config_pins(store: object) -> list[ConfigPin]:
    """The pinned_images entries of the store's containerd; none for a store that cannot say."""
    return store.config_pins() if isinstance(store, ConfigPinned) else []


@runtime_checkable
class CriSized(Protocol):
    """A store whose runtime's CRI serves the CRI's namespace and says what each image weighs."""

    def cri_image_sizes(self) -> ContextManager[Callable[[], Optional[dict[str, int]]]]: ...


def use_cri_sizes(store: ImageStore, namespace: str, listing: Listing,
                  cri_sizes: Callable[[], Optional[dict[str, int]]]) -> None:
    """In the CRI's namespace, SIZE is the CRI's figure for the image: the one the kubelet's GC
    counts (gc plan's too). A row whose image the CRI does not list has its manifests read again
    (the answer kept from an earlier run may be of content since removed); if the CRI still does
    not list it (not yet, or it cannot read it), the row keeps the figure its manifests give."""
    sizes = cri_sizes()
    if sizes is None or not listing.rows:
        return
    unlisted = [row for row in listing.rows if row.image_id not in sizes]
    if unlisted:
        again = store.resolve_targets(namespace, {row.target.digest for row in unlisted}, again=True)
        read_again = {row.ref for row in unlisted}
        listing.errors = [e for e in listing.errors if e["ref"] not in read_again]
        for row in unlisted:
            _resolved_into(row, again[row.target.digest], listing)
    for row in listing.rows:
        size = sizes.get(row.image_id or "")
        if size is not None:
            row.size = size


def list_namespace(
    store: ImageStore,
    namespace: str,
    sandbox: Optional[str],
    runtime_version: Optional[str] = None,
    policy: Optional[Policy] = None,
    pins: Sequence[ConfigPin] = (),
    runtime_sizes: bool = True,
) -> Listing:
    in_cri = namespace == CRI_NAMESPACE
    if in_cri and runtime_sizes and isinstance(store, CriSized):
        with store.cri_image_sizes() as cri_sizes:  # asked first: the CRI answers while the records are read
            listing = build_rows(store, namespace, store.list_images(namespace))
            use_cri_sizes(store, namespace, listing, cri_sizes)
    else:
        listing = build_rows(store, namespace, store.list_images(namespace))
    annotate_pins(listing.rows, sandbox if in_cri else None, runtime_version if in_cri else None,
                  pins if in_cri else ())
    annotate_policy(listing.rows, policy or Policy())
    return listing


def build_rows(store: ImageStore, namespace: str, images: Sequence[StoredImage]) -> Listing:
    """Rows with image IDs and sizes from the manifests (as kept by digest); pins not yet worked out."""
    resolved = store.resolve_targets(namespace, (img.target.digest for img in images))
    listing = Listing()
    for img in images:
        row = ImageRow(namespace=namespace, ref=img.name, image_id=None, target=img.target, size=0,
                       labels=img.labels, created=img.created)
        listing.rows.append(row)
        _resolved_into(row, resolved[img.target.digest], listing)
    return listing


def _resolved_into(row: ImageRow, target: ResolvedTarget, listing: Listing) -> None:
    row.image_id = target.image_id
    row.size = row.target.size + target.size
    if target.error:
        listing.errors.append({"namespace": row.namespace or "", "ref": row.ref, "message": target.error})


def list_images(store: ImageStore, namespaces: Sequence[str], policy: Optional[Policy] = None,
                runtime_sizes: bool = True) -> Listing:
    sandbox = store.sandbox_image()
    in_cri = CRI_NAMESPACE in namespaces
    runtime_version = store.version() if in_cri else None
    pins = config_pins(store) if in_cri else []
    listing = Listing()
    for namespace in namespaces:
        part = list_namespace(store, namespace, sandbox, runtime_version, policy, pins, runtime_sizes)
        listing.rows.extend(part.rows)
        listing.errors.extend(part.errors)
    listing.rows.sort(key=lambda row: (row.namespace, row.ref))
    return listing


def group_by_image(rows: Iterable[ImageRow]) -> dict[tuple[Optional[str], str], list[ImageRow]]:
    groups: dict[tuple[Optional[str], str], list[ImageRow]] = defaultdict(list)
    for row in rows:
        groups[(row.namespace, row.group_key)].append(row)
    return groups


def annotate_pins(
    rows: Sequence[ImageRow], sandbox: Optional[str], runtime_version: Optional[str] = None,
    pins: Sequence[ConfigPin] = (),
) -> None:
    """Mark every ref of an image pinned when any ref of it carries the label, as the CRI does.

    The CRI reads the label alone, for its sandbox image too: that reason says pinctl wants the
    image kept, and, when it is unlabelled and this containerd will not label it again, a second
    reason says why (pins/sandbox.py). With the version of a containerd whose CRI ignores pins,
    nothing counts as pinned and the reasons say so. pins (containerd 2.x's own pinned_images)
    explain a label containerd puts there itself; they pin nothing by themselves either.
    """
    sandbox_ref = _normalized_or_none(sandbox)
    sandbox_last = _last_name(sandbox_ref) if sandbox_ref else ""
    # The sandbox entry is said by the sandbox reason already.
    own = [pin for pin in pins if not pin.is_sandbox]
    entry = next((pin.ref for pin in pins if pin.is_sandbox), sandbox)
    honoured = runtime_version is None or pin_labels.cri_honours_pins(runtime_version)
    for group in _groups_with_reasons(rows, sandbox_ref, sandbox_last, {pin.ref for pin in own}):
        reasons = _group_reasons(group, sandbox_ref, sandbox_last, own)
        if not reasons:  # a key that looked like a pin's, and was not
            continue
        kinds = {reason.kind for reason in reasons}
        pinned = honoured and REASON_LABEL in kinds
        if not honoured and kinds & {REASON_LABEL, REASON_SANDBOX}:
            reasons.append(Reason(REASON_IGNORED, pin_labels.ignored_detail(runtime_version or "")))
        elif REASON_SANDBOX in kinds and not pinned and runtime_version is not None:
            rule = sandbox_rules.unlabelled_rule(runtime_version, entry, [row.ref for row in group])
            if rule:
                reasons.append(Reason(REASON_UNLABELLED_SANDBOX, rule))
        for row in group:
            row.pinned = pinned
            row.reasons = list(reasons)


def _groups_with_reasons(rows: Sequence[ImageRow], sandbox_ref: Optional[str], sandbox_last: str,
                         pinned_names: set[str]) -> list[list[ImageRow]]:
    """The rows of each image that may have a reason, in one pass that leaves every other row
    with none: a node's records are many, and those with a pin's label key, the sandbox image's
    name or a config entry's name few (grouping all 10,000 images took 30 ms, this pass 4-6 ms)."""
    keys: set[tuple[Optional[str], str]] = set()
    pin_key = pin_labels.pin_key
    for row in rows:
        row.pinned, row.reasons = False, []
        labels, ref = row.labels, row.ref
        if ((labels and any(map(pin_key, labels))) or ref in pinned_names
                or (sandbox_ref and _names_sandbox(ref, sandbox_ref, sandbox_last))):
            keys.add((row.namespace, row.group_key))
    if not keys:
        return []
    return list(group_by_image(row for row in rows if (row.namespace, row.group_key) in keys).values())


def annotate_policy(rows: Sequence[ImageRow], policy: Policy) -> None:
    """Add every pattern that covers an image, and where pins and policy disagree (drift)."""
    by_image = coverage(policy, rows).by_image
    for row in rows:
        hits = by_image.get(row.group_key) if by_image else None
        if hits:
            row.reasons.extend(Reason(REASON_PATTERN, policy.patterns[i].text, policy.patterns[i].source) for i in hits)
        # Most rows of a node have no reason at all: neither pinned nor covered is no drift.
        row.drift = _drift(row, bool(hits)) if row.reasons else None


_RUNTIME_KEEPS = frozenset((REASON_SANDBOX, REASON_CONTAINERD_CONFIG, REASON_CRIO_CONFIG))
_LABELLED = frozenset((REASON_LABEL, REASON_CRIO_PIN))


def _drift(row: ImageRow, covered: bool) -> Optional[Drift]:
    # The runtime keeps (and labels) its sandbox image and its own pinned_images itself:
    # neither direction is drift. On CRI-O, pinctl's own drop-in items are its labels.
    kinds = {r.kind for r in row.reasons}
    if kinds & _RUNTIME_KEEPS:
        return None
    labelled = bool(kinds & _LABELLED)
    if covered and not labelled:
        return DRIFT_UNLABELLED
    if labelled and not covered:
        return DRIFT_UNCOVERED
    return None


def _group_reasons(group: Sequence[ImageRow], sandbox_ref: Optional[str], sandbox_last: str,
                   pins: Sequence[ConfigPin] = ()) -> list[Reason]:
    reasons: list[Reason] = []
    ineffective: list[Reason] = []
    for row in group:  # one pass: a node's records are many, their labels few
        labels = row.labels
        if labels:
            if pin_labels.carries_pin(labels):
                reasons.append(Reason(REASON_LABEL, row.ref))
            ineffective.extend(Reason(REASON_INEFFECTIVE_LABEL, f"{row.ref}: {p}")
                               for p in pin_labels.ineffective_pins(labels))
    if sandbox_ref and any(_names_sandbox(row.ref, sandbox_ref, sandbox_last) for row in group):
        reasons.append(Reason(REASON_SANDBOX, sandbox_ref))
    if pins:
        reasons += [Reason(REASON_CONTAINERD_CONFIG, pin.where) for pin in config_pins_naming(group, pins)]
    return reasons + ineffective


def config_pins_naming(group: Iterable[ImageRow], pins: Sequence[ConfigPin]) -> list[ConfigPin]:
    """The entries that name a reference of this image, in the config's order. containerd compares
    an entry with the record's name as a plain string (no normalisation: a short or tagless entry
    names nothing, containerd issue 13314), so this does too."""
    names = {row.ref for row in group}
    return [pin for pin in pins if pin.ref in names]


def _names_sandbox(ref: str, sandbox_ref: str, last: str) -> bool:
    # Normalising adds a registry, a library/ and a tag, never a repository's last name (last): a
    # reference without that name is not the sandbox image, and needs no normalising to say so.
    return last in ref and _normalized_or_none(ref) == sandbox_ref


def _last_name(sandbox_ref: str) -> str:
    """The sandbox image's repository's last name: worked out once, asked of every image."""
    return sandbox_ref.rpartition("/")[2].partition(":")[0].partition("@")[0]


def _normalized_or_none(name: Optional[str]) -> Optional[str]:
    if not name:
        return None
    try:
        return refs.normalize(name)
    except UsageError:
        return name


def filter_rows(
    rows: Sequence[ImageRow],
    terms: Sequence[str],
    pinned: Optional[bool],
    drift_only: bool = False,
    dialect: str = "pinctl",
) -> list[ImageRow]:
    """Rows matching any term (a ref, an image ID prefix or a pattern) and the pinned and drift filters."""
    kept = [row for row in rows if (pinned is None or row.pinned == pinned) and (row.drift or not drift_only)]
    if not terms:
        return kept
    matchers = [_matcher(term, dialect) for term in terms]
    return [row for row in kept if any(match(row) for match in matchers)]


def unmatched_terms(rows: Sequence[ImageRow], terms: Sequence[str], dialect: str = "pinctl") -> list[str]:
    """The terms that match no row at all (before the pinned and drift filters), each with the
    name it was read as when that differs: 'tools:1 (docker.io/library/tools:1)'."""
    missing = []
    for term in terms:
        match = _matcher(term, dialect)
        if not any(match(row) for row in rows):
            read_as = "" if patterns.is_pattern(term) else refs.parse_selector(term).ref
            missing.append(f"{term} ({read_as})" if read_as and read_as != term else term)
    return missing


def _matcher(term: str, dialect: str) -> Callable[[ImageRow], bool]:
    if patterns.is_pattern(term):
        pattern = patterns.parse_pattern(term, dialect, "command line")
        return lambda row: patterns.matches(pattern, row.ref)
    selector = refs.parse_selector(term)

    def match(row: ImageRow) -> bool:
        return selector.names((row.ref,)) or selector.has_id((row.image_id or "", row.digest))

    return match


def id_matches(row: ImageRow, hex_prefix: str) -> bool:
    return refs.Selector(hex_prefix, id_prefix=hex_prefix).has_id((row.image_id or "", row.digest))

"""check: what pinctl expects the kubelet to be told, against what the CRI runtime tells it,
with the likely cause and fix of every difference."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Final, Literal, Optional, Protocol, Sequence, get_args

from pinctl.check import credentials as kubelet_credentials
from pinctl.check import dockerd
from pinctl.check.credentials import Judgement, KubeletPolicy
from pinctl.node.crio import RELOAD_ANY_CRIO
from pinctl.model import (
    CRI_NAMESPACE,
    RUNTIME_CONTAINERD,
    RUNTIME_CRIO,
    RUNTIME_DOCKER,
    REASON_CRIO_CONFIG,
    REASON_CRIO_PIN,
    REASON_DOCKER_LABEL,
    REASON_INEFFECTIVE_LABEL,
    REASON_LABEL,
    REASON_PATTERN,
    REASON_SANDBOX,
    REASON_UNLABELLED_SANDBOX,
    WANTED_KINDS,
    ConfigPin,
    ImageRow,
    Reason,
    ReasonKind,
)
from pinctl.pins import containerd_entries
from pinctl.pins import crio as crio_pins
from pinctl.pins import labels as pin_labels

if TYPE_CHECKING:
    from pinctl.backends.cri import CriImage, Listing, RuntimeVersion
    from pinctl.check.pull_records import RecordsRead
    from pinctl.pins.containerd_entries import DeadEntry
    from pinctl.backends.cri_dockerd import CriDockerd
    from pinctl.node.crio import CrioSite

# The runtimes' names live in pinctl.model; commands.check still reads this one here.
DOCKER = RUNTIME_DOCKER
# What CRI-O pins by itself, as its files say now: if its CRI disagrees, it has not re-read them.
CRIO_OWN: tuple[ReasonKind, ...] = (REASON_CRIO_CONFIG, REASON_CRIO_PIN, REASON_SANDBOX)
# check --wait asks again this often: the CRI plugin sees a label change within about a second.
POLL_SECONDS = 1.0

# Why pinctl and the runtime disagree on an image, as a closed set: metrics count by it, so it
# must not carry names or versions (CheckItem.cause says those).
Mismatch = Literal["labels-ignored", "wrong-namespace", "not-caught-up", "ineffective-label", "config-label-unread",
                   "pattern-only", "unexplained-pin", "unknown-image", "not-reloaded", "overridden",
                   "unlabelled-sandbox", "dead-entry"]
MISMATCH_LABELS_IGNORED: Final = "labels-ignored"  # the runtime reports no pins from labels (old containerd, cri-dockerd, CRI-O)
MISMATCH_WRONG_NAMESPACE: Final = "wrong-namespace"  # labelled in a namespace the CRI does not read
MISMATCH_NOT_CAUGHT_UP: Final = "not-caught-up"  # labelled where the CRI reads; it has not said pinned yet
MISMATCH_INEFFECTIVE_LABEL: Final = "ineffective-label"
MISMATCH_CONFIG_LABEL_UNREAD: Final = "config-label-unread"  # a Docker config label the runtime does not pin by
MISMATCH_PATTERN_ONLY: Final = "pattern-only"  # a policy pattern the runtime does not know
MISMATCH_UNEXPLAINED_PIN: Final = "unexplained-pin"  # pinned by the runtime, nothing pinctl reads says why
MISMATCH_UNKNOWN_IMAGE: Final = "unknown-image"  # a name asked about that the runtime does not know
MISMATCH_NOT_RELOADED: Final = "not-reloaded"  # CRI-O's files say otherwise than its CRI: not re-read since
MISMATCH_OVERRIDDEN: Final = "overridden"  # a CRI-O drop-in sorting after pinctl's replaces its pinned_images
# containerd's sandbox image without the label, which that containerd will not put back (pins/sandbox.py)
MISMATCH_UNLABELLED_SANDBOX: Final = "unlabelled-sandbox"
# An entry of containerd 2.x's own pinned_images written so that containerd matches no record by
# it (it compares the text with the record's name), beside the image it was meant to pin.
MISMATCH_DEAD_ENTRY: Final = "dead-entry"
MISMATCHES: tuple[Mismatch, ...] = get_args(Mismatch)
MISMATCH_NAMED: dict[str, Mismatch] = {name: name for name in MISMATCHES}


@dataclass
class CheckItem:
    image_id: str
    refs: list[str]
    desired: bool
    cri_pinned: bool
    reasons: list[Reason] = field(default_factory=list)
    cause: Optional[str] = None
    fix: Optional[str] = None
    mismatch: Optional[Mismatch] = None
    # The names check was asked about that are this image (as a pod would write them).
    asked: list[str] = field(default_factory=list)
    # Its repository digests as the CRI lists them (name@sha256:...).
    digests: list[str] = field(default_factory=list)
    # What the kubelet does with the image on disk, name by name (pinned and wanted images only).
    kubelet: list[Judgement] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        return self.cause is None

    @property
    def kubelet_warning(self) -> Optional[Judgement]:
        """The name the kubelet will not run from disk for every pod, if any (the worst)."""
        found = kubelet_credentials.worst(self.kubelet)
        return found if found is not None and kubelet_credentials.warns(found) else None

    def pod_names(self) -> list[str]:
        """The names a pod may use for it: those asked, then the runtime's (an image ID is none)."""
        return [name for name in dict.fromkeys([*self.asked, *self.refs]) if name != self.image_id]


@dataclass(frozen=True)
class KubeletView:
    """The kubelet's credential verification as check read it: its policy, the config file it came
    from (None: none read, its defaults), its records' directory, and each problem in one line."""

    policy: KubeletPolicy
    config: Optional[str]
    records: str
    problems: list[str] = field(default_factory=list)


@dataclass
class CheckResult:
    endpoint: str
    runtime: RuntimeVersion
    items: list[CheckItem]
    kubelet: Optional[KubeletView] = None

    @property
    def agree(self) -> bool:
        return all(item.agrees for item in self.items)

    @property
    def kubelet_warnings(self) -> int:
        return sum(item.kubelet_warning is not None for item in self.items)


def check(
    rows: Sequence[ImageRow],
    listed: Sequence[CriImage],
    runtime: RuntimeVersion,
    endpoint: str,
    unknown: Sequence[str] = (),
    frontend: Optional[CriDockerd] = None,
    crio: Optional[CrioSite] = None,
    config_pins: Sequence[ConfigPin] = (),
) -> CheckResult:
    """unknown: references asked about that the runtime does not know (ImageStatus found nothing);
    frontend: the cri-dockerd process behind a runtime that names itself docker, when found;
    crio: what CRI-O's files say beyond the rows (its reload command, drop-ins overriding pinctl's);
    config_pins: containerd 2.x's own pinned_images entries (those that pin nothing are named)."""
    index = _Index(rows)
    dead = ({entry.fix: entry for entry in containerd_entries.dead_entries(config_pins) if entry.fix}
            if runtime.name == RUNTIME_CONTAINERD and pin_labels.has_pinned_images(runtime.version) else {})
    site = _Site(runtime, endpoint, frontend, crio, dead)
    items = [_item(cri, index.matching(cri), site) for cri in listed]
    items += [CheckItem("", [ref], False, False, cause="the runtime knows no image by this name",
                        fix="check the name with pinctl ls, or pull the image", mismatch=MISMATCH_UNKNOWN_IMAGE)
              for ref in unknown]
    # Every item has a name (an image the runtime lists by none has its ID as refs[0]).
    return CheckResult(endpoint, runtime, sorted(items, key=lambda i: (i.refs[0], i.image_id)))


class RuntimeImages(Protocol):
    """What check asks of a CRI runtime (CriRuntime; a fake in unit tests)."""

    endpoint: str

    def prefetch(self, *listings: Listing) -> None: ...

    def list_images(self) -> list[CriImage]: ...

    def image_status(self, ref: str) -> Optional[CriImage]: ...


def check_runtime(
    rows: Sequence[ImageRow], runtime: RuntimeImages, version: RuntimeVersion, refs: Sequence[str] = (),
    frontend: Optional[CriDockerd] = None, crio: Optional[CrioSite] = None, config_pins: Sequence[ConfigPin] = (),
    listed: Optional[Sequence[CriImage]] = None,
) -> CheckResult:
    """Every image the runtime lists (listed: that list, when the caller took it already) or,
    given refs, those asked one by one with ImageStatus. CRI-O's ImageStatus refuses a short
    name (its registries.conf enforces them): as pin and ls do there, check takes one as the full name."""
    if crio is not None:
        refs = [crio_pins.normalised_name(ref) for ref in refs]
    if not refs:
        listed = runtime.list_images() if listed is None else listed
        return check(rows, listed, version, runtime.endpoint, (), frontend, crio, config_pins)
    statuses = {ref: runtime.image_status(ref) for ref in refs}
    listed = list({s.id: s for s in statuses.values() if s is not None}.values())
    unknown = [ref for ref, status in statuses.items() if status is None]
    result = check(rows, listed, version, runtime.endpoint, unknown, frontend, crio, config_pins)
    for item in result.items:
        item.asked = [ref for ref, status in statuses.items() if status is not None and status.id == item.image_id]
    return result


# Reads the kubelet's records of these image IDs and names (check/pull_records.read_records, bound
# to the root dir; a fake in unit tests).
RecordsReader = Callable[[Sequence[str], Sequence[str]], "RecordsRead"]


def judge_kubelet(result: CheckResult, policy: KubeletPolicy, config: Optional[str], policy_problems: Sequence[str],
                  read_records: RecordsReader) -> None:
    """Set what the kubelet does with each image pinctl wants kept or the runtime pins, by each
    name a pod may use for it; the records of those images alone are read."""
    judged = [item for item in result.items if item.image_id and (item.desired or item.cri_pinned)]
    names = [name for item in judged for name in item.pod_names()]
    # A record under a repository digest never counts, but says the kubelet pulled the image.
    records = read_records([key for item in judged for key in (item.image_id, *item.digests)], names)
    for item in judged:
        pulled = records.pulled.get(item.image_id)
        misfiled = next((found for digest in item.digests
                         if isinstance(found := records.pulled.get(digest), kubelet_credentials.PulledRecord)), None)
        item.kubelet = [kubelet_credentials.judge(policy, name, pulled, records.intents.get(name), misfiled)
                        for name in item.pod_names()]
    result.kubelet = KubeletView(policy, config, records.directory, [*policy_problems, *records.problems])


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def wait_for_agreement(
    read: Callable[[], CheckResult],
    wait: float,
    clock: Clock = SystemClock(),
    progress: Callable[[CheckResult, float], None] = lambda _result, _seconds_left: None,
) -> tuple[CheckResult, float]:
    """read() again until pinctl and the runtime agree or wait seconds have passed: a runtime may
    lag a label change. Returns the last result and the seconds it took; progress hears of each
    disagreeing result with the seconds left."""
    start = clock.now()
    deadline = start + wait
    while True:
        result = read()
        now = clock.now()
        if result.agree or now >= deadline:
            return result, now - start
        progress(result, deadline - now)
        clock.sleep(min(POLL_SECONDS, deadline - now))


class _Index:
    """pinctl's rows by image ID, manifest digest and name: the CRI reports one of each."""

    def __init__(self, rows: Sequence[ImageRow]) -> None:
        # Built once per check over every row (20,000 at 10,000 images): plain loops, no
        # per-row set or setdefault list.
        self.by_key: dict[str, list[ImageRow]] = {}
        by_key = self.by_key
        for row in rows:
            image_id, digest, ref = row.image_id, row.target.digest, row.ref
            for key in (image_id, digest if digest != image_id else "", ref if ref not in (image_id, digest) else ""):
                if key:
                    bucket = by_key.get(key)
                    if bucket is None:
                        by_key[key] = [row]
                    else:
                        bucket.append(row)

    def matching(self, cri: CriImage) -> list[ImageRow]:
        get = self.by_key.get
        found: dict[int, ImageRow] = {}
        for key in (cri.id, *cri.repo_tags, *cri.repo_digests):
            for row in get(key, ()):
                found[id(row)] = row
        return list(found.values())


@dataclass(frozen=True)
class _Site:
    """The runtime being compared: its CRI name and version, where it answers, what fronts it."""

    runtime: RuntimeVersion
    endpoint: str
    frontend: Optional[CriDockerd]
    crio: Optional[CrioSite] = None
    # containerd's pinned_images entries that pin nothing, by the name that would work.
    dead: dict[str, DeadEntry] = field(default_factory=dict)


def _item(cri: CriImage, rows: Sequence[ImageRow], site: _Site) -> CheckItem:
    reasons = _reasons(rows)
    desired = any(r.kind in WANTED_KINDS for r in reasons)
    refs = list(cri.repo_tags or cri.repo_digests or (cri.id,))
    item = CheckItem(cri.id, refs, desired, cri.pinned, reasons)
    _diagnose(item, cri, rows, site)
    # Only the kubelet's judgement reads the digests, and it judges wanted and pinned images alone.
    if item.desired or item.cri_pinned:
        item.digests = _digest_names(cri)
    return item


def _diagnose(item: CheckItem, cri: CriImage, rows: Sequence[ImageRow], site: _Site) -> None:
    """The mismatch, cause and fix of an image pinctl and the runtime disagree on."""
    desired, refs, reasons = item.desired, item.refs, item.reasons
    if desired and not cri.pinned:
        item.mismatch, item.cause, item.fix = _why_not_pinned(reasons, site, refs[0])
    elif cri.pinned and not desired and site.runtime.name == RUNTIME_DOCKER:
        # cri-dockerd pins its sandbox image and what its own flags name, and nothing else.
        item.reasons.append(dockerd.own_pin(cri, rows, site.frontend))
        item.desired = True
    elif cri.pinned and not desired and site.runtime.name == RUNTIME_CRIO:
        item.mismatch, item.cause, item.fix = _crio_not_reloaded(
            site.crio, "CRI-O pins it, but its files as they are now do not")
    elif not cri.pinned and site.dead and (entry := next((site.dead[ref] for ref in refs if ref in site.dead), None)):
        item.desired = True
        item.mismatch = MISMATCH_DEAD_ENTRY
        item.cause = (f"pinned_images.{entry.pin.name} = {entry.pin.ref!r} ({entry.pin.place}) pins nothing on "
                      f"containerd {site.runtime.version}: {entry.reason}")
        item.fix = f"write it as {entry.fix!r} in {entry.pin.place}, then restart containerd (or: pinctl pin {refs[0]})"
    elif not cri.pinned and site.crio is not None and cri.id in site.crio.cancelled:
        item.desired = True
        item.mismatch, item.cause, item.fix = _crio_overridden(site.crio, f"pinctl's item {site.crio.cancelled[cri.id]!r}")
    elif cri.pinned and not desired:
        item.mismatch = MISMATCH_UNEXPLAINED_PIN
        item.cause = "the CRI says pinned but nothing pinctl reads explains it"
        item.fix = ("it is likely the runtime's sandbox image or in its own pinned_images config; "
                    "show them with --containerd-config")


def _digest_names(cri: CriImage) -> list[str]:
    """Its repository digests as the CRI lists them, and each of its names with those digests:
    Docker lists one repository's digest only, where a pull answers the pulled name's."""
    digests = {name.split("@", 1)[1] for name in cri.repo_digests if "@" in name}
    made = [f"{kubelet_credentials.repository(tag)}@{digest}" for tag in cri.repo_tags for digest in sorted(digests)]
    return list(dict.fromkeys([*cri.repo_digests, *made]))


def _reasons(rows: Sequence[ImageRow]) -> list[Reason]:
    """Each distinct reason, with the namespace of a label kept in its detail's reach."""
    if not any(row.reasons for row in rows):  # most images: nothing pins them
        return []
    seen: dict[tuple[str, str, Optional[str]], Reason] = {}
    for row in rows:
        for reason in row.reasons:
            in_namespace = reason.kind in (REASON_LABEL, REASON_INEFFECTIVE_LABEL)
            detail = f"{row.namespace}/{reason.detail}" if in_namespace else reason.detail
            seen.setdefault((reason.kind, detail, reason.source), Reason(reason.kind, detail, reason.source))
    return list(seen.values())


def _label_namespaces(reasons: Sequence[Reason]) -> set[str]:
    return {r.detail.split("/", 1)[0] for r in reasons if r.kind == REASON_LABEL}


# What a disagreement is, in words (cause) and as a command (fix).
Diagnosis = tuple[Mismatch, str, str]


def _why_not_pinned(reasons: Sequence[Reason], site: _Site, ref: str) -> Diagnosis:
    kinds = {r.kind for r in reasons}
    runtime = site.runtime
    if runtime.name == RUNTIME_DOCKER:
        mismatch, cause, fix = dockerd.cause(kinds, site.frontend, site.endpoint)
        return MISMATCH_NAMED[mismatch], cause, fix
    if runtime.name == RUNTIME_CRIO:
        return _crio_cause(kinds, site.crio)
    return _containerd_cause(reasons, kinds, runtime, ref)


def _crio_cause(kinds: set[ReasonKind], crio: Optional[CrioSite]) -> Diagnosis:
    """Why CRI-O does not pin an image pinctl expects pinned. Its files are read, so what they pin
    and its CRI does not is a reload not yet done, or refused; a pattern alone is pinctl's, not CRI-O's."""
    if kinds & set(CRIO_OWN):
        return _crio_not_reloaded(crio, "its files pin the image, its CRI does not")
    if crio is not None and crio.overriding:
        return _crio_overridden(crio, "the policy's pattern")
    if REASON_LABEL in kinds or REASON_INEFFECTIVE_LABEL in kinds:
        return (MISMATCH_LABELS_IGNORED, "CRI-O ignores image labels: it pins what its pinned_images names",
                "pinctl sync (pinctl writes its own CRI-O drop-in and reloads CRI-O)")
    return (MISMATCH_PATTERN_ONLY, "pattern known only to pinctl: CRI-O pins what its own pinned_images names",
            "pinctl sync (pinctl writes its own CRI-O drop-in and reloads CRI-O)")


def _crio_not_reloaded(crio: Optional[CrioSite], what: str) -> Diagnosis:
    """CRI-O's CRI says otherwise than its files: not re-read since they changed, or its last
    reload was refused (then its reason, from its log, and the fix is the file it names)."""
    reload = crio.reload if crio else RELOAD_ANY_CRIO
    if crio is not None and crio.refusal:
        return (MISMATCH_NOT_RELOADED, f"{what}: CRI-O refused its last reload: {crio.refusal}",
                f"mend the file CRI-O names, then {reload}")
    return (MISMATCH_NOT_RELOADED, f"{what}: CRI-O has not re-read its configuration since it changed", reload)


def _crio_overridden(crio: CrioSite, what: str) -> Diagnosis:
    later = ", ".join(crio.overriding)
    return (MISMATCH_OVERRIDDEN, f"{later} sorts after pinctl's drop-in {crio.dropin} and sets pinned_images, "
            f"which replaces pinctl's list, so {what} pins nothing",
            f"move its pinned_images into a file sorting before {crio.dropin}, then pinctl sync")


def _containerd_cause(
    reasons: Sequence[Reason], kinds: set[ReasonKind], runtime: RuntimeVersion, ref: str
) -> Diagnosis:
    if not pin_labels.cri_honours_pins(runtime.version):
        return (MISMATCH_LABELS_IGNORED,
                f"the runtime ignores labels: containerd {runtime.version} reports no pins to the kubelet",
                "upgrade containerd to 1.6.25+ or 1.7.10+")
    labelled_in = _label_namespaces(reasons)
    if labelled_in and CRI_NAMESPACE not in labelled_in:
        where = ", ".join(sorted(labelled_in))
        return (MISMATCH_WRONG_NAMESPACE, f"the label is in namespace {where}, but containerd's CRI reads {CRI_NAMESPACE}",
                f"pinctl pin -n {CRI_NAMESPACE} {ref}")
    if labelled_in:
        return (MISMATCH_NOT_CAUGHT_UP, "the label is there but the CRI has not caught up yet",
                "wait: pinctl check --wait 30 (the kubelet itself refreshes every 5 minutes)")
    if REASON_INEFFECTIVE_LABEL in kinds:
        bad = next(r.detail for r in reasons if r.kind == REASON_INEFFECTIVE_LABEL)
        return (MISMATCH_INEFFECTIVE_LABEL, f"ineffective label: {bad}", f"pinctl pin {ref}")
    unlabelled = next((r.detail for r in reasons if r.kind == REASON_UNLABELLED_SANDBOX), None)
    if unlabelled:
        sandbox = next((r.detail for r in reasons if r.kind == REASON_SANDBOX), ref)
        return (MISMATCH_UNLABELLED_SANDBOX, f"the CRI sandbox image, unpinned: {unlabelled}", f"pinctl pin {sandbox}")
    if REASON_SANDBOX in kinds and REASON_PATTERN not in kinds:
        # 2.x labels the record its pinned_images.sandbox names on every change: not yet, here.
        return (MISMATCH_NOT_CAUGHT_UP, "the CRI sandbox image: containerd labels it from its pinned_images.sandbox, "
                "and has not yet", "wait: pinctl check --wait 30")
    if REASON_DOCKER_LABEL in kinds and REASON_PATTERN not in kinds:
        return (MISMATCH_CONFIG_LABEL_UNREAD, "containerd does not read Docker config labels", f"pinctl pin {ref}")
    # containerd 1.x has no pinned_images (config export refuses it): labels are the only way.
    also = " (or pinctl config export --for containerd)" if pin_labels.has_pinned_images(runtime.version) else ""
    return (MISMATCH_PATTERN_ONLY, "pattern known only to pinctl: containerd reads labels, not patterns",
            f"pinctl sync{also}")


def annotate_cri(rows: Sequence[ImageRow], listed: Sequence[CriImage]) -> None:
    """Set each row's cri_pinned from the CRI image it is (by ID, manifest digest or name)."""
    index = _Index(rows)
    for cri in listed:
        for row in index.matching(cri):
            row.cri_pinned = cri.pinned

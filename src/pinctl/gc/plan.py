"""gc plan and prune: the kubelet's image GC (pinctl.gc.model) fed with what the runtime shows,
and a prune that deletes the way it would but never what must stay.

A GC domain is one runtime with its own images, containers and filesystem: the CRI runtime
(what the kubelet collects; images in containerd's k8s.io) or Docker through its own API.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Callable, Final, Iterable, Literal, NamedTuple, Optional, Protocol, Sequence

from pinctl import refs as references
from pinctl.backends import procfs
from pinctl.errors import EXIT_ERROR, EXIT_OK, EngineError, PinctlError, UsageError
from pinctl.gc import estimate, eviction, refusals
from pinctl.gc import model as gcmodel
from pinctl.gc.estimate import ObservedContainer, ObservedImage
from pinctl.gc.kubelet import parse_duration, read_kubelet_config
from pinctl.gc.model import GcImage, GcPlan, GcSettings, ImageFs
from pinctl.gc.wanted import wanted_by_pinctl
from pinctl.node import crio_storage
from pinctl.pins import crio as crio_pins
from pinctl.model import CRI_NAMESPACE, PIN_LABEL, RUNTIME_CONTAINERD, RUNTIME_CRIO, RUNTIME_DOCKER, SOURCE_DOCKER
from pinctl.node.imagefs import fs_figures, statfs

if TYPE_CHECKING:
    from pinctl.backends.cri import CriContainer, CriImage, CriRuntime, RuntimeVersion
    from pinctl.backends.docker import DockerEngine
    from pinctl.gc.kubelet import SourcedGcSettings
    from pinctl.model import ImageRow
    from pinctl.node.sources import Node
    from pinctl.pins.policy import Policy

PruneAction = Literal["removed", "would-remove", "kept", "failed"]
PRUNE_REMOVED: Final = "removed"
PRUNE_WOULD_REMOVE: Final = "would-remove"  # a dry run's removal
PRUNE_KEPT: Final = "kept"
PRUNE_FAILED: Final = "failed"
# Docker's container states in the CRI's words: any of them keeps the image, as in the kubelet.
DOCKER_STATES: dict[str, gcmodel.ContainerState] = {
    "running": "running", "paused": "running", "restarting": "running", "created": "created",
    "exited": "exited", "dead": "exited", "removing": "exited",
}
CRI_STATES: dict[str, gcmodel.ContainerState] = {
    "created": "created", "running": "running", "exited": "exited", "unknown": "unknown",
}


@dataclass(frozen=True)
class Observation:
    """One domain as it is now: images, containers, filesystem figures and where they came from."""

    images: list[ObservedImage]
    containers: list[ObservedContainer]
    fs: ImageFs
    fs_source: str
    fs_path: str = ""  # what statfs read: measured again between prune's deletions
    # Image IDs -> why the runtime will refuse to delete them (gc/refusals.py), and where pinctl looked.
    refusals: dict[str, str] = field(default_factory=dict)
    refusals_source: str = ""


class GcDomain(Protocol):
    """One runtime whose images can be collected."""

    name: str

    def observe(self, rows: Sequence[ImageRow]) -> Observation:
        """Images (with the earliest record time pinctl's rows know), containers, filesystem."""

    def users_now(self, image: GcImage) -> list[str]:
        """Containers using the image right now, in any state (re-checked before a delete)."""

    def pinned_now(self, image: GcImage) -> Optional[bool]:
        """Whether the runtime pins the image now; None when it is gone."""

    def remove(self, image: GcImage) -> None:
        """Delete the image through the runtime that owns it."""


# Image IDs -> when each came to the node (Node.arrivals for the CRI's namespace).
Arrivals = Callable[[Sequence[str]], dict[str, datetime]]


def utc(seconds: Optional[float]) -> Optional[datetime]:
    return datetime.fromtimestamp(seconds, timezone.utc) if seconds is not None else None


def earliest_records(rows: Sequence[ImageRow]) -> dict[str, float]:
    """The earliest record's creation time by image ID and by target digest, for arrivals: one
    pass, no list per image."""
    created: dict[str, float] = {}
    for row in rows:
        moment = row.created
        if moment is None:
            continue
        image_id, digest = row.image_id, row.target.digest
        if image_id and moment < created.get(image_id, moment + 1):
            created[image_id] = moment
        if digest and digest != image_id and moment < created.get(digest, moment + 1):
            created[digest] = moment
    return created


def _id_records(rows: Sequence[ImageRow]) -> dict[str, datetime]:
    """When containerd's CRI made each image's sha256:<id> record in k8s.io: it makes one when
    it first sees an ID (a tag re-pointed to a new image brings a new one), and a label write
    leaves its creation time alone. No call: the rows hold them."""
    return {row.image_id: moment for row in rows
            if row.namespace == CRI_NAMESPACE and row.ref == row.image_id and (moment := utc(row.created)) is not None}


def _latest(arrival: Optional[datetime], earliest_record: Optional[datetime]) -> Optional[datetime]:
    """An image's arrival: its ID's (a re-pointed tag keeps an older record), but never before
    its earliest record (content still held from an image deleted moments ago is older)."""
    known = [moment for moment in (arrival, earliest_record) if moment is not None]
    return max(known) if known else None


def _digests(repo_digests: Sequence[str]) -> list[str]:
    return [name.partition("@")[2] for name in repo_digests]


def _earliest(created: dict[str, float], keys: Iterable[str]) -> Optional[datetime]:
    times = [created[key] for key in keys if key in created]
    return utc(min(times)) if times else None


class CriDomain:
    """The CRI runtime the kubelet talks to: its images, containers and image filesystem."""

    def __init__(self, runtime: CriRuntime, version: RuntimeVersion, arrivals: Optional[Arrivals] = None,
                 docker: Optional[DockerEngine] = None) -> None:
        self.runtime = runtime
        self.version = version
        # When each image ID came to the node, on containerd (Node.arrivals in k8s.io).
        self.arrivals = arrivals
        # Docker's own API, behind cri-dockerd: its containers outside Kubernetes make it refuse deletes.
        self.docker = docker
        self.name = f"{version} at {runtime.endpoint}"
        # Each container's image mounts as observe read them (a container's mounts never change).
        self._mounts: dict[str, tuple[str, ...]] = {}
        self.mountpoint = ""  # the image filesystem as observe found it
        self._taken: Optional[tuple[list[CriImage], list[CriContainer]]] = None

    def take_listings(self) -> None:
        """Take the runtime's images and containers now, for the next observe: asked before the
        node's records, they are answered first (the CRI keeps them in memory), and decoded here
        while containerd still encodes the records."""
        self._taken = (self.runtime.list_images(), self.runtime.list_containers())

    def observe(self, rows: Sequence[ImageRow]) -> Observation:
        taken, self._taken = self._taken, None
        filesystems = self.runtime.image_fs_info()
        if not filesystems:
            raise EngineError(f"{self.name} reports no image filesystem (ImageFsInfo)", "is this a CRI runtime?")
        mountpoint = procfs.as_served(self.runtime.endpoint, filesystems[0].mountpoint)
        listed_images = taken[0] if taken is not None else self.runtime.list_images()
        by_id = _id_records(rows) if self.version.name == RUNTIME_CONTAINERD else {}
        undated = [i.id for i in listed_images if i.id not in by_id]
        arrived = self._arrived(mountpoint, undated)
        created = earliest_records(rows) if undated else {}
        # An ID's own record is one of its image's records, so none of them is later: it is the
        # arrival, and the image's other records need not be looked at.
        images = [ObservedImage(i.id, i.size, (*i.repo_tags, *i.repo_digests), i.pinned,
                                by_id.get(i.id) or _latest(arrived.get(i.id),
                                                           _earliest(created, (i.id, *_digests(i.repo_digests)))))
                  for i in listed_images]
        listed = taken[1] if taken is not None else self.runtime.list_containers()
        containers = [ObservedContainer(c.id, c.image_ref, _state(c.state), c.image_id, c.image, c.name,
                                        c.pod_sandbox_id, c.image_mounts, created_at=utc(c.created_at),
                                        started_at=utc(c.started_at), finished_at=utc(c.finished_at))
                      for c in listed]
        self._mounts = {c.id: c.image_mounts for c in listed}
        self.mountpoint = mountpoint
        refused, refused_source = self._refusals(images, {c.id for c in listed})
        fs = statfs(mountpoint, "the CRI's ImageFsInfo mount point")
        return Observation(images, containers, fs, f"statfs of {mountpoint}, the CRI's ImageFsInfo mount point",
                           mountpoint, refused, refused_source)

    def _refusals(self, images: Sequence[ObservedImage], cri_containers: set[str]) -> tuple[dict[str, str], str]:
        """Which deletes the runtime will refuse, as far as pinctl can tell, and how it told."""
        name = self.version.name
        if name == RUNTIME_CRIO and (stored := crio_storage.storage_containers(self.mountpoint)) is not None:
            return refusals.predicted(name, images, storage=[c for c in stored if c.id not in cri_containers],
                                      where=os.path.dirname(self.mountpoint))
        if name == RUNTIME_DOCKER and self.docker is not None:
            try:
                listed = self.docker.list_containers()
            except EngineError as err:  # the plan stands without them, and says so
                return {}, f"not read: Docker's containers could not be listed ({err})"
            return refusals.predicted(name, images, docker=[c for c in listed if c.id not in cri_containers],
                                      where=self.docker.host)
        return refusals.predicted(name, images)

    def _arrived(self, mountpoint: str, image_ids: Sequence[str]) -> dict[str, datetime]:
        """When each image ID came to the node, as the runtime keeps it: the kubelet dates an
        image by its ID, so a tag re-pointed to a new image must not lend it the record's age."""
        if self.version.name == RUNTIME_CRIO:
            return crio_storage.arrival_times(mountpoint)  # its CRI has no times; its store has
        if self.version.name == RUNTIME_CONTAINERD and self.arrivals is not None:
            return self.arrivals(image_ids)
        return {}

    def users_now(self, image: GcImage) -> list[str]:
        """Containers naming the image, or mounting it as a volume: mounts are read (a status call
        each) only for containers created since observe, whose mounts are not known yet."""
        names = {image.id, *image.refs}
        listed = self.runtime.list_containers(skip_status=self._mounts.keys())
        return [c.name or c.id for c in listed
                if {c.image_id, c.image_ref, c.image, *(c.image_mounts or self._mounts.get(c.id, ()))} & names]

    def pinned_now(self, image: GcImage) -> Optional[bool]:
        status = self.runtime.image_status(image.id)
        return None if status is None else status.pinned

    def remove(self, image: GcImage) -> None:
        self.runtime.remove_image(image.id)


def cri_domain(node: Node, runtime: CriRuntime, version: RuntimeVersion) -> CriDomain:
    """The CRI runtime, its images dated by their arrival in k8s.io; behind cri-dockerd, Docker's API too."""
    docker = node.docker_engine() if version.name == RUNTIME_DOCKER else None
    return CriDomain(runtime, version, lambda ids: node.arrivals(CRI_NAMESPACE, ids), docker)


class DockerDomain:
    """Docker's own images, containers and data root, through Docker's API."""

    def __init__(self, engine: DockerEngine) -> None:
        self.engine = engine
        self.name = f"Docker at {engine.host}"

    def observe(self, rows: Sequence[ImageRow]) -> Observation:
        docker_created = earliest_records([row for row in rows if row.source == SOURCE_DOCKER])
        # Arrival on the node, like the kubelet's first detection: the record time in Docker's
        # containerd store; the classic store keeps none, so the build time (earlier) stands in.
        images = [ObservedImage(i.image_id, i.size, (*i.repo_tags, *i.repo_digests), False,
                                _earliest(docker_created, {i.image_id}) or utc(i.created))
                  for i in self.engine.list_images()]
        containers = [ObservedContainer(c.id, c.image_id, DOCKER_STATES.get(c.state, "unknown"),
                                        c.image_id, c.image, c.name, "", created_at=utc(c.created))
                      for c in self.engine.list_containers()]
        root = self.engine.root_dir_here()
        return Observation(images, containers, statfs(root, "Docker's data root"), f"statfs of {root}, Docker's data root",
                           root, refusals_source="none: every Docker container keeps its image here")

    def users_now(self, image: GcImage) -> list[str]:
        names = {image.id, *image.refs}
        return [c.name or c.id for c in self.engine.list_containers() if {c.image_id, c.image} & names]

    def pinned_now(self, image: GcImage) -> Optional[bool]:
        present = {i.image_id for i in self.engine.list_images()}
        return False if image.id in present else None

    def remove(self, image: GcImage) -> None:
        self.engine.remove_image(image.id)


def _state(value: str) -> gcmodel.ContainerState:
    return CRI_STATES.get(value, "unknown")


# --- gc plan ------------------------------------------------------------------------------------


@dataclass
class GcReport:
    """What `pinctl gc plan` shows: the modelled run and where every figure came from."""

    domain: str
    plan: GcPlan
    settings_sources: dict[str, str]
    fs_source: str
    kubelet_started: Optional[datetime]
    kubelet_started_source: str
    estimates: list[estimate.Estimate] = field(default_factory=list)
    eviction: Optional[eviction.EvictionReport] = None
    refusals_source: str = ""

    @property
    def exit_code(self) -> int:
        evicted = self.eviction.wanted_deleted if self.eviction is not None else ()
        return EXIT_ERROR if self.plan.wanted_deleted or evicted else EXIT_OK


NO_KUBELET = "no kubelet process found here: assumed to have run longer than the maximum age"
# The kubelet's own default for containerRuntimeEndpoint.
KUBELET_DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
DEFAULT_ROOT_DIR = "/var/lib/kubelet"


class KubeletStart(NamedTuple):
    """When the kubelet started and how that was found; its --root-dir (its nodefs) and whence."""

    started: Optional[datetime]
    source: str
    root_dir: str = DEFAULT_ROOT_DIR
    root_dir_source: str = "the kubelet's default --root-dir"


def gc_plan(domain: GcDomain, rows: Sequence[ImageRow], settings: SourcedGcSettings, now: datetime,
            usage: Optional[float] = None, kubelet: KubeletStart = KubeletStart(None, NO_KUBELET)) -> GcReport:
    """The kubelet's next GC run on domain, and its eviction manager's DeleteUnusedImages when a
    disk threshold is met; kubelet: the kubelet using it, as kubelet_start_time found it."""
    seen = domain.observe(rows)
    started = kubelet.started
    estimates = estimate.estimate_images(seen.images, seen.containers, now, kubelet_started=started)
    wanted = wanted_by_pinctl(seen.images, rows)

    def run(mode: gcmodel.GcMode) -> GcPlan:
        return gcmodel.plan_gc([e.image for e in estimates], [c.as_gc_container() for c in seen.containers],
                               settings.settings, seen.fs, now, kubelet_started=started, wanted=wanted,
                               simulated_usage=usage, mode=mode, refusals=seen.refusals)

    plan = run("threshold")
    evicting = _eviction_check(seen, plan, settings, kubelet)
    report = eviction.EvictionReport(evicting, run("all_unused") if evicting.met else None)
    return GcReport(domain.name, plan, settings.sources, seen.fs_source, started, kubelet.source, estimates, report,
                    seen.refusals_source)


def _eviction_check(seen: Observation, plan: GcPlan, settings: SourcedGcSettings,
                    kubelet: KubeletStart) -> eviction.EvictionCheck:
    """The disk thresholds against the image filesystem (as used: --usage applies) and the root
    dir's filesystem (the same figures when it is the same filesystem)."""
    found = eviction.thresholds(settings.eviction, parse_duration)
    used = eviction.FsFigures(plan.fs.capacity_bytes, plan.fs.available, source=seen.fs_source)
    imagefs = replace(fs_figures(seen.fs_path, "the CRI's ImageFsInfo mount point"), capacity_bytes=used.capacity_bytes,
                      available_bytes=used.available_bytes, source=seen.fs_source) if seen.fs_path else used
    nodefs, why = None, ""
    if any(eviction.DISK_SIGNALS[t.signal][0] == eviction.NODEFS for t in found):
        try:
            nodefs = fs_figures(kubelet.root_dir, f"the kubelet's root dir, {kubelet.root_dir_source}")
        except EngineError:
            why = f"not measured: {kubelet.root_dir} ({kubelet.root_dir_source}) cannot be read here"
        if nodefs is not None and plan.simulated and nodefs.device == imagefs.device:
            nodefs = replace(nodefs, capacity_bytes=used.capacity_bytes, available_bytes=used.available_bytes)
    return eviction.check(found, imagefs, nodefs, why, settings.eviction.where or "no kubelet config file read")


def kubelet_start_time(endpoint: Optional[str]) -> KubeletStart:
    """When the kubelet that uses this runtime started (its first-detected times are at least
    that), read from /proc: a kubelet whose runtime endpoint is endpoint, or is served by the
    same process (through a cri-proxy). None when no such kubelet runs here; another kubelet on
    the machine, one of another runtime, says nothing of this one's images."""
    serving = procfs.serving(procfs.socket_path(endpoint)) if endpoint else None
    for pid in procfs.pids():
        if procfs.stat_name(pid) != "kubelet":
            continue
        if endpoint and not _uses(pid, endpoint, serving):
            continue
        started = procfs.started_at(pid)
        if started is not None:
            found = f"kubelet process {pid}"
            root = procfs.parse_flags(procfs.cmdline(pid)).get("--root-dir")
            if root:
                return KubeletStart(started, found, root, f"--root-dir of {found}")
            return KubeletStart(started, found, root_dir_source=f"{found} has no --root-dir: its default")
    return KubeletStart(None, NO_KUBELET)


def _uses(pid: int, endpoint: str, serving: Optional[int]) -> bool:
    flags = procfs.parse_flags(procfs.cmdline(pid))
    theirs = flags.get("--container-runtime-endpoint") or _configured_endpoint(flags.get("--config"))
    theirs = procfs.socket_path(theirs or KUBELET_DEFAULT_ENDPOINT)
    if os.path.abspath(theirs) == os.path.abspath(procfs.socket_path(endpoint)):
        return True
    return serving is not None and procfs.serving(theirs) == serving


def _configured_endpoint(path: Optional[str]) -> Optional[str]:
    """containerRuntimeEndpoint from the kubelet's config file, when it can be read."""
    if not path:
        return None
    try:
        found = read_kubelet_config(path).get("containerRuntimeEndpoint")
    except PinctlError:
        return None
    return found if isinstance(found, str) else None


# --- prune --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PruneRequest:
    until_usage: Optional[float] = None  # None: the low threshold
    all_unused: bool = False
    older_than: Optional[timedelta] = None
    images: tuple[str, ...] = ()  # prune REF|ID...: only these, when nothing protects them


@dataclass
class PrunePlan:
    """The images one domain would lose, in order, and the ones it keeps and why."""

    domain: GcDomain
    plan: GcPlan
    target_usage: Optional[int]
    delete: list[GcImage]
    kept: list[tuple[GcImage, str]]
    fs_path: str = ""
    matched: frozenset[str] = frozenset()  # the request's images that name an image here


def plan_prune(domain: GcDomain, rows: Sequence[ImageRow], settings: GcSettings, request: PruneRequest,
               now: datetime) -> PrunePlan:
    """The kubelet's order and skips, with pinctl's wants (labels, policy, sandbox) and any image a
    container names counted as pinned, the minimum age raised to --older-than, no age step."""
    seen = domain.observe(rows)
    wanted = wanted_by_pinctl(seen.images, rows)
    named = _named_by_containers(seen.images, seen.containers)
    estimates = estimate.estimate_images(seen.images, seen.containers, now)
    chosen, matched = _chosen(seen.images, request.images)
    # A delete the runtime will refuse frees nothing: kept, so the walk goes on to what it can free.
    images = [replace(e.image, pinned=e.image.pinned or e.image.id in wanted or e.image.id in named
                      or e.image.id in seen.refusals or (chosen is not None and e.image.id not in chosen))
              for e in estimates]
    target = None if request.all_unused or chosen is not None else int(
        request.until_usage if request.until_usage is not None else settings.low_threshold_percent)
    prune_settings = _prune_settings(settings, target, request.older_than)
    plan = gcmodel.plan_gc(images, [c.as_gc_container() for c in seen.containers], prune_settings, seen.fs, now,
                           mode="threshold" if target is not None else "all_unused")
    delete = [entry.image for entry in plan.deletions]
    # In the order the kubelet would reach them, were they not protected; with images named,
    # only those (the rest were never candidates).
    protected = sorted((p for p in plan.protected if chosen is None or p.image.id in chosen),
                       key=lambda p: gcmodel.eviction_key(p.image))
    kept = [(p.image, _kept_why(p, wanted, named, seen.images, seen.refusals)) for p in protected]
    return PrunePlan(domain, plan, target, delete, kept, seen.fs_path, matched)


def _chosen(images: Sequence[ObservedImage], terms: Sequence[str]) -> tuple[Optional[set[str]], frozenset[str]]:
    """The IDs of the images the terms name (a reference, an image ID or a prefix of one), and
    the terms that named one; None when no term was given (every image is a candidate)."""
    if not terms:
        return None, frozenset()
    chosen: set[str] = set()
    matched: set[str] = set()
    for term in terms:
        selector = references.parse_selector(term)
        for image in images:
            if selector.names((image.id, *image.refs)) or selector.has_id((image.id,)):
                chosen.add(image.id)
                matched.add(term)
    return chosen, frozenset(matched)


def _prune_settings(settings: GcSettings, target: Optional[int], older_than: Optional[timedelta]) -> GcSettings:
    min_age = max(settings.min_age, older_than or timedelta(0))
    if target is None:
        return GcSettings(100, 99, min_age, timedelta(0))
    if not 0 <= target <= 100:
        raise UsageError(f"--until-usage {target} is not a percentage", "give 0 to 100")
    # The threshold step runs at usage >= high and frees down to low: high one above the target.
    return GcSettings(min(target + 1, 100), min(target, 99), min_age, timedelta(0))


def _named_by_containers(images: Sequence[ObservedImage], containers: Sequence[ObservedContainer]) -> set[str]:
    """Images a container names by ID, reference or digest, or mounts as a volume: the kubelet
    matches IDs only, a prune is more careful."""
    names = {value for c in containers for value in (c.image_id, c.image_ref, c.image, *c.image_mounts) if value}
    return {image.id for image in images if names & {image.id, *image.refs}}


def _kept_why(item: gcmodel.ProtectedImage, wanted: dict[str, str], named: set[str],
              images: Sequence[ObservedImage], refusals: Optional[dict[str, str]] = None) -> str:
    parts = []
    refused = (refusals or {}).get(item.image.id)
    if refused:
        parts.append(refused)
    if item.containers:
        parts.append("in use by " + ", ".join(c.name or c.id[:12] for c in item.containers))
    elif item.image.id in named:
        parts.append("named by a container")
    if item.image.id in wanted:
        parts.append(f"pinctl wants it kept ({wanted[item.image.id]})")
    runtime_pinned = next((i.pinned for i in images if i.id == item.image.id), False)
    if runtime_pinned:
        parts.append("pinned by the runtime")
    if gcmodel.Protection.TOO_YOUNG in item.reasons and item.eligible_at is not None:
        parts.append(f"younger than the minimum age (until {item.eligible_at:%Y-%m-%d %H:%M:%S}Z)")
    return "; ".join(parts) or "protected"


@dataclass(frozen=True)
class PruneItem:
    domain: str
    image_id: str
    refs: tuple[str, ...]
    action: PruneAction
    size: int
    why: Optional[str] = None


def apply_prune(plans: Sequence[PrunePlan], still_wanted: Callable[[GcImage], Optional[str]], dry_run: bool,
                progress: Callable[[PruneItem], None] = lambda _item: None) -> list[PruneItem]:
    """Delete each planned image after checking it once more, and report every image."""
    items: list[PruneItem] = []
    for plan in plans:
        # What goes, in the order it goes; then what stays, in the order the kubelet would reach it.
        for image in plan.delete:
            item = (PruneItem(plan.domain.name, image.id, image.refs, PRUNE_WOULD_REMOVE, image.size) if dry_run
                    else _remove_one(plan, image, still_wanted))
            items.append(item)
            progress(item)
        for image, why in plan.kept:
            items.append(PruneItem(plan.domain.name, image.id, image.refs, PRUNE_KEPT, image.size, why))
    return items


def _remove_one(plan: PrunePlan, image: GcImage, still_wanted: Callable[[GcImage], Optional[str]]) -> PruneItem:
    domain = plan.domain

    def item(action: PruneAction, why: Optional[str] = None) -> PruneItem:
        return PruneItem(domain.name, image.id, image.refs, action, image.size, why)

    try:
        reason = target_reached(plan) or recheck(domain, image, still_wanted)
        if reason is not None:
            return item(PRUNE_KEPT, reason)
        domain.remove(image)
    except EngineError as err:
        return item(PRUNE_FAILED, str(err))
    return item(PRUNE_REMOVED)


def target_reached(plan: PrunePlan) -> Optional[str]:
    """Why no more deletions are needed: the filesystem, measured again, is at the target. The
    plan credits each image with its CRI size, which undercounts what its unpacked layers free."""
    if plan.target_usage is None or not plan.fs_path:
        return None
    usage = statfs(plan.fs_path, "the image filesystem").usage_percent
    if usage > plan.target_usage:
        return None
    return f"not needed: the image filesystem is at {usage}%, the target is {plan.target_usage}%"


def recheck(domain: GcDomain, image: GcImage, still_wanted: Callable[[GcImage], Optional[str]]) -> Optional[str]:
    """Why an image planned for deletion must stay after all: what changed since planning."""
    pinned = domain.pinned_now(image)
    if pinned is None:
        return "gone since planning"
    if pinned:
        return "pinned by the runtime since planning"
    users = domain.users_now(image)
    if users:
        return f"in use since planning by {', '.join(users)}"
    return still_wanted(image)


def wanted_now(node: Node, policy: Policy) -> Callable[[GcImage], Optional[str]]:
    """A re-check of pinctl's own wants for one image: pin labels on its records as they are now
    (read one by one), and policy patterns over its names."""
    views = node.views()
    crio = node.crio()

    def check(image: GcImage) -> Optional[str]:
        names = [ref for ref in image.refs if "@" not in ref] + [image.id]
        if policy and any(policy.matcher.match(names)):
            return "a policy pattern covers it"
        if crio is not None and crio_pins.reasons_for(image.refs, crio.config()):
            return "CRI-O's files pin it since planning"
        for view in views:
            for record in view.store.get_images(view.namespace, names):
                if PIN_LABEL in record.labels:  # an ineffective value still says "keep"
                    return f"pin label on {record.name} in {view.namespace} since planning"
        return None

    return check


def prune_domains(node: Node, namespaces: Sequence[str],
                  open_runtime: Callable[[], tuple[CriRuntime, RuntimeVersion]]) -> list[GcDomain]:
    """The CRI runtime when Kubernetes' namespace is read, and Docker when it is one of the
    node's sources (unless the CRI runtime is Docker itself, through cri-dockerd)."""
    domains: list[GcDomain] = []
    runtime_name = ""
    if not namespaces or "all" in namespaces or "k8s.io" in namespaces:
        runtime, version = open_runtime()
        domains.append(cri_domain(node, runtime, version))
        runtime_name = version.name
    engine = node.docker_engine()
    if engine is not None and runtime_name != "docker":
        domains.append(DockerDomain(engine))
    return domains

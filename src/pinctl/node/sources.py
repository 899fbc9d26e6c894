"""The node's sources of images, as one list: each containerd daemon with the namespaces read
from it, and Docker. Every command reads rows, names, label views and event streams from that
list alone, so a new kind of source is one class here and one line in open_node.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pinctl.backends import cri_dockerd
from pinctl.backends.containerd import ContainerdStore
from pinctl.backends.cri import KNOWN_ENDPOINTS, CriRuntime, discover
from pinctl.backends.docker import DEFAULT_HOST, DockerEngine
from pinctl.config.containerd import dropin_path, read_config_version
from pinctl.errors import EngineUnreachable, PinctlError, UnknownNamespace
from pinctl.model import ALL_NAMESPACES, CRI_NAMESPACE, DEFAULT_NAMESPACES, DOCKER_NAMESPACE, SOURCE_CRIO
from pinctl.node import crio as crio_node
from pinctl.node import docker as docker_service
from pinctl.node.docker import DockerView, rows_without_records
from pinctl.node.protocol import Followed, Name, Source
from pinctl.pins.export import ContainerdTarget
from pinctl.pins.listing import Listing, list_images
from pinctl.pins.listing import config_pins as listed_config_pins
from pinctl.pins.plans import NamespaceView
from pinctl.pins.policy import Policy

if TYPE_CHECKING:
    from pinctl import refs
    from pinctl.backends import FollowableStore, ImageRecords, ImageStore
    from pinctl.backends.cri import RuntimeVersion
    from pinctl.config.loader import Config
    from pinctl.model import ConfigPin

# dockerd starts its own containerd here when none is configured for it.
DOCKER_MANAGED_CONTAINERD = "/run/docker/containerd/containerd.sock"


@dataclass
class ContainerdSource:
    """Namespaces of one containerd daemon: pinctl's own, or the one Docker keeps images in."""

    store: FollowableStore
    namespaces: list[str]
    requested: Sequence[str] = ()
    description: str = ""
    # Selected namespaces that did not exist when the node was opened, read as empty (open_node's
    # absent_ok): containerd creates a namespace with its first image.
    absent: Sequence[str] = ()

    def __post_init__(self) -> None:
        self.description = self.description or f"containerd at {self.store.address}"

    def add_rows(self, listing: Listing, policy: Policy, runtime_sizes: bool = True) -> None:
        part = list_images(self.store, self.namespaces, policy, runtime_sizes)
        listing.rows.extend(part.rows)
        listing.errors.extend(part.errors)

    def add_names(self, names: list[Name]) -> None:
        names += [(ns, name) for ns in self.namespaces for name in self.store.list_names(ns)]

    def prefetch(self) -> None:
        for namespace in self.namespaces:
            self.store.prefetch_images(namespace)

    def views(self) -> list[NamespaceView]:
        return [NamespaceView(self.store, ns) for ns in self.namespaces]

    def refusal(self, selector: refs.Selector) -> Optional[str]:
        return None

    def follow(self) -> Optional[Followed]:
        return Followed(self.store, self._watches)

    def _watches(self, namespace: str) -> bool:
        # A namespace created after start counts when it would have been selected then.
        if ALL_NAMESPACES in self.requested:
            return True
        return namespace in (self.requested or DEFAULT_NAMESPACES) or namespace in self.namespaces

    def close(self) -> None:
        self.store.close()


@dataclass
class DockerSource:
    """Docker through its API. With its containerd image store, the rows of its namespace
    (listed by whichever containerd source holds it) become Docker's; otherwise Docker's own
    image list gives rows of their own, which cannot be labelled."""

    view: DockerView
    # docker_pinned_image_labels: config labels that pin an image, as cri-dockerd's --pinned-image-labels.
    label_rules: Sequence[str] = ()
    # The sandbox image of the cri-dockerd in front of this Docker, when its command line names one.
    sandbox_image: Optional[str] = None
    description: str = ""

    def __post_init__(self) -> None:
        self.description = self.description or f"Docker at {self.view.engine.host}"

    def add_rows(self, listing: Listing, policy: Policy, runtime_sizes: bool = True) -> None:
        view = self.view
        mine = [row for row in listing.rows if row.namespace == view.namespace]
        if view.store.containerd and mine:
            # SIZE stays the content's (runtime_sizes or not): Docker's own figure, with the
            # unpacked layers, costs its image list, 3.8 s per 1,000 images with this store.
            ids = {row.image_id for row in mine if row.image_id}
            docker_service.adopt(listing.rows, view.namespace, self._moby_labels(ids), self.label_rules)
        else:
            listing.rows = docker_service.join(listing.rows, view, self.label_rules, policy)
        if self.sandbox_image:
            docker_service.mark_sandbox(listing.rows, self.sandbox_image)

    def _moby_labels(self, ids: set[str]) -> dict[str, dict[str, str]]:
        assert self.moby_store is not None, "Docker's namespace was listed, so its store is known"
        return self.moby_store.config_labels(self.view.namespace, ids)

    # The containerd source that lists Docker's namespace; set by open_node.
    moby_store: Optional[ImageStore] = field(default=None)

    def add_names(self, names: list[Name]) -> None:
        listed = {ref for ns, ref in names if ns == self.view.namespace}
        names += rows_without_records(self.view, listed)

    def prefetch(self) -> None:
        """Docker's image list, when add_rows reads it: the classic store's (fast there), or when
        no containerd source lists Docker's namespace. Otherwise Docker's rows join that
        source's, which prefetches its namespace."""
        if not self.view.store.containerd or self.moby_store is None:
            self.view.prefetch_images()

    def views(self) -> list[NamespaceView]:
        return []

    def refusal(self, selector: refs.Selector) -> Optional[str]:
        return self.view.classic_refusal(selector)

    def follow(self) -> Optional[Followed]:
        return None

    def close(self) -> None:
        self.view.engine.close()


@dataclass
class Node:
    """Every source of images on this node, in the order they are read."""

    sources: list[Source] = field(default_factory=list)

    def prefetch(self) -> None:
        """Have every engine start on the records rows() reads first: they come while the caller
        does other work (opens the CRI, loads its modules), and rows() takes them."""
        for source in self.sources:
            source.prefetch()

    def rows(self, policy: Policy, runtime_sizes: bool = True) -> Listing:
        """Every row; runtime_sizes: False where SIZE is not shown (see Source.add_rows)."""
        listing = Listing()
        for source in self.sources:
            source.add_rows(listing, policy, runtime_sizes)
        listing.rows.sort(key=lambda row: (row.namespace or "", row.ref))
        return listing

    def forget_lists(self) -> None:
        """Forget what a source keeps of a read (Docker's image list), so that reading the same
        node again sees images that came since: cri-proxy keeps one node open for its reads."""
        for source in self.sources:
            if isinstance(source, DockerSource):
                source.view.forget()

    def names(self) -> list[Name]:
        """(namespace, reference) of every row `ls` would show, from the image lists alone: no
        manifests read. What `ls -q` prints and shell completion asks for."""
        names: list[Name] = []
        for source in self.sources:
            source.add_names(names)
        return sorted(set(names), key=lambda item: (item[0] or "", item[1]))

    def views(self) -> list[NamespaceView]:
        return [view for source in self.sources for view in source.views()]

    def id_names(self) -> list[tuple[str, str, str]]:
        """(name, image ID, digest) of every row: what config export writes an ID pattern as.
        CRI-O's IDs come bare from its CRI and get their sha256: prefix; its digest names are rows
        of their own, since the digest its CRI adds to a tag is no name CRI-O holds."""
        rows = self.rows(Policy(), runtime_sizes=False).rows
        return [(row.ref, f"sha256:{row.image_id}" if row.source == SOURCE_CRIO and row.image_id else row.image_id or "",
                 "" if row.source == SOURCE_CRIO else row.digest) for row in rows]

    def selected_namespaces(self) -> list[str]:
        """The containerd namespaces read, asking no engine."""
        return [ns for source in self.sources if isinstance(source, ContainerdSource) for ns in source.namespaces]

    def absent_namespaces(self) -> list[str]:
        """Selected namespaces that did not exist when the node was opened (read as empty)."""
        return [ns for source in self.sources if isinstance(source, ContainerdSource) for ns in source.absent]

    def refusal(self, selector: refs.Selector) -> Optional[str]:
        return next((why for source in self.sources if (why := source.refusal(selector))), None)

    def view_of(self, namespace: str) -> Optional[NamespaceView]:
        """A label view of one namespace as it is now, also one that did not exist when the
        node was opened (a first pull creates k8s.io on a fresh node)."""
        store = self._store_of(namespace)
        return None if store is None else NamespaceView(store, namespace)

    def _store_of(self, namespace: str) -> Optional[ImageStore]:
        for source in self.sources:
            if isinstance(source, ContainerdSource) and (namespace in source.namespaces
                                                         or namespace in source.store.namespaces()):
                return source.store
        return None

    def arrivals(self, namespace: str, image_ids: Sequence[str]) -> dict[str, datetime]:
        """When each image ID came to the namespace, as the kubelet would first see it: the time
        containerd committed the image's config blob (its ID is that blob's digest). A re-pointed
        tag keeps its record's creation time, and a label write moves the record's update time,
        but neither touches the blob. {} where containerd cannot say."""
        wanted = [i for i in image_ids if i.startswith("sha256:")]
        try:
            store = self._store_of(namespace) if wanted else None
            if store is None:
                return {}
            times = store.content_times(namespace, wanted)
        except PinctlError:
            return {}
        return {digest: datetime.fromtimestamp(seconds, timezone.utc) for digest, seconds in times.items()}

    def docker_engine(self) -> Optional[DockerEngine]:
        """Docker's API, when Docker is one of the sources."""
        return next((source.view.engine for source in self.sources if isinstance(source, DockerSource)), None)

    def config_pins(self) -> list[ConfigPin]:
        """containerd 2.x's own pinned_images entries, of the containerd whose CRI namespace is read."""
        # From the store itself: a NamespaceView would list every record of k8s.io again only to
        # reach its store (0.2 s at 10,000 images, in check and the watcher's periodic check).
        return next((listed_config_pins(source.store) for source in self.sources
                     if isinstance(source, ContainerdSource) and CRI_NAMESPACE in source.namespaces), [])

    def crio(self) -> Optional[crio_node.CrioNode]:
        """The CRI-O this node is, when it is one: its pins are files, not labels."""
        return next((source.crio for source in self.sources if isinstance(source, crio_node.CrioSource)), None)

    def followed(self) -> list[Followed]:
        return [found for source in self.sources if (found := source.follow()) is not None]

    def namespaces(self) -> list[tuple[str, bool]]:
        """Every namespace of every containerd read, and whether pinctl reads it by default."""
        stores = {id(f.store): f.store for f in self.followed()}
        names = sorted({ns for store in stores.values() for ns in store.namespaces()})
        return [(ns, ns in DEFAULT_NAMESPACES) for ns in names]

    def close(self) -> None:
        for source in self.sources:
            source.close()


def open_node(cfg: Config, warn: Callable[[str], None], absent_ok: bool = False) -> Node:
    """containerd is required unless it was left at its default and Docker answers instead;
    Docker is read when it answers (or was named) and the namespaces asked for include its own.

    absent_ok is for the commands that run from a node's first boot on (sync --watch, cri-proxy):
    a namespace named with -n, or a default one, that does not exist yet is read as empty, since
    containerd creates a namespace with its first image and they follow it from then on. A one-shot
    command refuses a -n that does not exist: most likely a typo. One that a config file names is
    read as empty with a warning: a fleet's shared config names the namespaces of every node, and a
    node that has no image in one of them yet is no mistake."""

    found = crio_node.detect(cfg, warn)
    if found is not None:
        # CRI-O keeps no namespaces: -n names nothing there.
        if cfg.settings.namespaces:
            warn(f"CRI-O has no namespaces; -n {','.join(cfg.settings.namespaces)} is ignored on {found.describe()}")
        return Node([crio_node.CrioSource(found)])
    requested = cfg.settings.namespaces
    store = ContainerdStore(cfg.settings.containerd_address, cfg.settings.timeout, cfg.settings.containerd_config)
    docker = _docker(cfg)
    configured = bool(requested) and cfg.from_file("namespaces")
    try:
        selected, absent = _selected(store, requested, absent_ok or configured, docker is not None)
    except EngineUnreachable:
        if docker is None or not cfg.defaulted("containerd_address"):
            raise
        store.close()
        return _with_docker(Node(), cfg, None, docker)
    except UnknownNamespace:
        if docker is None and DOCKER_NAMESPACE in requested and DOCKER_NAMESPACE not in store.namespaces():
            # Not a typo: -n moby asks for Docker's images, and Docker is down.
            raise EngineUnreachable(f"Docker is not answering at {DEFAULT_HOST}, and containerd at {store.address} "
                                    f"has no namespace {DOCKER_NAMESPACE}",
                                    "start dockerd, or point --docker-host or DOCKER_HOST at its socket") from None
        raise
    if absent and configured and not absent_ok:
        warn(f"namespace {', '.join(absent)} ({cfg.sources['namespaces']}) does not exist in containerd at "
             f"{store.address}: read as empty")
    if not selected and not requested and docker is None:
        warn(f"no k8s.io or moby namespace in containerd at {store.address}; pick one with -n NS or -n all")
    node = Node([ContainerdSource(store, selected, requested, absent=absent)])
    return _with_docker(node, cfg, node.sources[0], docker) if docker is not None else node


def _selected(store: ImageRecords, requested: Sequence[str], absent_ok: bool,
              docker_answers: bool = False) -> tuple[list[str], list[str]]:
    """The namespaces to read and those of them that do not exist yet: with absent_ok any, and
    moby whenever Docker answers (-n moby names Docker's images, which a classic store keeps
    outside containerd, and a containerd store puts there only with its first image)."""
    docker_named = docker_answers and DOCKER_NAMESPACE in requested
    if (not absent_ok and not docker_named) or ALL_NAMESPACES in requested:
        return select_namespaces(store, requested), []
    wanted = list(dict.fromkeys(requested or DEFAULT_NAMESPACES))
    present = set(store.namespaces())
    absent = [ns for ns in wanted if ns not in present]
    unknown = [ns for ns in absent if ns != DOCKER_NAMESPACE]
    if unknown and not absent_ok:
        store.require_namespaces(unknown)  # refuses them, in the usual words
    return wanted, absent


def containerd_target(node: Optional[Node], address: str, config_path: Optional[str]) -> ContainerdTarget:
    """The containerd at address, for config export: its version, asked of the daemon when the
    node reads it (node None: --offline), and the version its config file declares."""
    path, config_version = read_config_version(config_path)
    dropin = dropin_path(config_path)
    if node is None:
        return ContainerdTarget(path, config_version, dropin=dropin)
    store = next((source.store for source in node.sources
                  if isinstance(source, ContainerdSource) and source.store.address == address), None)
    if store is None:
        return ContainerdTarget(path, config_version, unknown=f"is not known (no containerd answers at {address})",
                                dropin=dropin)
    return ContainerdTarget(path, config_version, store.version(), address, dropin=dropin)


def _with_docker(node: Node, cfg: Config, main: Optional[Source], docker: DockerView) -> Node:
    own = _docker_containerd(cfg, main, docker)
    if own is not None:
        node.sources.append(own)
    front = cri_dockerd.for_docker(docker.engine.host)
    source = DockerSource(docker, cfg.settings.docker_pinned_image_labels, front.sandbox_image if front else None)
    holder = own or main
    if isinstance(holder, ContainerdSource) and docker.namespace in holder.namespaces:
        source.moby_store = holder.store
    node.sources.append(source)
    return node


def _docker(cfg: Config) -> Optional[DockerView]:
    requested = cfg.settings.namespaces
    if requested and not {DOCKER_NAMESPACE, ALL_NAMESPACES} & set(requested):
        return None
    host = cfg.settings.docker_host
    try:
        return DockerView.read(DockerEngine(host, cfg.settings.timeout), DOCKER_NAMESPACE)
    except EngineUnreachable:
        if host is not None:
            raise
        return None


def _docker_containerd(cfg: Config, main: Optional[Source], docker: DockerView) -> Optional[ContainerdSource]:
    """Docker's containerd, when its image store is there and it is not the daemon already read.

    Docker is consulted only when its namespace is wanted, so when the main containerd has
    that namespace it is among the selected ones already: no second namespace listing."""

    if not docker.store.containerd:
        return None
    address = cfg.settings.docker_containerd_address
    # A namespace read as empty because it is absent is not where Docker keeps its images.
    selected = [ns for ns in main.namespaces if ns not in main.absent] if isinstance(main, ContainerdSource) else []
    if address is None:
        if docker.namespace in selected:
            return None
        if not os.path.exists(DOCKER_MANAGED_CONTAINERD):
            return None
        address = DOCKER_MANAGED_CONTAINERD
    if isinstance(main, ContainerdSource) and os.path.realpath(address) == os.path.realpath(main.store.address):
        return None
    store = ContainerdStore(address, cfg.settings.timeout, None)
    return ContainerdSource(store, [docker.namespace], [docker.namespace], f"Docker's containerd at {address}")


def open_runtime(cfg: Config, warn: Callable[[str], None]) -> tuple[CriRuntime, RuntimeVersion]:
    """The CRI runtime named by flag, environment or config; else the first that answers of the
    containerd pinctl was pointed at and the usual sockets."""

    endpoint = cfg.settings.runtime_endpoint
    if endpoint is None:
        first = [] if cfg.defaulted("containerd_address") else [f"unix://{cfg.settings.containerd_address}"]
        return discover(list(dict.fromkeys(first + list(KNOWN_ENDPOINTS))), cfg.settings.timeout, warn)
    runtime = CriRuntime(endpoint, cfg.settings.timeout)
    return runtime, runtime.version()


def select_namespaces(store: ImageRecords, requested: Sequence[str]) -> list[str]:
    """Requested namespaces (checked to exist), every one for `all`, else the defaults present."""
    if ALL_NAMESPACES in requested:
        return store.namespaces()
    if requested:
        wanted = list(dict.fromkeys(requested))
        store.require_namespaces(wanted)
        return wanted
    present = set(store.namespaces())
    return [ns for ns in DEFAULT_NAMESPACES if ns in present]

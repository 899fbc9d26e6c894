"""Which engines a command reads: containerd (its namespaces) and Docker, found or named."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

from pinctl.errors import EngineUnreachable
from pinctl.service import namespaces as ns_select
from pinctl.service.listing import Listing, list_images

if TYPE_CHECKING:
    from pinctl.backends.containerd import ContainerdStore
    from pinctl.backends.cri import CriRuntime, RuntimeVersion
    from pinctl.config import Config
    from pinctl.service.docker import DockerView
    from pinctl.service.pinning import NamespaceView
    from pinctl.service.policy import Policy

# dockerd starts its own containerd here when none is configured for it.
DOCKER_MANAGED_CONTAINERD = "/run/docker/containerd/containerd.sock"


@dataclass
class Sources:
    containerd: Optional[ContainerdStore]
    namespaces: list[str] = field(default_factory=list)
    docker: Optional[DockerView] = None
    docker_containerd: Optional[ContainerdStore] = None  # only when it is another daemon


def open_sources(cfg: Config, warn: Callable[[str], None]) -> Sources:
    """containerd is required unless it was left at its default and Docker answers instead;
    Docker is read when it answers (or was named) and the namespaces asked for include its own."""
    from pinctl.backends.containerd import ContainerdStore

    store = ContainerdStore(cfg.settings.containerd_address, cfg.settings.timeout, cfg.settings.containerd_config)
    docker = _docker(cfg)
    try:
        selected = ns_select.select_namespaces(store, cfg.settings.namespaces)
    except EngineUnreachable:
        if docker is None or not cfg.defaulted("containerd_address"):
            raise
        return Sources(None, [], docker, _docker_containerd(cfg, None, docker, []))
    if not selected and not cfg.settings.namespaces and docker is None:
        warn(f"no k8s.io or moby namespace in containerd at {store.address}; pick one with -n NS or -n all")
    return Sources(store, selected, docker, _docker_containerd(cfg, store, docker, selected))


def _docker(cfg: Config) -> Optional[DockerView]:
    from pinctl.backends.docker import DockerEngine
    from pinctl.service.docker import DockerView

    requested = cfg.settings.namespaces
    if requested and not {ns_select.DOCKER_NAMESPACE, ns_select.ALL} & set(requested):
        return None
    host = cfg.settings.docker_host
    try:
        return DockerView.read(DockerEngine(host, cfg.settings.timeout), ns_select.DOCKER_NAMESPACE)
    except EngineUnreachable:
        if host is not None:
            raise
        return None


def _docker_containerd(
    cfg: Config, store: Optional[ContainerdStore], docker: Optional[DockerView], selected: list[str]
) -> Optional[ContainerdStore]:
    """Docker's containerd, when its image store is there and it is not the daemon already read.

    Docker is consulted only when its namespace is wanted, so when the main containerd has
    that namespace it is among the selected ones already: no second namespace listing."""
    from pinctl.backends.containerd import ContainerdStore

    if docker is None or not docker.store.containerd:
        return None
    address = cfg.settings.docker_containerd_address
    if address is None:
        if docker.namespace in selected:
            return None
        if not os.path.exists(DOCKER_MANAGED_CONTAINERD):
            return None
        address = DOCKER_MANAGED_CONTAINERD
    if store is not None and os.path.realpath(address) == os.path.realpath(store.address):
        return None
    return ContainerdStore(address, cfg.settings.timeout, None)


def list_rows(sources: Sources, policy: Policy, label_rules: list[str]) -> Listing:
    listing = list_images(sources.containerd, sources.namespaces, policy) if sources.containerd else Listing()
    if sources.docker_containerd is not None and sources.docker is not None:
        extra = list_images(sources.docker_containerd, [sources.docker.namespace], policy)
        listing.rows.extend(extra.rows)
        listing.errors.extend(extra.errors)
    if sources.docker is not None:
        _add_docker(listing, sources, policy, label_rules)
    return listing


def _add_docker(listing: Listing, sources: Sources, policy: Policy, label_rules: list[str]) -> None:
    from pinctl.service import docker as docker_service

    view = sources.docker
    assert view is not None
    moby_store = sources.docker_containerd or (sources.containerd if view.namespace in sources.namespaces else None)
    if view.store.containerd and moby_store is not None:
        ids = {row.image_id for row in listing.rows if row.namespace == view.namespace and row.image_id}
        docker_service.adopt(listing.rows, view.namespace, moby_store.config_labels(view.namespace, ids), label_rules)
    else:
        listing.rows = docker_service.join(listing.rows, view, label_rules, policy)


def views(sources: Sources) -> list[NamespaceView]:
    from pinctl.service.pinning import NamespaceView

    found = [NamespaceView(sources.containerd, ns) for ns in sources.namespaces] if sources.containerd else []
    if sources.docker_containerd is not None and sources.docker is not None:
        found.append(NamespaceView(sources.docker_containerd, sources.docker.namespace))
    return found


def open_runtime(cfg: Config, warn: Callable[[str], None]) -> tuple[CriRuntime, RuntimeVersion]:
    """The CRI runtime named by flag, environment or config; else the first that answers of the
    containerd pinctl was pointed at and the usual sockets."""
    from pinctl.backends.cri import KNOWN_ENDPOINTS, CriRuntime, discover

    endpoint = cfg.settings.runtime_endpoint
    if endpoint is None:
        first = [] if cfg.defaulted("containerd_address") else [f"unix://{cfg.settings.containerd_address}"]
        return discover(list(dict.fromkeys(first + list(KNOWN_ENDPOINTS))), cfg.settings.timeout, warn)
    runtime = CriRuntime(endpoint, cfg.settings.timeout)
    return runtime, runtime.version()


def list_names(sources: Sources) -> list[tuple[Optional[str], str]]:
    """(namespace, reference) of every row `ls` would show, from the image lists alone: no
    manifests read. What `ls -q` prints and shell completion asks for."""
    from pinctl.service.docker import rows_without_records

    names: list[tuple[Optional[str], str]] = []
    if sources.containerd is not None:
        names += [(ns, img.name) for ns in sources.namespaces for img in sources.containerd.list_images(ns)]
    view = sources.docker
    if sources.docker_containerd is not None and view is not None:
        names += [(view.namespace, img.name) for img in sources.docker_containerd.list_images(view.namespace)]
    if view is not None:
        listed = {ref for ns, ref in names if ns == view.namespace}
        names += rows_without_records(view, listed)
    return sorted(set(names), key=lambda item: (item[0] or "", item[1]))

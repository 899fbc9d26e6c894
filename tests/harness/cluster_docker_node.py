"""A fleet node whose runtime is Docker: the seed user's node, registered to the harness's cluster.

Set up as docs/cri-proxy.md ("Roll out") tells its operator: dockerd 26 keeping its images in a
containerd (namespace ``moby``), cri-dockerd v0.4.3 in front of it (it pins only its sandbox
image), ``pinctl cri-proxy`` in front of that at ``/run/pinctl/cri-proxy.sock``, and the kubelet
pointed at the proxy. The proxy is a node service, not a pod: the kubelet's runtime endpoint must
answer before any pod runs. Pins reach the kubelet through the proxy only, which reads the pin
labels in ``moby``; the DaemonSet ``pinctl-cri-dockerd`` (deploy/kubernetes) writes them.

Like :class:`cluster_nodes.FleetNode` the node has its own address on ``lo`` and mount namespace,
in which the paths the manifest mounts are this node's: containerd's socket directory and root
at ``/run/containerd`` and ``/var/lib/containerd``, the proxy's socket directory at
``/run/pinctl``. containerd, dockerd, cri-dockerd and the kubelet all run inside it (nsenter):
dockerd resolves a pod's hostPaths in its own mount namespace, the kubelet checks their type in
its own, and cri-dockerd links the containers' logs below the kubelet's ``/var/log/pods``. The
proxy runs on the host, on the same socket (the host reaches it at its directory's own path).

cri-dockerd reports the pod network ready only with a CNI config it can load, so it gets a
loopback-only list and Debian's loopback plugin; pods use the host network, so no plugin runs.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

from pinctl.criproxy.relay import find_relay
from tests.harness import cri, cri_dockerd, engines, image_build, images, kubelet, pods, runnable
from tests.harness import docker as docker_harness
from tests.harness.cluster_nodes import (
    NODE_FS_BYTES, NODE_READY_S, NODE_ROOT, NODE_RUN, PIN_LABEL, RUNTIME_LABEL, SHIPPED_RUNTIME_LABEL, FleetError,
    NodeDaemon, NodeNamespace, claim_node_ip, node_name, node_ready, registered_kubelet, release_node_ip, run_all)
from tests.harness.containerd import CNI_CONFLIST
from tests.harness.control_plane import ControlPlane
from tests.harness.criproxy_process import ProxyProcess
from tests.harness.docker_pods import HostRuncDocker

ENGINE = "cri-dockerd"
MOBY = "moby"
# Where docs/cri-proxy.md's unit puts the proxy's socket; the kubelet's endpoint inside the node.
PROXY_RUN = "/run/pinctl"
PROXY_SOCKET = f"{PROXY_RUN}/cri-proxy.sock"
DOCKER_ROOT = "/var/lib/docker"
LOOPBACK_PLUGIN = pathlib.Path("/usr/lib/cni/loopback")
# The proxy's own policy: none. Its pins are the labels the DaemonSet's agent writes in moby.
PROXY_CONFIG = 'pattern_dialect = "pinctl"\npinned_images = []\n'


def _in_namespace(namespace: str, argv: list[str]) -> list[str]:
    # nsenter execs the program in place when it joins a mount namespace alone: same PID.
    return ["nsenter", f"--mount={namespace}", "--", *argv]


class NodeDocker(HostRuncDocker):
    """The pod-running harness dockerd, started inside the node's namespace, its data root at
    the node's ``/var/lib/docker``: the path cri-dockerd's ImageFsInfo reports (Docker's root
    directory), which the agent's manifest mounts for the GC figures."""

    namespace = ""

    def argv(self) -> list[str]:
        args = [f"--data-root={DOCKER_ROOT}" if arg.startswith("--data-root=") else arg for arg in super().argv()]
        return _in_namespace(self.namespace, args)


class NodeCriDockerd(cri_dockerd.CriDockerd):
    """cri-dockerd inside the node's namespace (its own PID namespace as always), with a
    loopback-only CNI config so that it reports the network ready."""

    namespace = ""

    def argv(self) -> list[str]:
        return _in_namespace(self.namespace, super().argv())

    def start(self) -> cri_dockerd.CriDockerd:
        if not LOOPBACK_PLUGIN.exists():
            raise FleetError(f"{LOOPBACK_PLUGIN} is missing: apt-get install containernetworking-plugins")
        (self.cni_dir / "conf").mkdir(parents=True, exist_ok=True)
        (self.cni_dir / "bin").mkdir(parents=True, exist_ok=True)
        (self.cni_dir / "conf" / "10-pinctl.conflist").write_text(CNI_CONFLIST)
        plugin = self.cni_dir / "bin" / "loopback"
        if not plugin.exists():
            plugin.symlink_to(LOOPBACK_PLUGIN)
        return super().start()


@dataclasses.dataclass
class DockerFleetNode:
    """One Docker node: address, namespace, containerd, dockerd, cri-dockerd, proxy, kubelet."""

    base_dir: pathlib.Path
    plane: ControlPlane
    sync_frequency: str
    change_detection: str = "Watch"
    engine: str = ENGINE
    address: str = ""
    name: str = ""
    started_seconds: float = 0.0
    fs: Optional[kubelet.LoopFs] = None
    namespace: Optional[NodeNamespace] = None
    store: Optional[NodeDaemon] = None
    docker: Optional[NodeDocker] = None
    cdd: Optional[NodeCriDockerd] = None
    proxy: Optional[ProxyProcess] = None
    node_kubelet: Optional[kubelet.Kubelet] = None
    _proxy_dir: Optional[pathlib.Path] = None

    # --- what the tests read ------------------------------------------------------------------

    @property
    def running_kubelet(self) -> kubelet.Kubelet:
        if self.node_kubelet is None:
            raise FleetError(f"node {self.name or self.engine} has no kubelet")
        return self.node_kubelet

    @property
    def containerd(self) -> NodeDaemon:
        """The containerd dockerd keeps its images in (namespace ``moby``)."""
        if self.store is None:
            raise FleetError(f"node {self.name or self.engine} has no containerd")
        return self.store

    @property
    def running_docker(self) -> NodeDocker:
        if self.docker is None:
            raise FleetError(f"node {self.name or self.engine} has no dockerd")
        return self.docker

    @property
    def cri_address(self) -> str:
        """The kubelet's endpoint, the proxy, as the host reaches it."""
        if self._proxy_dir is None:
            raise FleetError(f"node {self.name or self.engine} has no proxy")
        return str(self._proxy_dir / "cri-proxy.sock")

    @property
    def runtime_address(self) -> str:
        """cri-dockerd's own socket: what the kubelet would see without the proxy."""
        if self.cdd is None:
            raise FleetError(f"node {self.name or self.engine} has no cri-dockerd")
        return self.cdd.address

    runtime_version_prefix = "docker://"
    pin_namespace = MOBY

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> DockerFleetNode:
        began = time.monotonic()
        pods.runc_binary()
        runnable.busybox_path()
        self.address = claim_node_ip()
        self.name = node_name(self.address)
        self.fs = kubelet.LoopFs(self.base_dir / "imagefs", NODE_FS_BYTES).open()
        store = NodeDaemon("containerd-1.7", self.base_dir / "containerd", data_dir=self.fs.path)
        self.store = store
        # Short: a unix socket path holds 108 bytes, and pytest's directories are deep.
        self._proxy_dir = pathlib.Path(tempfile.mkdtemp(prefix="pxn", dir="/tmp"))
        made = registered_kubelet(self.base_dir / "kubelet", f"unix://{PROXY_SOCKET}", self.plane, self.name, self.address,
                                  self.sync_frequency, self.change_detection,
                                  {RUNTIME_LABEL: self.engine, SHIPPED_RUNTIME_LABEL: ENGINE})
        self.namespace = NodeNamespace(*self._binds(store, made)).start()
        store.enter(self.namespace)
        store.start()
        self._start_docker(store, self.namespace.path)
        self._start_proxy(store)
        made.mount_namespace = self.namespace.path
        self.node_kubelet = made
        made.start()
        self.plane.wait_for(f"node {self.name} Ready", self.ready, NODE_READY_S)
        self.started_seconds = round(time.monotonic() - began, 1)
        return self

    def _binds(self, store: NodeDaemon, made: kubelet.Kubelet) -> tuple[list[tuple[pathlib.Path, str]], list[str]]:
        binds = made.namespace_binds()
        private_run = self.base_dir / "host" / "run"
        for below in ("containerd", "pinctl"):
            (private_run / below).mkdir(parents=True, exist_ok=True)
        for below in ("containerd", "docker"):
            (made.base_dir / "host" / "var-lib" / below).mkdir(parents=True, exist_ok=True)
        root = store.data_dir / "root"
        root.mkdir(parents=True, exist_ok=True)
        store.socket_dir.mkdir(parents=True, exist_ok=True)
        assert self._proxy_dir is not None
        dirs = [pair for pair in binds if not pair[1].startswith("/proc/")]
        tunables = [pair for pair in binds if pair[1].startswith("/proc/")]
        ordered = [*dirs, (private_run, "/run"), (root, NODE_ROOT), (store.socket_dir, NODE_RUN),
                   (self._proxy_dir, PROXY_RUN), *tunables]
        return ordered, [NODE_RUN, PROXY_RUN]

    def _start_docker(self, store: NodeDaemon, namespace: str) -> None:
        docker = NodeDocker(self.base_dir / "docker", containerd_store=True, containerd=store)
        docker.namespace = namespace
        self.docker = docker
        docker.start()
        # cri-dockerd starts every pod with its sandbox image: one that runs.
        archive = self.base_dir / "sandbox-image.tar"
        runnable.build_runnable_archive(archive, [runnable.sandbox_recipe(cri_dockerd.DEFAULT_SANDBOX_IMAGE)])
        docker.load(archive)
        cdd = NodeCriDockerd(engines.CRI_DOCKERD_OLD, docker, self.base_dir / "cri-dockerd")
        cdd.namespace = namespace
        self.cdd = cdd
        cdd.start()

    def _start_proxy(self, store: NodeDaemon) -> None:
        """``pinctl cri-proxy`` as docs/cri-proxy.md's unit runs it, its socket where the kubelet looks."""
        assert self._proxy_dir is not None and self.cdd is not None and self.docker is not None
        config = self.base_dir / "proxy-config.toml"
        config.write_text(PROXY_CONFIG)
        config.chmod(0o600)
        relay = find_relay("auto") or "python"
        env = {"DOCKER_HOST": self.docker.host, "CONTAINERD_NAMESPACE": MOBY}
        self.proxy = ProxyProcess(store, self.cdd.address, "--relay", relay, "--config", str(config), env=env,
                                  listen=self.cri_address)
        self.proxy.wait_serving(60.0)

    def node_object(self) -> dict[str, Any]:
        return self.plane.kubectl_json("get", "node", self.name)

    def ready(self) -> bool:
        return node_ready(self.plane, self.name, self.running_kubelet)

    # --- images --------------------------------------------------------------------------------

    def prepare_agent(self, built: image_build.BuiltImage, name: str) -> None:
        """pinctl's image loaded into Docker under ``name`` alone."""
        docker = self.running_docker
        docker.load(built.archive, timeout=600)
        docker.docker("tag", built.name, name)
        docker.docker("rmi", built.name)
        cri.wait_for_refs(self.cri_address, [name])

    def load_samples(self, refs: Sequence[str]) -> None:
        docker_harness.load_images_docker(self.running_docker, self.base_dir / "work",
                                          [images.recipe(ref, seed=ref) for ref in refs])
        cri.wait_for_refs(self.cri_address, list(refs))

    def retag(self, source: str, target: str) -> None:
        self.running_docker.docker("tag", source, target)
        cri.wait_for_refs(self.cri_address, [target])

    def remove_images(self, refs: Sequence[str]) -> None:
        self.running_docker.docker("rmi", *refs, check=False)

    def pinned_by_pinctl(self) -> set[str]:
        """References labelled in ``moby``, Docker's names (as cri-dockerd reports them)."""
        return {row.ref for row in self.containerd.images(MOBY) if row.labels.get(PIN_LABEL) == "pinned"}

    def pinctl_env(self) -> dict[str, str]:
        return {"CONTAINERD_ADDRESS": self.containerd.address, "DOCKER_HOST": self.running_docker.host,
                "PINCTL_CONTAINERD_CONFIG": str(self.containerd.config_path),
                "CONTAINER_RUNTIME_ENDPOINT": f"unix://{self.cri_address}"}  # the kubelet's: the proxy

    def pinctl_args(self) -> list[str]:
        return ["-n", MOBY]

    # --- teardown ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Kubelet, proxy, cri-dockerd, dockerd, containerd, namespace, filesystem, address: each
        step runs even if one before failed."""
        steps: list[Callable[[], object]] = []
        if self.node_kubelet is not None:
            steps.append(self.node_kubelet.stop)
        if self.proxy is not None:
            steps.append(self.proxy.stop)
        if self.cdd is not None:
            steps.append(self.cdd.stop)
        if self.docker is not None:
            steps.append(self.docker.stop)
        if self.store is not None:
            store = self.store
            steps += [store.stop, store.kill_leftovers, lambda: shutil.rmtree(store.runc_root, ignore_errors=True)]
        if self.namespace is not None:
            steps.append(self.namespace.stop)
        if self.fs is not None:
            steps.append(self.fs.close)
        if self._proxy_dir is not None:
            proxy_dir = self._proxy_dir
            steps.append(lambda: shutil.rmtree(proxy_dir, ignore_errors=True))
        if self.address:
            address = self.address
            steps.append(lambda: release_node_ip(address))
        run_all(steps)

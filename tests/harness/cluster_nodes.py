"""Nodes registered to the harness's control plane: each its own containerd, kubelet, address and mount namespace.

A :class:`FleetNode` is what a machine of a fleet is to pinctl's DaemonSet, inside this one:

* **An address of its own**, a /32 of 198.18.0.0/15 (RFC 2544's benchmarking range: never routed)
  added to ``lo`` (:func:`claim_node_ip`) for the session and removed at teardown. The kubelet
  refuses a loopback node IP (``validateNodeIP``: 127/8) and wants one on an interface of the
  machine; on ``lo`` every packet to it stays on this machine. The node is named after it
  (``pinctl-198-18-0-7``). Host-network pods get it as their pod IP, so each node's agent listens
  on ``$(POD_IP):9736`` without colliding with the others. ``ip addr add`` fails with "File
  exists" for an address already there, so two sessions side by side never take the same one.
* **A mount namespace of its own** (:class:`NodeNamespace`), held by a sleeping process, that
  containerd and the kubelet both join (nsenter): private directories over ``/var/lib``,
  ``/var/log`` and ``/run`` (nothing is created on the host: the mount points are made inside
  them), the node's containerd root bound over ``/var/lib/containerd`` and its socket directory
  over ``/run/containerd`` (made shared, as ``/run`` is on a systemd node, for the manifest's
  HostToContainer propagation), and the kubelet's kernel tunables. A hostPath resolves in the
  runtime's mount namespace (runc binds it) and the kubelet checks its type in its own, so the
  shipped manifest's ``/run/containerd`` and ``/var/lib/containerd`` work unpatched. The host
  reaches the same socket at the socket directory's own path.
* **Its own containerd** (1.7 with labels, or 2.1 with a ``pinned_images`` entry of its own in
  the CRI config) on a loop-mounted ext4 (``kubelet.LoopFs``), its own runc root, its containers'
  cgroups made by runc under containerd's per-container paths (``cgroupsPerQOS: false``: the
  kubelet makes no cgroup of its own), and **its own kubelet** (``kubelet.Registration``) with
  a certificate from ``ControlPlane.node_kubeconfig``, its server on the node's address and a free
  port, healthz on 127.0.0.1.

Every node registers with the taint :data:`FLEET_TAINT` (NoSchedule): pods that do not tolerate
it stay off the fleet, so other cluster tests' pods are never placed here (and never pulled);
pinctl's DaemonSet tolerates every taint (``operator: Exists``). No CNI: pods run on the host
network (containerd's loopback-only conflist reads as network-ready).

A node of another runtime offers the same :class:`NodeKind`: ``cluster_docker_node.DockerFleetNode``
(Docker, cri-dockerd and ``pinctl cri-proxy``), ``cluster_crio_node.CrioFleetNode`` (CRI-O). :class:`Fleet` starts its nodes side by side
(threads) and waits until every Node is Ready in the API.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import ipaddress
import json
import pathlib
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional, Protocol

from tests.harness import cluster_pki, cri, debs, image_build, images, kubelet, pods, runnable
from tests.harness.containerd import DaemonError, dying_with_parent
from tests.harness.control_plane import ControlPlane, ControlPlaneError

# RFC 2544's benchmarking range is 198.18.0.0/15; the harness takes /32s of its first /24.
NODE_NET = ipaddress.IPv4Network("198.18.0.0/24")
FLEET_TAINT = {"key": "pinctl.test/fleet", "value": "true", "effect": "NoSchedule"}
RUNTIME_LABEL = "pinctl.test/runtime"
# What an operator labels a node that does not run containerd with: the shipped DaemonSets choose
# their nodes by it (deploy/kubernetes, "Nodes of other runtimes").
SHIPPED_RUNTIME_LABEL = "pinctl.io/runtime"
PIN_LABEL = "io.cri-containerd.pinned"
ENGINES = ("containerd-1.7", "containerd-2.1", "cri-dockerd", "cri-o")
# The pinctl image unpacked (native snapshotter, ~200 MB, once more per container and per rollout).
NODE_FS_BYTES = 2048 * 1024 * 1024
# containerd 2.1's CRI config pins this one itself (pinned_images), beside its sandbox image.
CONFIG_PINNED = "example.test/fleet/config-pinned:1"
# Where the shipped manifest's hostPaths point, inside each node's namespace.
NODE_ROOT = "/var/lib/containerd"
NODE_RUN = "/run/containerd"
NODE_READY_S = 300.0
HOLDER_READY_S = 60.0
_ip_lock = threading.Lock()
pki_lock = threading.Lock()

# Runs in the new mount namespace: the overlays (target=upper=work, the target its own lower),
# the binds in order, then sleeps holding the namespace.
HOLDER_SCRIPT = r"""
set -eu
for spec in $PINCTL_NODE_OVERLAYS; do
  target=${spec%%=*}; rest=${spec#*=}
  mount -t overlay overlay -o "lowerdir=$target,upperdir=${rest%%=*},workdir=${rest#*=}" "$target"
done
for pair in $PINCTL_NODE_BINDS; do mount --bind "${pair%%=*}" "${pair#*=}"; done
for path in $PINCTL_NODE_SHARED; do mount --make-shared "$path"; done
echo ready
exec sleep infinity
"""


class FleetError(RuntimeError):
    """A node did not come up, register or get Ready."""


class NodeKind(Protocol):
    """What the fleet's tests use of a node, whatever its runtime: :class:`FleetNode` (containerd),
    ``cluster_docker_node.DockerFleetNode`` (cri-dockerd behind pinctl cri-proxy),
    ``cluster_crio_node.CrioFleetNode`` (CRI-O)."""

    engine: str
    name: str
    address: str
    started_seconds: float

    @property
    def running_kubelet(self) -> kubelet.Kubelet: ...
    @property
    def cri_address(self) -> str: ...  # the kubelet's endpoint, as the host reaches it
    @property
    def runtime_version_prefix(self) -> str: ...  # of the Node's containerRuntimeVersion

    def start(self) -> NodeKind: ...
    def stop(self) -> None: ...
    def ready(self) -> bool: ...
    def prepare_agent(self, built: image_build.BuiltImage, name: str) -> None: ...
    def load_samples(self, refs: Sequence[str]) -> None: ...
    def retag(self, source: str, target: str) -> None: ...
    def remove_images(self, refs: Sequence[str]) -> None: ...
    def pinned_by_pinctl(self) -> set[str]: ...
    def pinctl_env(self) -> dict[str, str]: ...
    def pinctl_args(self) -> list[str]: ...


# --- node addresses ---------------------------------------------------------------------------


def _lo_addresses() -> set[str]:
    done = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True,
                          timeout=30, check=False)
    return {field.split("/")[0] for line in done.stdout.splitlines() for field in line.split()[3:4]}


def claim_node_ip() -> str:
    """The first /32 of :data:`NODE_NET` this call could add to ``lo`` (removed by :func:`release_node_ip`)."""
    with _ip_lock:
        taken = _lo_addresses()
        for host in NODE_NET.hosts():
            address = str(host)
            if address in taken:
                continue
            done = subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"], capture_output=True,
                                  text=True, timeout=30, check=False)
            if done.returncode == 0:
                atexit.register(release_node_ip, address)
                return address
            if "File exists" not in done.stderr:
                raise FleetError(f"ip addr add {address}/32 dev lo: {done.stderr.strip()}")
    raise FleetError(f"no free address in {NODE_NET} on lo")


def release_node_ip(address: str) -> None:
    subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", "lo"], capture_output=True, timeout=30, check=False)


def node_name(address: str) -> str:
    return "pinctl-" + address.replace(".", "-")


# --- what every kind of node shares -----------------------------------------------------------


def registered_kubelet(base_dir: pathlib.Path, endpoint: str, plane: ControlPlane, name: str, address: str,
                       sync_frequency: str, change_detection: str, labels: dict[str, str]) -> kubelet.Kubelet:
    """The node's kubelet, registering it to ``plane`` with the fleet's taint and ``labels``."""
    with pki_lock:  # openssl's -CAcreateserial shares one serial file
        kubeconfig = plane.node_kubeconfig(name)
    return kubelet.Kubelet(
        base_dir, endpoint, node_name=name, verbosity=2, binary=plane.kubernetes.binary("kubelet"),
        registration=kubelet.Registration(kubeconfig, address, sync_frequency=sync_frequency,
                                          change_detection=change_detection, taints=(FLEET_TAINT,), labels=labels),
    )


def node_ready(plane: ControlPlane, name: str, made: kubelet.Kubelet) -> bool:
    """Whether Node ``name`` is Ready in the API; a kubelet that exited raises, with its log."""
    if not made.is_alive():
        raise FleetError(f"the kubelet of {name} exited\n{made.log_tail()}")
    done = plane.kubectl("get", "node", name, "-o", 'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
                         check=False)
    return done.returncode == 0 and done.stdout.strip() == "True"


def run_all(steps: Iterable[Callable[[], object]]) -> None:
    """Each teardown step, even if one before it failed."""
    for step in steps:
        with contextlib.suppress(Exception):
            step()


# --- the node's mount namespace ---------------------------------------------------------------


class NodeNamespace:
    """A mount namespace (a slave of the host's) held by a sleeping process, with ``overlays``
    (target, upper, work: a writable layer over a host directory, so that a mount point can be made
    in it without touching the host), then ``binds`` made in order and ``shared`` mount points made
    shared; others join it through :attr:`path`."""

    def __init__(self, binds: Sequence[tuple[pathlib.Path, str]], shared: Sequence[str],
                 overlays: Sequence[tuple[str, pathlib.Path, pathlib.Path]] = ()) -> None:
        pairs = [f"{source}={target}" for source, target in binds]
        specs = [f"{target}={upper}={work}" for target, upper, work in overlays]
        if (any(" " in pair or pair.count("=") != 1 for pair in pairs) or any(" " in path or "=" in path for path in shared)
                or any(" " in spec or spec.count("=") != 2 or "," in spec for spec in specs)):
            raise FleetError(f"mount paths must not hold spaces, '=' or ',': {pairs} {specs}")
        self._binds, self._shared, self._overlays = " ".join(pairs), " ".join(shared), " ".join(specs)
        self._proc: Optional[subprocess.Popen[str]] = None

    @property
    def path(self) -> str:
        if self._proc is None:
            raise FleetError("the node's namespace is not running")
        return f"/proc/{self._proc.pid}/ns/mnt"

    def start(self) -> NodeNamespace:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PINCTL_NODE_BINDS": self._binds,
               "PINCTL_NODE_SHARED": self._shared, "PINCTL_NODE_OVERLAYS": self._overlays}
        argv = dying_with_parent(["unshare", "--mount", "--propagation", "slave", "/bin/sh", "-c", HOLDER_SCRIPT,
                                  "node-ns"], "KILL")
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()  # "ready", or EOF when a bind failed
        if line.strip() != "ready":
            self._proc.wait(HOLDER_READY_S)
            stderr = self._proc.stderr.read() if self._proc.stderr else ""
            self._proc = None
            raise FleetError(f"the node's mount namespace was not made: {stderr.strip()}")
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)


class NodeDaemon(pods.PodsDaemon):
    """A pod-capable containerd started inside a :class:`NodeNamespace` (through a wrapper that
    nsenters it and execs containerd in place: the PID, parent-death signal and argv stay)."""

    def __init__(self, engine: str, base_dir: pathlib.Path, *, data_dir: pathlib.Path) -> None:
        super().__init__(engine, base_dir, data_dir=data_dir)
        self.real_bin_dir = self.bin_dir
        self.bin_dir = self.base_dir / "bin"
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        for name in ("ctr", "containerd-shim-runc-v2"):
            link = self.bin_dir / name
            if not link.exists():
                link.symlink_to(self.real_bin_dir / name)

    def render_config(self) -> str:
        """The harness's config with containerd's root at the node's ``/var/lib/containerd`` (its
        namespace binds ``data_dir/root`` there): the path the CRI reports for the image
        filesystem (ImageFsInfo) is then one the manifest's mount shows the agent, as on a real node."""
        rendered = super().render_config()
        line = f"root = {json.dumps(str(self.data_dir / 'root'))}"
        if line not in rendered.splitlines():
            raise FleetError(f"containerd config without {line!r}")
        return rendered.replace(line, f"root = {json.dumps(NODE_ROOT)}", 1)

    def enter(self, namespace: NodeNamespace) -> None:
        wrapper = self.bin_dir / "containerd"
        wrapper.write_text(f'#!/bin/sh\nexec nsenter --mount={namespace.path} -- {self.real_bin_dir / "containerd"} "$@"\n')
        wrapper.chmod(0o755)


# --- a node -----------------------------------------------------------------------------------


@dataclasses.dataclass
class FleetNode:
    """One node: its address, namespace, containerd and kubelet (see the module doc)."""

    engine: str
    base_dir: pathlib.Path
    plane: ControlPlane
    sync_frequency: str
    change_detection: str = "Watch"
    address: str = ""
    name: str = ""
    fs: Optional[kubelet.LoopFs] = None
    namespace: Optional[NodeNamespace] = None
    daemon: Optional[NodeDaemon] = None
    node_kubelet: Optional[kubelet.Kubelet] = None
    started_seconds: float = 0.0

    @property
    def containerd(self) -> NodeDaemon:
        if self.daemon is None:
            raise FleetError(f"node {self.name or self.engine} has no containerd")
        return self.daemon

    @property
    def running_kubelet(self) -> kubelet.Kubelet:
        if self.node_kubelet is None:
            raise FleetError(f"node {self.name or self.engine} has no kubelet")
        return self.node_kubelet

    def start(self) -> FleetNode:
        began = time.monotonic()
        pods.runc_binary()
        runnable.busybox_path()
        self.address = claim_node_ip()
        self.name = node_name(self.address)
        self.fs = kubelet.LoopFs(self.base_dir / "imagefs", NODE_FS_BYTES).open()
        daemon = NodeDaemon(self.engine, self.base_dir / "daemon", data_dir=self.fs.path)
        if daemon.config_version >= 3:
            daemon.pinned_images = {"fleet": CONFIG_PINNED}
        self.daemon = daemon
        made = registered_kubelet(self.base_dir / "kubelet", "unix:///run/containerd/containerd.sock", self.plane,
                                  self.name, self.address, self.sync_frequency, self.change_detection,
                                  {RUNTIME_LABEL: self.engine})
        self.namespace = NodeNamespace(*self._binds(daemon, made)).start()
        daemon.enter(self.namespace)
        daemon.start()
        runnable.ensure_runnable_sandbox_image(daemon)
        if daemon.pinned_images:
            self.load_images([images.recipe(ref, seed=ref) for ref in daemon.pinned_images.values()])
        made.mount_namespace = self.namespace.path
        self.node_kubelet = made
        made.start()
        self.plane.wait_for(f"node {self.name} Ready", self.ready, NODE_READY_S)
        self.started_seconds = round(time.monotonic() - began, 1)
        return self

    def _binds(self, daemon: NodeDaemon, made: kubelet.Kubelet) -> tuple[list[tuple[pathlib.Path, str]], list[str]]:
        """The kubelet's private /var/lib, /var/log and tunables, a private /run, then containerd's
        root and socket directory over the paths the manifest mounts."""
        binds = made.namespace_binds()
        private_run = self.base_dir / "host" / "run"
        (private_run / "containerd").mkdir(parents=True, exist_ok=True)
        (made.base_dir / "host" / "var-lib" / "containerd").mkdir(parents=True, exist_ok=True)
        root = daemon.data_dir / "root"
        root.mkdir(parents=True, exist_ok=True)
        daemon.socket_dir.mkdir(parents=True, exist_ok=True)
        dirs = [pair for pair in binds if not pair[1].startswith("/proc/")]
        tunables = [pair for pair in binds if pair[1].startswith("/proc/")]
        ordered = [*dirs, (private_run, "/run"), (root, NODE_ROOT), (daemon.socket_dir, NODE_RUN), *tunables]
        return ordered, [NODE_RUN]

    def node_object(self) -> dict[str, Any]:
        return self.plane.kubectl_json("get", "node", self.name)

    def ready(self) -> bool:
        return node_ready(self.plane, self.name, self.running_kubelet)

    def load_images(self, recipes: list[images.ImageRecipe]) -> list[images.ImageInfo]:
        return images.load_images(self.containerd, self.base_dir / "work", recipes, cri.NAMESPACE)

    # --- what every kind of node offers the fleet's tests (see :class:`NodeKind`) --------------

    @property
    def cri_address(self) -> str:
        """The CRI socket the kubelet uses, as the host reaches it: containerd's own."""
        return self.containerd.address

    @property
    def runtime_version_prefix(self) -> str:
        return f"containerd://{self.engine.split('-')[1]}."

    @property
    def pin_namespace(self) -> str:
        return cri.NAMESPACE

    def prepare_agent(self, built: image_build.BuiltImage, name: str) -> None:
        """pinctl's image under ``name`` alone (the archive's name removed: the content stays, held by the other)."""
        image_build.import_image(self.containerd, built)
        self.retag(built.name, name)
        self.containerd.ctr("images", "rm", built.name)

    def load_samples(self, refs: Sequence[str]) -> None:
        self.load_images([images.recipe(ref, seed=ref) for ref in refs])

    def retag(self, source: str, target: str) -> None:
        """A second name for an image the node holds (``ctr images tag``), once the CRI lists it."""
        self.containerd.ctr("images", "tag", "--force", source, target)
        cri.wait_for_refs(self.cri_address, [target])

    def remove_images(self, refs: Sequence[str]) -> None:
        self.containerd.ctr("images", "rm", *refs, check=False)

    def pinned_by_pinctl(self) -> set[str]:
        """The references that carry pinctl's pin label in the CRI's namespace."""
        return {row.ref for row in self.containerd.images(self.pin_namespace) if row.labels.get(PIN_LABEL) == "pinned"}

    def pinctl_env(self) -> dict[str, str]:
        """What points pinctl, run on the host, at this node's runtime (with :meth:`pinctl_args`)."""
        return {"CONTAINERD_ADDRESS": self.containerd.address, "PINCTL_CONTAINERD_CONFIG": str(self.containerd.config_path)}

    def pinctl_args(self) -> list[str]:
        return ["-n", self.pin_namespace]

    def stop(self) -> None:
        """Kubelet, pods, containerd, namespace, filesystem, address: each step runs even if one before failed."""
        steps = []
        if self.node_kubelet is not None:
            steps.append(self.node_kubelet.stop)
        if self.daemon is not None:
            daemon = self.daemon
            steps += [lambda: _cleanup_pods(daemon), daemon.stop, daemon.kill_leftovers,
                      lambda: shutil.rmtree(daemon.runc_root, ignore_errors=True)]
        if self.namespace is not None:
            steps.append(self.namespace.stop)
        if self.fs is not None:
            steps.append(self.fs.close)
        if self.address:
            address = self.address
            steps.append(lambda: release_node_ip(address))
        run_all(steps)


def _cleanup_pods(daemon: NodeDaemon) -> None:
    if daemon.is_alive():
        with contextlib.suppress(cri.CriError):
            pods.Pods(daemon).cleanup()


class _Owner:
    """The thread that starts a node, then waits, then stops it (see :meth:`Fleet.start`)."""

    def __init__(self, node: NodeKind) -> None:
        self.node = node
        self.started = threading.Event()
        self.stopping = threading.Event()
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, name=f"fleet-{node.engine}", daemon=True)

    def _run(self) -> None:
        try:
            self.node.start()
        except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
            self.error = exc
        finally:
            self.started.set()
        self.stopping.wait()
        self.node.stop()


# --- the fleet --------------------------------------------------------------------------------


@dataclasses.dataclass
class Fleet:
    """Nodes of :data:`ENGINES` registered to ``plane``, started side by side."""

    plane: ControlPlane
    nodes: list[NodeKind]
    startup_seconds: float = 0.0
    _owners: list[_Owner] = dataclasses.field(default_factory=list)

    @classmethod
    def create(cls, plane: ControlPlane, base_dir: pathlib.Path, *, engines: Iterable[str] = ENGINES,
               sync_frequency: str = "1m") -> Fleet:
        # Both import this module.
        from tests.harness.cluster_crio_node import ENGINE as CRIO, CrioFleetNode
        from tests.harness.cluster_docker_node import ENGINE as DOCKER, DockerFleetNode

        nodes: list[NodeKind] = []
        for index, engine in enumerate(engines):
            directory = base_dir / f"node-{index}-{engine}"
            if engine == DOCKER:
                nodes.append(DockerFleetNode(directory, plane, sync_frequency))
            elif engine == CRIO:
                nodes.append(CrioFleetNode(directory, plane, sync_frequency))
            else:
                nodes.append(FleetNode(engine, directory, plane, sync_frequency))
        return cls(plane, nodes)

    def start(self) -> Fleet:
        """Every node at once, each in a thread of its own that lives as long as the node: the
        parent-death signal (``dying_with_parent``) fires when the *thread* that started a process
        ends, so a pool's worker would take its node's containerd and kubelet with it. When a node
        fails, all are stopped and the first error raised."""
        began = time.monotonic()
        self._owners = [_Owner(node) for node in self.nodes]
        for owner in self._owners:
            owner.thread.start()
        for owner in self._owners:
            owner.started.wait()
        errors = [owner.error for owner in self._owners if owner.error is not None]
        if errors:
            self.stop()
            raise errors[0]
        self.startup_seconds = round(time.monotonic() - began, 1)
        return self

    def stop(self) -> None:
        for owner in self._owners:
            owner.stopping.set()
        for owner in self._owners:
            owner.thread.join()
        self._owners = []

    def by_name(self) -> dict[str, NodeKind]:
        return {node.name: node for node in self.nodes}


# What makes a fleet impossible here (skip locally, fail with CI=true).
FLEET_UNAVAILABLE: tuple[type[BaseException], ...] = (
    FleetError, ControlPlaneError, kubelet.KubeletError, runnable.PodsUnavailable, cri.CriError, DaemonError,
    debs.EngineUnavailable, cluster_pki.PkiError, OSError)

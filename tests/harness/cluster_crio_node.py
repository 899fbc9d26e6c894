"""A fleet node whose runtime is CRI-O v1.34.0, registered to the harness's cluster.

Laid out as a packaged CRI-O node is: its config at ``/etc/crio/crio.conf`` with drop-ins in
``/etc/crio/crio.conf.d``, its socket at ``/run/crio/crio.sock``, its images in
``/var/lib/containers/storage`` (overlay, on the node's own loop filesystem) with the run root at
``/run/containers/storage``. Those are the paths the DaemonSet ``pinctl-crio``
(deploy/kubernetes/daemonset-crio.yaml) mounts; its agent keeps the policy in pinctl's drop-in
``zz-pinctl.conf`` and sends crio SIGHUP, finding it behind the socket (``hostPID``).

Like :class:`cluster_nodes.FleetNode` the node has its own address on ``lo`` and mount namespace,
which crio and the kubelet both join (nsenter), so that a hostPath is the same directory to the
kubelet that checks it and to crio that binds it. ``/etc`` there is an overlay over the host's
(its upper layer private to the node), so ``/etc/crio`` is made without touching the host; the
node's config directory is bound over it. The rest of what crio writes outside its roots
(tests/harness/crio.py) falls in the private ``/run``, ``/var/lib``, ``/var/log``,
``/var/cache`` and ``/var/tmp``. The host reaches the socket at its directory's own path.

There is no CRI call that adds an image but a pull, so the node has a loopback registry of its
own (Debian's docker-registry) that its registries.conf sends the pause image's domain and the
fleet tests' ``example.test`` to: pinctl's image, the samples and every retag are copied there with
skopeo and pulled through the CRI, as a CRI-O operator's images arrive. CNI: a loopback-only list
and Debian's loopback plugin (the network reads as ready; the agent's pod uses the host's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

from pinctl.refs import DEFAULT_DOMAIN
from tests.harness import cri, engines, gobuild, image_build, images, kubelet, runnable
from tests.harness import registry as reg
from tests.harness.cluster_nodes import (
    NODE_FS_BYTES, NODE_READY_S, RUNTIME_LABEL, SHIPPED_RUNTIME_LABEL, FleetError, NodeNamespace,
    claim_node_ip, node_name, node_ready, registered_kubelet, release_node_ip, run_all)
from tests.harness.containerd import CNI_CONFLIST
from tests.harness.control_plane import ControlPlane
from tests.harness.crictl import Crictl
from tests.harness import crio as crio_harness
from tests.harness.crio import PAUSE_IMAGE, CrioDaemon, CrioView, cgroups_as_mounted
from tests.harness.kubelet_periodic import remove_all_pods

ENGINE = "cri-o"
CRIO_ETC = "/etc/crio"
CRIO_RUN = "/run/crio"
STORAGE = "/var/lib/containers/storage"
RUNROOT = "/run/containers/storage"
# The domain of the fleet tests' images, pulled from the node's registry like the pause image's.
TEST_DOMAIN = "example.test"
PINCTL_DROPIN = "zz-pinctl.conf"
PINCTL_MARK = "# pinctl:"


class NodeCrio(CrioDaemon):
    """crio inside the node's namespace, at a packaged node's paths (see the module doc)."""

    storage_driver = "overlay"
    registry_prefixes = (DEFAULT_DOMAIN, TEST_DOMAIN)

    def __init__(self, base_dir: pathlib.Path, registry_host: str, *, etc_dir: pathlib.Path,
                 socket_dir: pathlib.Path) -> None:
        super().__init__(base_dir, registry_host)
        self.namespace = ""
        self.config_path = etc_dir / "crio.conf"
        self.dropin_dir = etc_dir / "crio.conf.d"
        self.address = str(socket_dir / "crio.sock")
        self.endpoint = f"unix://{self.address}"

    def view(self) -> CrioView:
        return CrioView(f"{CRIO_ETC}/crio.conf", f"{CRIO_ETC}/crio.conf.d", STORAGE, RUNROOT, f"{CRIO_RUN}/crio.sock")

    def argv(self) -> list[str]:
        # nsenter execs crio in place when it joins a mount namespace alone: the PID stays.
        return ["nsenter", f"--mount={self.namespace}", "--", *self.crio_argv()]

    def _namespace_binds(self) -> str:
        return ""  # the node's namespace holds them

    def write_config(self) -> None:
        super().write_config()
        (self.base_dir / "cni" / "net.d" / "10-pinctl.conflist").write_text(CNI_CONFLIST)


def registry_path(ref: str) -> str:
    """``example.test/fleet/a:1`` -> ``fleet/a:1``: where the node's registry holds a name."""
    return crio_harness.registry_path(ref, NodeCrio.registry_prefixes)


def crio_matches(item: str, name: str) -> bool:
    """CRI-O's pinned_images rule (tests/harness/crio.py): exact, trailing-``*`` prefix, or ``*keyword*``."""
    item, name = item.lower(), name.lower()
    if len(item) > 1 and item.startswith("*") and item.endswith("*"):
        return item[1:-1] in name
    if item.endswith("*"):
        return name.startswith(item[:-1])
    return item == name


@dataclasses.dataclass
class CrioFleetNode:
    """One CRI-O node: address, namespace, registry, crio, kubelet."""

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
    registry: Optional[reg.Registry] = None
    crio: Optional[NodeCrio] = None
    node_kubelet: Optional[kubelet.Kubelet] = None
    _socket_dir: Optional[pathlib.Path] = None

    runtime_version_prefix = "cri-o://"

    @property
    def running_kubelet(self) -> kubelet.Kubelet:
        if self.node_kubelet is None:
            raise FleetError(f"node {self.name or self.engine} has no kubelet")
        return self.node_kubelet

    @property
    def running_crio(self) -> NodeCrio:
        if self.crio is None:
            raise FleetError(f"node {self.name or self.engine} has no crio")
        return self.crio

    @property
    def cri_address(self) -> str:
        return self.running_crio.address

    @property
    def etc_dir(self) -> pathlib.Path:
        """The node's ``/etc/crio``, as the host reaches it."""
        return self.base_dir / "etc-crio"

    def crictl(self) -> Crictl:
        return Crictl(gobuild.binary(engines.CRICTL), self.running_crio.endpoint, self.base_dir / "crictl")

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> CrioFleetNode:
        began = time.monotonic()
        runnable.busybox_path()
        self.address = claim_node_ip()
        self.name = node_name(self.address)
        self.fs = kubelet.LoopFs(self.base_dir / "imagefs", NODE_FS_BYTES).open()
        self.registry = reg.Registry(self.base_dir / "registry").start()
        self._push_pause()
        # Short: a unix socket path holds 108 bytes, and pytest's directories are deep.
        self._socket_dir = pathlib.Path(tempfile.mkdtemp(prefix="crn", dir="/tmp"))
        self.crio = NodeCrio(self.base_dir / "crio", self.registry.host, etc_dir=self.etc_dir,
                             socket_dir=self._socket_dir)
        made = registered_kubelet(self.base_dir / "kubelet", f"unix://{CRIO_RUN}/crio.sock", self.plane, self.name, self.address,
                                  self.sync_frequency, self.change_detection,
                                  {RUNTIME_LABEL: self.engine, SHIPPED_RUNTIME_LABEL: ENGINE})
        self.namespace = NodeNamespace(*self._mounts(made)).start()
        self.crio.namespace = self.namespace.path
        self.crio.start()
        made.mount_namespace = self.namespace.path
        self.node_kubelet = made
        made.start()
        self.plane.wait_for(f"node {self.name} Ready", self.ready, NODE_READY_S)
        self.started_seconds = round(time.monotonic() - began, 1)
        return self

    def _push_pause(self) -> None:
        """The pause image, runnable (if crio keeps an infra container it runs it)."""
        assert self.registry is not None
        recipe = runnable.sandbox_recipe(f"{self.registry.host}/{registry_path(PAUSE_IMAGE)}")
        self.registry.push_runnable(self.base_dir / "push", recipe)

    def _mounts(self, made: kubelet.Kubelet) -> tuple[list[tuple[pathlib.Path, str]], list[str],
                                                      list[tuple[str, pathlib.Path, pathlib.Path]]]:
        """The kubelet's private /var/lib and /var/log, private /run, /var/cache and /var/tmp, an
        overlay over /etc, then crio's config, storage and socket directories where a packaged
        node has them, and the kubelet's and crio's kernel views."""
        assert self.fs is not None and self._socket_dir is not None
        binds = made.namespace_binds()
        host = self.base_dir / "host"
        private_run = host / "run"
        for below in ("crio", "containers/storage"):
            (private_run / below).mkdir(parents=True, exist_ok=True)
        (made.base_dir / "host" / "var-lib" / "containers" / "storage").mkdir(parents=True, exist_ok=True)
        etc_upper, etc_work = host / "etc-upper", host / "etc-work"
        (etc_upper / "crio").mkdir(parents=True, exist_ok=True)
        etc_work.mkdir(parents=True, exist_ok=True)
        (self.etc_dir / "crio.conf.d").mkdir(parents=True, exist_ok=True)
        storage = self.fs.path / "storage"
        storage.mkdir(parents=True, exist_ok=True)
        dirs = [pair for pair in binds if not pair[1].startswith("/proc/")]
        tunables = [pair for pair in binds if pair[1].startswith("/proc/")]
        for hidden in ("var-cache", "var-tmp"):
            (host / hidden).mkdir(parents=True, exist_ok=True)
        controllers = cgroups_as_mounted()
        if controllers is not None:
            (host / "proc-cgroups").write_text(controllers)
            tunables.append((host / "proc-cgroups", "/proc/cgroups"))
        ordered = [*dirs, (private_run, "/run"), (host / "var-cache", "/var/cache"), (host / "var-tmp", "/var/tmp"),
                   (self.etc_dir, CRIO_ETC), (storage, STORAGE), (self._socket_dir, CRIO_RUN), *tunables]
        # Shared, as every mount is on a systemd node: the manifest mounts both HostToContainer.
        return ordered, [CRIO_RUN, STORAGE], [("/etc", etc_upper, etc_work)]

    def ready(self) -> bool:
        if not self.running_crio.is_alive():
            raise FleetError(f"crio of {self.name} exited\n{self.running_crio.log_tail()}")
        return node_ready(self.plane, self.name, self.running_kubelet)

    def node_object(self) -> dict[str, Any]:
        return self.plane.kubectl_json("get", "node", self.name)

    # --- images: into the node's registry, then pulled through the CRI ---------------------------

    def _pull(self, refs: Sequence[str]) -> None:
        crictl = self.crictl()
        for ref in refs:
            crictl.run("pull", ref, timeout=600)
        cri.wait_for_refs(self.cri_address, list(refs))

    def prepare_agent(self, built: image_build.BuiltImage, name: str) -> None:
        assert self.registry is not None
        self.registry.copy_in(f"oci-archive:{built.archive}", registry_path(name))
        self._pull([name])

    def load_samples(self, refs: Sequence[str]) -> None:
        assert self.registry is not None
        for ref in refs:
            self.registry.push(self.base_dir / "push", images.recipe(f"{self.registry.host}/{registry_path(ref)}",
                                                                     seed=ref))
        self._pull(refs)

    def retag(self, source: str, target: str) -> None:
        assert self.registry is not None
        self.registry.copy_in(f"docker://{self.registry.host}/{registry_path(source)}", registry_path(target))
        self._pull([target])

    def remove_images(self, refs: Sequence[str]) -> None:
        self.crictl().run("rmi", *refs, check=False)

    def pinned_by_pinctl(self) -> set[str]:
        """The names the node holds that an item of pinctl's drop-in (``# pinctl:``) matches."""
        path = self.etc_dir / "crio.conf.d" / PINCTL_DROPIN
        text = path.read_text() if path.exists() else ""
        items = [line.split('"')[1] for line in text.splitlines() if PINCTL_MARK in line and line.count('"') >= 2]
        names = {tag for image in cri.list_images(self.cri_address) for tag in image.repo_tags}
        return {name for name in names if any(crio_matches(item, name) for item in items)}

    def pinctl_env(self) -> dict[str, str]:
        """pinctl on the host: crio's socket alone. crio's /etc/crio is the node's (its mount
        namespace), which pinctl reaches through /proc/PID/root."""
        return {"CONTAINER_RUNTIME_ENDPOINT": self.running_crio.endpoint}

    def pinctl_args(self) -> list[str]:
        return []

    # --- teardown ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Kubelet, pods, crio, its monitors, namespace, filesystem, registry, address: each step
        runs even if one before failed."""
        steps: list[Callable[[], object]] = []
        if self.node_kubelet is not None:
            steps.append(self.node_kubelet.stop)
        if self.crio is not None:
            made = self.crio
            steps += [lambda: _remove_pods(made), made.stop, lambda: _kill_monitors(made.base_dir)]
        if self.namespace is not None:
            steps.append(self.namespace.stop)
        if self.fs is not None:
            steps.append(self.fs.close)
        if self.registry is not None:
            steps.append(self.registry.stop)
        if self._socket_dir is not None:
            socket_dir = self._socket_dir
            steps.append(lambda: shutil.rmtree(socket_dir, ignore_errors=True))
        if self.address:
            address = self.address
            steps.append(lambda: release_node_ip(address))
        run_all(steps)


def _remove_pods(made: NodeCrio) -> None:
    """The kubelet's pods removed through the CRI while crio runs (conmon would outlive it)."""
    if made.is_alive():
        remove_all_pods(made.address)


def _kill_monitors(base_dir: pathlib.Path) -> None:
    """conmon (and what it watches) outlives crio: end each process whose argv names the node's
    crio directory (its exits directory is there)."""
    mark = str(base_dir).encode()
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if mark in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)

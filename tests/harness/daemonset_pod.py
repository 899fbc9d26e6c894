"""The DaemonSet's pod, run for real through containerd 1.7's CRI as deploy/kubernetes/daemonset.yaml
describes it: what a kubelet would make of the manifest, done here by hand (no kubelet runs).

* ``plan(manifest)`` reads the pod template strictly: every key of the pod, its container, the
  security contexts, mounts, volumes, ports and probes is either turned into what the CRI is
  given or named as having no effect on the runtime (scheduling, the API token). A key it does
  not know is an error, so a change to the manifest fails the pod test until it is handled
  here: the manifest and what the test runs stay in step.
* ``container_config`` is the CRI's ContainerConfig for it, as the kubelet builds one: command
  and args, each volumeMount as a Mount (a hostPath at a stand-in path the test gives, the
  ConfigMap at a directory kept as the kubelet keeps one, tests/harness/configmap.py), the
  container's securityContext over the pod's (uid, gid, read-only root, capabilities dropped,
  no privilege escalation, RuntimeDefault seccomp), resources as cgroup limits.
* The network: the pod has no hostNetwork, so it has a namespace of its own. Here containerd and
  its pods share one the harness makes with only loopback up (``DaemonSetNode``, no CNI), so port
  9736 is the pod's alone and nothing leaves the machine; ``get`` makes the probes' requests in
  it, as the kubelet reaches the pod's IP.
* The socket's directory is a shared mount, as /run is on a systemd node, so that the
  manifest's HostToContainer propagation can be honoured.

CRI field numbers (k8s.io/cri-api runtime/v1 api.proto) are written next to each.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import http.client
import json
import os
import pathlib
import re
import shutil
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from tests.harness import cri, cri_pods, pods, runnable
from tests.harness.pods import Pod, PodsDaemon
from tests.harness.protowire import Message

ROOT = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "kubernetes" / "daemonset.yaml"
ENGINE = "containerd-1.7"
# The image (about 200 MB unpacked, copied once more by the native snapshotter) and the pause image.
FS_BYTES = 1536 * 1024 * 1024
CLONE_NEWNET = 0x40000000
PROPAGATION = {None: 0, "None": 0, "HostToContainer": 1, "Bidirectional": 2}  # Mount.propagation (5)
HOST_PATH_TYPES = {"Socket": stat.S_ISSOCK, "Directory": stat.S_ISDIR, "File": stat.S_ISREG}

# Keys of the pod template that ask nothing of the runtime, and why.
NO_RUNTIME_EFFECT = {
    "automountServiceAccountToken": "false: no token volume to mount",
    "enableServiceLinks": "false: no service variables",
    "nodeSelector": "scheduling",
    "tolerations": "scheduling",
    "affinity": "scheduling",
    "priorityClassName": "scheduling and eviction",
    "imagePullPolicy": "the image is imported, never pulled",
}


class ManifestNotHandled(AssertionError):
    """The manifest says something the harness does not turn into what it runs."""


# -- the manifest, read strictly -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PlannedMount:
    container_path: str
    volume: str
    kind: str  # "hostPath" or "configMap"
    source: str  # the hostPath's path, or the ConfigMap's name
    host_type: str  # hostPath's type ("" for a ConfigMap)
    read_only: bool
    propagation: int
    default_mode: int  # a ConfigMap's file mode


@dataclasses.dataclass(frozen=True)
class PodPlan:
    name: str
    namespace: str
    container: str
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    mounts: tuple[PlannedMount, ...]
    ports: Mapping[str, int]
    liveness: tuple[str, int]  # path, port
    readiness: tuple[str, int]
    grace_seconds: int
    uid: int
    gid: int
    read_only_root: bool
    drop: tuple[str, ...]
    no_new_privs: bool
    seccomp_runtime_default: bool
    cpu_request_millis: int
    cpu_limit_millis: int
    memory_limit_bytes: int


def manifest() -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    return found


def plan(daemonset: dict[str, Any]) -> PodPlan:
    template = daemonset["spec"]["template"]
    pod = dict(template["spec"])
    containers = pod.pop("containers")
    if len(containers) != 1:
        raise ManifestNotHandled(f"{len(containers)} containers: the harness runs one")
    container = dict(containers[0])
    volumes = {volume["name"]: volume for volume in pod.pop("volumes", [])}
    pod_security = dict(pod.pop("securityContext", {}))
    grace = int(pod.pop("terminationGracePeriodSeconds", 30))
    _no_effect(pod, "pod")
    if pod:
        raise ManifestNotHandled(f"pod keys the harness does not run: {sorted(pod)}")

    security = {**_pod_level(pod_security), **_container_level(dict(container.pop("securityContext", {})))}
    ports = {port["name"]: int(port["containerPort"]) for port in container.pop("ports", [])
             if port.get("protocol", "TCP") == "TCP"}
    probes = {name: _probe(container.pop(name), ports) for name in ("livenessProbe", "readinessProbe")}
    resources = container.pop("resources", {})
    mounts = tuple(_mount(dict(mount), volumes) for mount in container.pop("volumeMounts", []))
    unused = set(volumes) - {mount.volume for mount in mounts}
    if unused:
        raise ManifestNotHandled(f"volumes mounted nowhere: {sorted(unused)}")
    found = PodPlan(
        name=daemonset["metadata"]["name"], namespace=daemonset["metadata"].get("namespace", "default"),
        container=container.pop("name"), image=container.pop("image"),
        command=tuple(container.pop("command", ())), args=tuple(container.pop("args", ())),
        mounts=mounts, ports=ports, liveness=probes["livenessProbe"], readiness=probes["readinessProbe"],
        grace_seconds=grace, uid=security["uid"], gid=security["gid"], read_only_root=security["read_only_root"],
        drop=security["drop"], no_new_privs=security["no_new_privs"], seccomp_runtime_default=security["seccomp"],
        cpu_request_millis=_millicpu(resources.get("requests", {}).get("cpu", "0")),
        cpu_limit_millis=_millicpu(resources.get("limits", {}).get("cpu", "0")),
        memory_limit_bytes=_bytes(resources.get("limits", {}).get("memory", "0")))
    _no_effect(container, "container")
    if container:
        raise ManifestNotHandled(f"container keys the harness does not run: {sorted(container)}")
    return found


def _no_effect(keys: dict[str, Any], where: str) -> None:
    for key in list(keys):
        if key in NO_RUNTIME_EFFECT:
            if key == "automountServiceAccountToken" and keys[key] is not False:
                raise ManifestNotHandled("a service account token would be mounted: the harness mounts none")
            if key == "enableServiceLinks" and keys[key] is not False:
                raise ManifestNotHandled("service links would set variables the harness does not set")
            del keys[key]


def _pod_level(security: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {"uid": None, "gid": None, "seccomp": False}
    found["uid"] = security.pop("runAsUser", None)
    found["gid"] = security.pop("runAsGroup", None)
    if security.pop("runAsNonRoot", False):
        raise ManifestNotHandled("runAsNonRoot: the harness runs uid 0")
    seccomp = security.pop("seccompProfile", {}).get("type")
    if seccomp not in (None, "RuntimeDefault"):
        raise ManifestNotHandled(f"seccompProfile {seccomp}: the harness applies RuntimeDefault only")
    found["seccomp"] = seccomp == "RuntimeDefault"
    if security:
        raise ManifestNotHandled(f"pod securityContext keys the harness does not run: {sorted(security)}")
    return {key: value for key, value in found.items() if value is not None}


def _container_level(security: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {"read_only_root": bool(security.pop("readOnlyRootFilesystem", False)),
                             "no_new_privs": security.pop("allowPrivilegeEscalation", True) is False}
    if "runAsUser" in security:
        found["uid"] = security.pop("runAsUser")
    if "runAsGroup" in security:
        found["gid"] = security.pop("runAsGroup")
    if security.pop("privileged", False):
        raise ManifestNotHandled("privileged: the harness runs unprivileged containers only")
    capabilities = dict(security.pop("capabilities", {}))
    found["drop"] = tuple(capabilities.pop("drop", ()))
    if capabilities:
        raise ManifestNotHandled(f"capabilities the harness does not run: {capabilities}")
    if security:
        raise ManifestNotHandled(f"container securityContext keys the harness does not run: {sorted(security)}")
    found.setdefault("uid", 0)
    found.setdefault("gid", 0)
    return found


def _probe(probe: dict[str, Any], ports: Mapping[str, int]) -> tuple[str, int]:
    get = probe.get("httpGet")
    if not get or set(probe) - {"httpGet", "periodSeconds", "timeoutSeconds", "failureThreshold",
                                 "successThreshold", "initialDelaySeconds"}:
        raise ManifestNotHandled(f"a probe the harness does not make: {probe}")
    port = get["port"]
    return get["path"], ports[port] if isinstance(port, str) else int(port)


def _mount(mount: dict[str, Any], volumes: Mapping[str, dict[str, Any]]) -> PlannedMount:
    name = mount.pop("name")
    path = mount.pop("mountPath")
    read_only = bool(mount.pop("readOnly", False))
    propagation = PROPAGATION.get(mount.pop("mountPropagation", None))
    if propagation is None or mount:
        raise ManifestNotHandled(f"volumeMount {name}: the harness does not run {mount or 'its propagation'}")
    volume = dict(volumes[name])
    volume.pop("name")
    if "hostPath" in volume and len(volume) == 1:
        host = volume["hostPath"]
        return PlannedMount(path, name, "hostPath", host["path"], host.get("type", ""), read_only, propagation, 0)
    if "configMap" in volume and len(volume) == 1:
        config = dict(volume["configMap"])
        if config.pop("items", None):
            raise ManifestNotHandled(f"volume {name}: configMap items are not laid out by the harness")
        mode = int(config.pop("defaultMode", 0o644))
        source = config.pop("name")
        if config:
            raise ManifestNotHandled(f"volume {name}: configMap keys {sorted(config)}")
        # The kubelet mounts ConfigMap volumes read-only whatever the mount says.
        return PlannedMount(path, name, "configMap", source, "", True, propagation, mode)
    raise ManifestNotHandled(f"volume {name}: {sorted(volume)} is not a volume the harness makes")


def _millicpu(quantity: Any) -> int:
    text = str(quantity)
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


def _bytes(quantity: Any) -> int:
    found = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", str(quantity))
    if found is None:
        raise ManifestNotHandled(f"memory quantity {quantity}")
    return int(found.group(1)) * {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}[found.group(2)]


# -- the CRI's ContainerConfig -------------------------------------------------------------------


def container_config(found: PodPlan, image: str, sources: Mapping[str, pathlib.Path], log_name: str) -> Message:
    """ContainerConfig for the plan; sources maps each hostPath path and each ConfigMap name to
    the test's stand-in for it on this machine."""
    mounts: list[tuple[int, Any]] = []
    for mount in found.mounts:
        if mount.source not in sources:
            raise ManifestNotHandled(f"the test gives no stand-in for {mount.kind} {mount.source}")
        host = sources[mount.source]
        if mount.host_type == "DirectoryOrCreate":  # what the kubelet does before it starts the pod
            os.makedirs(host, mode=0o755, exist_ok=True)
        check = HOST_PATH_TYPES.get(mount.host_type)
        if check is not None and not check(os.stat(host).st_mode):
            raise ManifestNotHandled(f"hostPath {mount.source} ({host}) is not a {mount.host_type}")
        # Mount: container_path (1), host_path (2), readonly (3), propagation (5).
        mounts.append((7, [(1, mount.container_path), (2, str(host)), (3, mount.read_only), (5, mount.propagation)]))
    # Capability: drop_capabilities (2); Int64Value: value (1); SecurityProfile: profile_type (1) RuntimeDefault = 0.
    security: list[tuple[int, Any]] = [
        (1, [(2, name) for name in found.drop]),
        (3, [(1, cri_pods.NAMESPACE_NODE)]),  # namespace_options.network: the pod's, shared with containerd here
        (5, [(1, found.uid)]),  # run_as_user
        (7, found.read_only_root),  # readonly_rootfs
        (11, found.no_new_privs),  # no_new_privs
        (12, [(1, found.gid)]),  # run_as_group
    ]
    if found.seccomp_runtime_default:
        security.append((15, [(1, 0)]))  # seccomp: RuntimeDefault
    # LinuxContainerResources as the kubelet computes them: cpu_period (1), cpu_quota (2), cpu_shares (3),
    # memory_limit_in_bytes (4).
    resources: list[tuple[int, Any]] = [(3, max(2, found.cpu_request_millis * 1024 // 1000))]
    if found.cpu_limit_millis:
        resources += [(1, 100_000), (2, max(1000, found.cpu_limit_millis * 100))]
    if found.memory_limit_bytes:
        resources.append((4, found.memory_limit_bytes))
    return [
        (1, [(1, found.container), (2, 0)]),  # metadata: name, attempt
        (2, [(1, image)]),  # image
        *[(3, part) for part in found.command],  # command
        *[(4, part) for part in found.args],  # args
        *mounts,
        (11, log_name),  # log_path, below the sandbox's log directory
        (15, [(1, resources), (2, security)]),  # linux: resources, security_context
    ]


# -- a node whose pods have a network of their own -----------------------------------------------


class NetnsPodsDaemon(PodsDaemon):
    """A pod-capable containerd, and so its pods, in a network namespace of the harness's with
    only loopback: a restarted daemon joins the same one (a file the namespace is bound to)."""

    def __init__(self, engine: str, base_dir: pathlib.Path, *, data_dir: pathlib.Path) -> None:
        super().__init__(engine, base_dir, data_dir=data_dir)
        self.netns = self.base_dir / "netns"
        real = self.bin_dir
        self.bin_dir = self.base_dir / "bin"
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        for name in ("ctr", "containerd-shim-runc-v2"):
            link = self.bin_dir / name
            if not link.exists():
                link.symlink_to(real / name)
        # nsenter execs containerd in place: the pid, the parent-death signal and the argv stay.
        wrapper = self.bin_dir / "containerd"
        wrapper.write_text(f'#!/bin/sh\nexec nsenter --net={self.netns} -- {real / "containerd"} "$@"\n')
        wrapper.chmod(0o755)

    def make_netns(self) -> None:
        self.netns.touch()
        for argv in (["unshare", f"--net={self.netns}", "true"],
                     ["nsenter", f"--net={self.netns}", "ip", "link", "set", "lo", "up"]):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            if proc.returncode != 0:
                raise runnable.PodsUnavailable(f"{' '.join(argv)}: {proc.stderr.strip()}")

    def drop_netns(self) -> None:
        _unmount(self.netns)

    def share_socket_dir(self) -> None:
        """The socket's directory as a shared mount of its own, as /run is on a systemd node: a
        mount with HostToContainer propagation needs its source to be shared (or a slave)."""
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        for argv in (["mount", "--bind", str(self.socket_dir), str(self.socket_dir)],
                     ["mount", "--make-shared", str(self.socket_dir)]):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            if proc.returncode != 0:
                raise runnable.PodsUnavailable(f"{' '.join(argv)}: {proc.stderr.strip()}")

    def unshare_socket_dir(self) -> None:
        _unmount(self.socket_dir)


def _unmount(path: pathlib.Path) -> None:
    for argv in (["umount", str(path)], ["umount", "-l", str(path)]):
        if subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0:
            break


def get(netns: pathlib.Path, port: int, path: str, timeout: float = 5.0) -> tuple[int, str]:
    """GET http://127.0.0.1:port/path inside the network namespace; (0, why) when nothing answers.

    The socket is made by a thread that joined the namespace (a socket stays in the namespace it
    was made in); the thread ends there, and the request runs here."""
    made: dict[str, Any] = {}

    def connect() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        handle = os.open(netns, os.O_RDONLY)
        try:
            if libc.setns(handle, CLONE_NEWNET) != 0:
                made["error"] = OSError(ctypes.get_errno(), "setns")
                return
        finally:
            os.close(handle)
        try:
            made["socket"] = socket.create_connection(("127.0.0.1", port), timeout)
        except OSError as err:
            made["error"] = err

    worker = threading.Thread(target=connect)
    worker.start()
    worker.join()
    if "error" in made:
        return 0, str(made["error"])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    connection.sock = made["socket"]
    try:
        connection.request("GET", path)
        reply = connection.getresponse()
        return reply.status, reply.read().decode()
    except OSError as err:
        return 0, str(err)
    finally:
        connection.close()


@dataclasses.dataclass
class RunningPod:
    """The pod and its one container, as started; the container's log in the CRI's format."""

    daemon: NetnsPodsDaemon
    pod: Pod
    container_id: str
    log_path: pathlib.Path

    def logs(self) -> list[dict[str, Any]]:
        """The JSON log lines pinctl wrote (CRI log format: time, stream, tag, the line)."""
        found = []
        try:
            text = self.log_path.read_text()
        except FileNotFoundError:
            return []
        for line in text.splitlines():
            parts = line.split(" ", 3)
            if len(parts) == 4 and parts[3].startswith("{"):
                found.append(json.loads(parts[3]))
        return found

    def messages(self) -> list[str]:
        return [line["msg"] for line in self.logs()]

    def wait_logged(self, message: str, count: int = 1, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.messages().count(message) < count:
            status = cri_pods.container_status(self.daemon.address, self.container_id)
            assert status.state == "running", f"container {status.state}, exit {status.exit_code}:\n{self.log_text()}"
            assert time.monotonic() < deadline, f"no {message!r} in {timeout} s:\n{self.log_text()}"
            time.sleep(0.1)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text()[-4000:]
        except FileNotFoundError:
            return "(no log)"

    def status(self) -> cri_pods.CriContainerStatus:
        return cri_pods.container_status(self.daemon.address, self.container_id)

    def stop(self, grace_seconds: int) -> float:
        """StopContainer as the kubelet asks it: SIGTERM, SIGKILL after the grace period."""
        started = time.monotonic()
        cri_pods.stop_container(self.daemon.address, self.container_id, grace_seconds)
        return time.monotonic() - started


def run_pod(daemon: NetnsPodsDaemon, found: PodPlan, image: str, sources: Mapping[str, pathlib.Path]) -> RunningPod:
    """The DaemonSet's pod on this node: its sandbox, then its container, started."""
    name = f"{found.name}-{os.getpid()}"
    log_dir = daemon.pod_log_dir / name
    log_dir.mkdir(parents=True, exist_ok=True)
    config = cri_pods.sandbox_config(name, log_dir)
    pod = Pod(cri_pods.run_pod_sandbox(daemon.address, config), name, config)
    request: Message = [(1, pod.id), (2, container_config(found, image, sources, f"{found.container}.log")),
                        (3, config)]
    container_id = cri_call_text(daemon.address, "CreateContainer", request)
    cri_pods.start_container(daemon.address, container_id)
    return RunningPod(daemon, pod, container_id, log_dir / f"{found.container}.log")


def cri_call_text(address: str, method: str, request: Message) -> str:
    from tests.harness.protowire import Reader, encode

    return Reader(cri.unary_call(address, cri_pods.RUNTIME + method, encode(request))).text(1)


@contextlib.contextmanager
def daemonset_node(base: pathlib.Path) -> Iterator[NetnsPodsDaemon]:
    """A pod-capable containerd 1.7 in a network namespace of its own, on a tmpfs for its root."""
    pods.runc_binary()
    runnable.busybox_path()
    for tool in ("nsenter", "unshare", "ip"):
        if shutil.which(tool) is None:
            raise runnable.PodsUnavailable(f"{tool} is not installed")
    fs = pods.DedicatedFs(base / "imagefs", FS_BYTES).open()
    daemon = NetnsPodsDaemon(ENGINE, base / "daemon", data_dir=fs.path)
    try:
        daemon.make_netns()
        daemon.share_socket_dir()
        daemon.start()
        runnable.ensure_runnable_sandbox_image(daemon)
        yield daemon
    finally:
        if daemon.is_alive():
            with contextlib.suppress(cri.CriError):
                pods.Pods(daemon).cleanup()
        daemon.stop()
        daemon.kill_leftovers()
        shutil.rmtree(daemon.runc_root, ignore_errors=True)
        fs.close()
        daemon.unshare_socket_dir()
        daemon.drop_netns()

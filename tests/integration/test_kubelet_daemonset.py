"""The DaemonSet's pod template, run by a real kubelet (v1.37, standalone) as a static pod on containerd 1.7.

The pod test (test_daemonset_pod.py) makes the CRI calls a kubelet would make; here the kubelet
of test_kubelet_harness.py makes them itself, from a static Pod manifest built from the template
in deploy/kubernetes/daemonset.yaml (read with yaml: :func:`static_pod` says every field it
changes and why). The image is the one the Containerfile makes (tests/harness/image_build.py,
cached per machine), imported into the node's containerd before the manifest is written. What
the kubelet did is read from the kubelet (its probe log lines, its own ``/pods`` endpoint: there
is no API server), the CRI and the container's /proc entries.

The node is the kubelet fixtures' (``kubelet_binary``, :class:`KubeletNode`), on an imagefs large
enough for the pinctl image: ``kubelet_node``'s 192 MiB is not, and its size is fixed.
"""

from __future__ import annotations

import contextlib
import copy
import json
import pathlib
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import engine_unavailable
from tests.harness import cri, cri_pods, daemonset_pod, debs, image_build, images, kubelet, runnable
from tests.harness.configmap import ConfigMapVolume
from tests.harness.containerd import DaemonError
from tests.harness.kubernetes_build import KubeletBuild
from tests.harness.kubelet_fixtures import ENGINE, KubeletNode

pytestmark = pytest.mark.integration

CONFIGMAP = daemonset_pod.ROOT / "deploy" / "kubernetes" / "configmap.yaml"
# The pinctl image unpacked (native snapshotter: about 200 MB, once more per container) and the pause image.
NODE_FS_BYTES = daemonset_pod.FS_BYTES
PIN = "io.cri-containerd.pinned"
# configmap.yaml's policy names it exactly; the other it does not cover.
COVERED = "example.test/observability/node-exporter:v1.8.2"
NOT_COVERED = "example.test/unlisted/app:1"
# Deadlines, not expectations: each wait returns as soon as its line comes. The liveness probe's
# first run can be a whole periodSeconds (20) after the pod is admitted, and a busy machine's
# pinctl answers its first probe later still.
POD_TIMEOUT_S = 90.0
PROBE_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
PROBE_SUCCEEDED = r'"Probe succeeded" probeType="{kind}" pod="{namespace}/{name}"[^\n]* containerName="{container}"'


@pytest.fixture
def daemonset_kubelet_node(kubelet_binary: KubeletBuild, agent_image: image_build.BuiltImage,
                           tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeletNode]:
    """kubelet_node's containerd 1.7 on a loop-mounted ext4 (here 1.5 GiB), the pinctl image
    imported, and its socket directory a shared mount of its own, as /run is on a systemd node
    (the manifest mounts it with HostToContainer propagation, which needs a shared source)."""
    base = tmp_path_factory.mktemp("kubelet-daemonset")
    try:
        context = kubelet.node_daemon(base, NODE_FS_BYTES, ENGINE)
        daemon, fs = context.__enter__()
    except (runnable.PodsUnavailable, debs.EngineUnavailable, DaemonError, cri.CriError, OSError) as exc:
        engine_unavailable(f"{ENGINE} for a kubelet unavailable: {exc}")
    node = KubeletNode(daemon, fs, base, kubelet_binary)
    shared = False
    try:
        for argv in (["mount", "--bind", str(daemon.socket_dir), str(daemon.socket_dir)],
                     ["mount", "--make-shared", str(daemon.socket_dir)]):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            if proc.returncode != 0:
                engine_unavailable(f"{' '.join(argv)}: {proc.stderr.strip()}")
            shared = True
        image_build.import_image(daemon, agent_image)
        yield node
    finally:
        for made in node.kubelets:
            made.stop()
        context.__exit__(None, None, None)
        if shared:
            for argv in (["umount", str(daemon.socket_dir)], ["umount", "-l", str(daemon.socket_dir)]):
                if subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0:
                    break


def static_pod(daemonset: dict[str, Any], stand_ins: dict[str, pathlib.Path], port: int) -> dict[str, Any]:
    """The DaemonSet's pod template as a static Pod. What is changed, and why:

    * ``apiVersion``/``kind``/``metadata``: a Pod named and namespaced as the DaemonSet, with the
      template's labels (a DaemonSet controller would name it ``pinctl-<hash>``; the kubelet
      names a static pod ``<name>-<node name>``).
    * ``spec.hostNetwork: true``: a pod network needs a CNI plugin, and the harness's
      containerd has none (its conflist names ``loopback`` only to read as network-ready; no
      binary is installed): without it the sandbox fails, "failed to setup network for
      sandbox ... failed to find plugin loopback". The pod shares the node's network, as every
      static pod of the harness does; the kubelet, with no API server and no node address,
      probes ``http://:<port>``, the local host.
    * the container's ``--metrics-address`` argument and the ``metrics`` port's
      ``containerPort``: ``127.0.0.1:<free port>`` for ``0.0.0.0:9736``. On the node's network
      ``0.0.0.0`` would listen on this machine's every interface, and 9736 may be taken; the
      probes name the port ``metrics``, so they follow it unchanged.
    * ``volumes``: each hostPath's ``path`` (/run/containerd, /var/lib/containerd) becomes the
      test containerd's socket directory and root; the ConfigMap volume (no API server to read
      the ConfigMap from) becomes a hostPath ``Directory`` laid out as the kubelet lays out a
      ConfigMap volume (tests/harness/configmap.py: timestamped directory at the defaultMode,
      ``..data`` symlink, a symlink per key). Mounts, mount paths, readOnly and propagation are
      the manifest's.

    Nothing else (image, pull policy, command, probes, security contexts, resources, grace
    period, scheduling keys, token and service links) is touched.
    """
    template = copy.deepcopy(daemonset["spec"]["template"])
    spec = template["spec"]
    spec["hostNetwork"] = True
    (container,) = spec["containers"]
    args = container["args"]
    args[args.index("--metrics-address") + 1] = f"127.0.0.1:{port}"
    (metrics,) = [entry for entry in container["ports"] if entry["name"] == "metrics"]
    metrics["containerPort"] = port
    for volume in spec["volumes"]:
        if "hostPath" in volume:
            volume["hostPath"]["path"] = str(stand_ins[volume["hostPath"]["path"]])
        elif "configMap" in volume:
            volume["hostPath"] = {"path": str(stand_ins[volume.pop("configMap")["name"]]), "type": "Directory"}
        else:
            raise AssertionError(f"volume {volume['name']}: no stand-in for {sorted(volume)}")
    metadata = {"name": daemonset["metadata"]["name"], "namespace": daemonset["metadata"]["namespace"],
                "labels": template["metadata"]["labels"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def write_static_pod(made: kubelet.Kubelet, pod: dict[str, Any]) -> pathlib.Path:
    """As Kubelet.add_static_pod: under a hidden name (the kubelet skips those), then renamed."""
    made.manifest_dir.mkdir(parents=True, exist_ok=True)
    name = pod["metadata"]["name"]
    staging = made.manifest_dir / f".{name}.json"
    staging.write_text(json.dumps(pod, indent=2) + "\n")
    path = made.manifest_dir / f"{name}.json"
    staging.rename(path)
    return path


def kubelet_pods(made: kubelet.Kubelet) -> list[dict[str, Any]]:
    """The kubelet's own /pods (its pods with the status its status manager holds): HTTPS with
    the kubelet's self-signed certificate, on 127.0.0.1, anonymous and AlwaysAllow."""
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=unverified))
    with opener.open(f"https://127.0.0.1:{made.port}/pods", timeout=5) as reply:
        found: list[dict[str, Any]] = json.load(reply)["items"]
    return found


def wait_until(what: str, check: Callable[[], Any], timeout: float, tail: Callable[[], str]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not {what} after {timeout}s:\n{tail()}"
        time.sleep(0.2)


def running_container(node: KubeletNode, sandbox_name: str) -> cri_pods.CriContainer | None:
    sandboxes = {sandbox.id: sandbox for sandbox in cri_pods.list_pod_sandboxes(node.address)}
    for container in cri_pods.list_containers(node.address):
        sandbox = sandboxes.get(container.pod_sandbox_id)
        if sandbox is not None and sandbox.name == sandbox_name and container.state == "running":
            return container
    return None


def task_pid(node: KubeletNode, container_id: str) -> int:
    for line in node.daemon.ctr("tasks", "ls").stdout.splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == container_id:
            return int(pid)
    raise AssertionError(f"no task {container_id}")


def pinned(node: KubeletNode, ref: str) -> bool:
    return {row.ref: row.labels for row in node.daemon.images()}.get(ref, {}).get(PIN) == "pinned"


def pod_messages(made: kubelet.Kubelet) -> list[str]:
    """pinctl's JSON log lines, from the container log the kubelet keeps (CRI log format)."""
    found = []
    for log in (made.base_dir / "pod-logs").glob("*/*/*.log"):
        found.extend(_messages(log.read_text(errors="replace")))
    return found


def _messages(text: str) -> list[str]:
    found = []
    for line in text.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[3].startswith("{"):
            found.append(json.loads(parts[3]).get("msg", ""))
    return found


class HeldLogs:
    """The pod's log files held open: once the static pod is gone the kubelet deletes its log
    directory, sometimes before the test reads it, and an open file outlives its name."""

    def __init__(self, made: kubelet.Kubelet) -> None:
        self.files = [log.open("rb") for log in (made.base_dir / "pod-logs").glob("*/*/*.log")]

    def messages(self) -> list[str]:
        found = []
        for held in self.files:
            held.seek(0)
            found.extend(_messages(held.read().decode(errors="replace")))
        return found

    def close(self) -> None:
        for held in self.files:
            held.close()


def test_the_kubelet_runs_the_daemonsets_pod_template_as_a_static_pod(
    daemonset_kubelet_node: KubeletNode, agent_image: image_build.BuiltImage, tmp_path: pathlib.Path,
    record_property: Callable[[str, object], None],
) -> None:
    began = time.monotonic()
    node = daemonset_kubelet_node
    daemonset = daemonset_pod.manifest()
    # Read strictly: a manifest key the pod harness does not know fails here too.
    found = daemonset_pod.plan(daemonset)
    (config_mount,) = [mount for mount in found.mounts if mount.kind == "configMap"]
    volume = ConfigMapVolume(tmp_path / "configmap", default_mode=config_mount.default_mode)
    volume.write(yaml.safe_load(CONFIGMAP.read_text())["data"])
    stand_ins = {"/run/containerd": node.daemon.socket_dir, "/var/lib/containerd": node.daemon.data_dir / "root",
                 config_mount.source: volume.root, "/var/lib/pinctl/history": tmp_path / "history"}
    node.load_images([images.recipe(ref, seed=ref) for ref in (COVERED, NOT_COVERED)])
    port = kubelet.free_port()
    pod = static_pod(daemonset, stand_ins, port)
    assert pod["spec"]["containers"][0]["image"] == found.image and "configMap" not in json.dumps(pod)

    made = node.start(node.new_kubelet())
    write_static_pod(made, pod)
    sandbox_name = f"{found.name}-{made.node_name}"
    container = wait_until("running", lambda: running_container(node, sandbox_name), POD_TIMEOUT_S, made.log_tail)
    assert container.name == found.container and agent_image.name in (container.image, *_refs(node, container.image_ref))
    running = time.monotonic() - began

    # The manifest's security context, as the container's process has it.
    pid = task_pid(node, container.id)
    status = dict(line.split(":\t", 1) for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines()
                  if ":\t" in line)
    assert status["Uid"].split() == [str(found.uid)] * 4 and status["Gid"].split() == [str(found.gid)] * 4
    assert found.drop == ("ALL",) and int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0
    assert int(status["CapPrm"], 16) == 0 and status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"
    mounted = {line.split()[4]: line.split() for line in pathlib.Path(f"/proc/{pid}/mountinfo").read_text().splitlines()}
    assert found.read_only_root
    for path in ("/", *(mount.container_path for mount in found.mounts if mount.read_only)):
        assert "ro" in mounted[path][5].split(","), f"{path} is not read-only: {mounted[path]}"
    (run_mount,) = [mount for mount in found.mounts if mount.container_path == "/run/containerd"]
    assert run_mount.propagation == 1 and any(field.startswith("master:") for field in mounted["/run/containerd"][6:])
    argv = [part.decode() for part in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if part]
    assert argv[-len(found.args):] == pod["spec"]["containers"][0]["args"], argv

    # The kubelet's probes, on the manifest's paths at the metrics port: both succeed, and its
    # status manager holds the container ready.
    names = {"namespace": pod["metadata"]["namespace"], "name": sandbox_name, "container": found.container}
    assert (found.readiness[0], found.liveness[0]) == ("/readyz", "/healthz")
    ready_line = made.wait_for_log(PROBE_SUCCEEDED.format(kind="Readiness", **names), PROBE_TIMEOUT_S)
    alive = made.wait_for_log(PROBE_SUCCEEDED.format(kind="Liveness", **names), PROBE_TIMEOUT_S)
    # A probe that came before pinctl listened (a busy machine starts it slowly) is refused, and
    # the manifest's failureThreshold allows for it; once it answered, liveness must never fail.
    assert '"Probe failed" probeType="Liveness"' not in made.log_text()[alive.end():]

    def ready_status() -> dict[str, Any] | None:
        for item in kubelet_pods(made):
            if item["metadata"]["name"] == sandbox_name:
                statuses = item.get("status", {}).get("containerStatuses", [])
                if statuses and statuses[0].get("ready"):
                    return statuses[0]
        return None

    ready = wait_until("ready in the kubelet's /pods", ready_status, 60, made.log_tail)
    assert ready["name"] == found.container and ready["restartCount"] == 0 and "running" in ready["state"]
    assert ready["containerID"] == f"containerd://{container.id}"
    probed = time.monotonic() - began

    # The mounted policy at work: the image it names pinned, the other not.
    wait_until(f"{COVERED} pinned", lambda: pinned(node, COVERED), 60, lambda: "\n".join(pod_messages(made)))
    assert not pinned(node, NOT_COVERED)
    assert {"full sync", "pinned"} <= set(pod_messages(made)), pod_messages(made)

    # Without its manifest, the kubelet stops the pod: pinctl exits 0 on the SIGTERM.
    held = HeldLogs(made)
    assert held.files, "no container log to hold"
    before = len(made.log_text())
    made.remove_static_pod(found.name)
    wait_until("the pod stopped", lambda: nothing_runs(node), STOP_TIMEOUT_S, made.log_tail)
    with contextlib.suppress(cri.CriError):  # the kubelet may have removed the container already
        final = cri_pods.container_status(node.address, container.id)
        assert final.exit_code == 0, final
    messages = held.messages()
    held.close()
    assert messages and messages[-1] == "stopped", messages[-5:]
    # pinctl answers its probes until it exits. The kubelet's prober may still ask once after
    # the container has exited and before it notices (refused, and nothing pinctl can answer):
    # only a failure while the container ran counts.
    stopping = made.log_text()[before:]
    exited = stopping.find('"Container exited normally"')
    assert exited > 0, "the kubelet never saw the container exit"
    assert not stopping[:exited].count('"Probe failed"'), stopping[:exited][-3000:]
    seconds = time.monotonic() - began
    record_property("kubelet_daemonset_s", round(seconds, 1))
    print(f"static pod running {running:.1f}s, probed ready {probed:.1f}s, stopped {seconds:.1f}s after the start "  # noqa: T201
          f"(the readiness line at {made.line_time(ready_line):%H:%M:%S.%f}); image cached: {agent_image.cached}")


def nothing_runs(node: KubeletNode) -> bool:
    running = [c for c in cri_pods.list_containers(node.address) if c.state == "running"]
    return not running and not any(sandbox.ready for sandbox in cri_pods.list_pod_sandboxes(node.address))


def _refs(node: KubeletNode, image_id: str) -> list[str]:
    return [name for image in cri.list_images(node.address) if image.id == image_id for name in image.repo_tags]

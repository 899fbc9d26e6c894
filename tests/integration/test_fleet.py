"""pinctl's DaemonSets rolled out by Kubernetes itself, on nodes of four runtimes, with kubectl only (issue 33).

The session's control plane (``control_plane``) and its fleet (``fleet``, tests/harness/
cluster_nodes.py): a containerd 1.7 node (pins are labels), a containerd 2.1 node (labels too,
and a ``pinned_images`` entry of its own CRI config), a Docker node (tests/harness/
cluster_docker_node.py: cri-dockerd v0.4.3, which pins nothing but its sandbox image, behind
``pinctl cri-proxy``, the kubelet pointed at the proxy, the node labelled
``pinctl.io/runtime=cri-dockerd``) and a CRI-O v1.34.0 node (tests/harness/cluster_crio_node.py:
pins are CRI-O's files, pinctl's own drop-in and a SIGHUP; labelled ``pinctl.io/runtime=cri-o``),
each with its own kubelet registered to the API server, address on lo and mount namespace in
which the shipped hostPaths (/run/containerd, /var/lib/containerd, /run/pinctl, /var/lib/docker,
/run/crio, /etc/crio, /var/lib/containers/storage) are that node's. Into each node's runtime the
test puts pinctl's image (built from the Containerfile, tests/harness/image_build.py) under the
name the overlay gives it, and the policy's sample images; then ``kubectl apply -k`` of an
overlay whose base is the repository's deploy/kubernetes (tests/harness/fleet_deploy.py says
each change and why: kustomize's ``images:``, ``hostNetwork: true`` since there is no CNI, and
the metrics address ``$(POD_IP):9736`` from the downward API so the agents sharing this
machine's network do not collide). Nothing else of the manifests is patched: the node selection,
the hostPaths, the security contexts, the probes, the token and the namespace are the shipped
ones. The policy is a patch of the base's ConfigMap naming images present on the nodes.

The DaemonSet controller makes the pods (``pinctl`` on the containerd nodes, ``pinctl-cri-dockerd``
on the Docker node, ``pinctl-crio`` on the CRI-O node), the scheduler binds them, the kubelets run them and probe them; the test
reads the cluster through kubectl, each node's pins through the CRI its kubelet uses (``pinned``:
what the kubelet's image GC honours; on the Docker node, the proxy's answer, while cri-dockerd's
own says unpinned), pinctl's own pins (labels in ``k8s.io`` or in ``moby``, items of its CRI-O
drop-in) and ``pinctl ls``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import pytest
import yaml

from tests.harness import cri, cri_pods, fleet_deploy, image_build
from tests.harness.cluster_crio_node import PINCTL_DROPIN, CrioFleetNode
from tests.harness.cluster_docker_node import DockerFleetNode
from tests.harness.cluster_nodes import CONFIG_PINNED, Fleet, FleetNode, NodeKind
from tests.harness.control_plane import ControlPlane
from tests.harness.fleet_deploy import NAMESPACE, Overlay

pytestmark = pytest.mark.integration

AGENT = "example.test/pinctl/agent"
AGENT_V1 = f"{AGENT}:fleet-1"
# Covered by the policy: one by a glob, one exactly; the third by nothing.
COVERED_GLOB = "example.test/fleet/platform/proxy:1"
COVERED_EXACT = "example.test/fleet/api:2.14"
NOT_COVERED = "example.test/fleet/other:1"
# On every node from the start, covered only once the edited policy is applied.
ADDED = "example.test/fleet/added:1"
PATTERNS = ["example.test/fleet/platform/*", COVERED_EXACT]
EDITED = [*PATTERNS, ADDED]
SAMPLES = (COVERED_GLOB, COVERED_EXACT, NOT_COVERED, ADDED)
AGENT_V2 = f"{AGENT}:fleet-2"
# The kubelet rewrites a ConfigMap volume at the pod's next sync: within syncFrequency x 1.5
# (FLEET_SYNC_FREQUENCY, 10s), then pinctl within 3 s; generous on a busy machine.
POLICY_S = 180.0
# Generous: a busy machine, each pod of a rollout in turn (the overlay probes readiness every 2 s).
ROLLOUT_S = 300.0
PIN_S = 60.0


@dataclasses.dataclass
class Deployed:
    fleet: Fleet
    plane: ControlPlane
    overlay: Overlay
    seconds: float  # from kubectl apply to every pod Ready


@pytest.fixture(scope="module")
def deployed(fleet: Fleet, agent_image: image_build.BuiltImage, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    plane = fleet.plane
    with futures.ThreadPoolExecutor(max_workers=len(fleet.nodes)) as pool:
        list(pool.map(lambda node: fleet_deploy.prepare(node, agent_image, AGENT_V1, SAMPLES), fleet.nodes))
    overlay = Overlay(tmp_path_factory.mktemp("overlay"), AGENT_V1, fleet_deploy.policy(PATTERNS))
    overlay.write()
    began = time.monotonic()
    plane.kubectl("apply", "-k", str(overlay.directory))
    try:
        plane.wait_for("the DaemonSet rolled out on every node",
                       lambda: fleet_deploy.rolled_out(plane, len(fleet.nodes), AGENT_V1), ROLLOUT_S)
        yield Deployed(fleet, plane, overlay, round(time.monotonic() - began, 1))
    finally:
        # The session's fleet outlives this module: leave it with no agent on it.
        plane.kubectl("delete", "-k", str(overlay.directory), "--wait=true", "--timeout=120s", check=False)


def wait_until(what: str, check: Callable[[], Any], timeout: float, tail: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not {what} after {timeout}s\n{tail()}"
        time.sleep(0.5)


def test_kubectl_apply_puts_one_ready_pod_on_every_node(deployed: Deployed,
                                                        record_property: Callable[[str, object], None]) -> None:
    plane, nodes = deployed.plane, deployed.fleet.by_name()
    daemonsets = {name: fleet_deploy.daemonset_status(plane, name) for name in fleet_deploy.DAEMONSETS}
    for name, found in daemonsets.items():
        status = found["status"]
        wanted = sum(fleet_deploy.daemonset_of(node) == name for node in nodes.values())
        assert status["desiredNumberScheduled"] == status["numberReady"] == status["currentNumberScheduled"] == wanted
    pods = [pod for pod in fleet_deploy.agent_pods(plane) if not pod["metadata"].get("deletionTimestamp")]
    # One per node, made by that node's runtime's DaemonSet controller (its controller reference) ...
    assert sorted(pod["spec"]["nodeName"] for pod in pods) == sorted(nodes)
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        expected = fleet_deploy.daemonset_of(nodes[pod["spec"]["nodeName"]])
        assert (owner["kind"], owner["name"], owner["uid"], owner.get("controller")) == (
            "DaemonSet", expected, daemonsets[expected]["metadata"]["uid"], True)
        # ... bound by the scheduler: the controller asks for the node by affinity, not nodeName.
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert [field["values"] for term in terms["nodeSelectorTerms"] for field in term["matchFields"]] == [
            [pod["spec"]["nodeName"]]]
        node = nodes[pod["spec"]["nodeName"]]
        # Ready by that node's kubelet's probes; host network: the pod IP is the node's address.
        assert fleet_deploy.pod_ready(pod), pod["status"]
        (container,) = pod["status"]["containerStatuses"]
        assert container["ready"] and container["restartCount"] == 0 and "running" in container["state"]
        assert pod["spec"]["containers"][0]["image"] == AGENT_V1
        (held,) = [image for image in cri.list_images(node.cri_address) if AGENT_V1 in image.repo_tags]
        # The image the node holds under that name: by its ID, or (CRI-O) by a digest of its name.
        assert container["imageID"].rpartition("@")[2] == held.id or container["imageID"] in held.repo_digests
        assert container["image"] == AGENT_V1
        assert pod["status"]["podIP"] == pod["status"]["hostIP"] == node.address
        runtime = plane.kubectl_json("get", "node", node.name)["status"]["nodeInfo"]["containerRuntimeVersion"]
        assert runtime.startswith(node.runtime_version_prefix), runtime
    scheduled = {event["involvedObject"]["name"]: event for event in
                 plane.kubectl_json("-n", NAMESPACE, "get", "events", "--field-selector", "reason=Scheduled")["items"]}
    for pod in pods:
        event = scheduled[pod["metadata"]["name"]]
        assert "default-scheduler" in (event.get("reportingComponent"), event.get("source", {}).get("component"))
        assert pod["spec"]["nodeName"] in event["message"]
    record_property("fleet_rollout_s", deployed.seconds)
    print(f"fleet of {len(nodes)} up in {deployed.fleet.startup_seconds}s, "  # noqa: T201
          f"DaemonSet ready {deployed.seconds}s after kubectl apply")


def has_gc_figures(node: NodeKind) -> bool:
    return metric(node, "pinctl_image_fs_capacity_bytes") > 0


def test_every_node_pins_the_policys_images(deployed: Deployed) -> None:
    for node in deployed.fleet.nodes:
        def covered_pinned(node: NodeKind = node) -> bool:
            pinned = fleet_deploy.cri_pinned(node)
            return pinned.get(COVERED_GLOB) is True and pinned.get(COVERED_EXACT) is True

        wait_until(f"the policy's images pinned on {node.name}", covered_pinned, PIN_S)
        pinned = fleet_deploy.cri_pinned(node)
        assert pinned[NOT_COVERED] is False and pinned[AGENT_V1] is False
        assert {COVERED_GLOB, COVERED_EXACT} <= node.pinned_by_pinctl()
        assert NOT_COVERED not in node.pinned_by_pinctl()
        rows = fleet_deploy.ls_rows(node)
        assert rows[COVERED_GLOB]["pinned"] and rows[COVERED_EXACT]["pinned"] and not rows[NOT_COVERED]["pinned"]
        if isinstance(node, DockerFleetNode):
            # The kubelet sees these pins through the proxy alone: cri-dockerd 0.4.3 reports none of them.
            direct = {tag: image.pinned for image in cri.list_images(node.runtime_address) for tag in image.repo_tags}
            assert not direct[COVERED_GLOB] and not direct[COVERED_EXACT]
        if isinstance(node, CrioFleetNode):
            # Through pinctl's drop-in and a SIGHUP: the site's files stay as they were, and
            # crio logged the reload the agent asked for.
            assert sorted(path.name for path in (node.etc_dir / "crio.conf.d").iterdir()) == [PINCTL_DROPIN]
            assert "Configuration reload completed" in node.running_crio.log_text()
        if isinstance(node, FleetNode) and node.containerd.config_version >= 3:
            # containerd 2.1 pins its own config's entry; the agent's policy does not name it.
            assert pinned[CONFIG_PINNED] is True
            assert "containerd-config" in {reason["kind"] for reason in rows[CONFIG_PINNED]["reasons"]}
        # The image filesystem's figures: the CRI's path is below the manifest's /var/lib/containerd mount.
        wait_until(f"the GC figures of {node.name}", functools.partial(has_gc_figures, node), PIN_S + 90,
                   functools.partial(fleet_deploy.metrics, node))
        assert metric(node, "pinctl_check_errors_total", part="gc") == 0
        # gc plan on the host reads the same filesystem as the agent in its pod: the runtime's
        # image store is the node's (its mount namespace), not what the host has at that path.
        plan = fleet_deploy.pinctl_json(node, "gc", "plan", codes=(0, 1))["gc"]
        assert plan["filesystem"]["capacity_bytes"] == metric(node, "pinctl_image_fs_capacity_bytes"), plan
    for node in deployed.fleet.nodes:
        messages = [line.get("msg") for line in fleet_deploy.pod_messages(deployed.plane,
                                                                          fleet_deploy.pod_on(deployed.plane, node)["metadata"]["name"])]
        assert "full sync" in messages and "pinned" in messages, messages
        if isinstance(node, CrioFleetNode):
            # The shared policy's namespaces mean nothing on CRI-O: said once, in the log's format.
            ignored = [text for text in messages if "CRI-O has no namespaces" in str(text)]
            assert len(ignored) == 1, messages


def test_the_pods_have_no_token_and_the_manifest_no_rbac(deployed: Deployed) -> None:
    plane = deployed.plane
    for pod in fleet_deploy.agent_pods(plane):
        spec = pod["spec"]
        assert spec.get("automountServiceAccountToken") is False
        projected = [volume for volume in spec.get("volumes", []) if "projected" in volume]
        assert projected == [], projected
        (container,) = spec["containers"]
        mounts = {mount["mountPath"] for mount in container.get("volumeMounts", [])}
        assert not any(path.startswith("/var/run/secrets") for path in mounts), mounts
    # What operators apply: a namespace, a ConfigMap, a DaemonSet per runtime; no account, role or binding.
    rendered = [doc for doc in yaml.safe_load_all(plane.kubectl("kustomize", str(fleet_deploy.BASE)).stdout) if doc]
    assert sorted(doc["kind"] for doc in rendered) == sorted(
        ["ConfigMap", "Namespace", *["DaemonSet"] * len(fleet_deploy.DAEMONSETS)])
    # And none is needed: nothing in the cluster grants the namespace's accounts anything, yet every pod is Ready.
    for kind in ("rolebindings", "clusterrolebindings"):
        bindings = plane.kubectl_json("get", kind, "-A")["items"]
        named = [binding["metadata"]["name"] for binding in bindings for subject in binding.get("subjects") or []
                 if subject.get("namespace") == NAMESPACE or NAMESPACE in subject.get("name", "").split(":")]
        assert named == [], (kind, named)
    assert all(fleet_deploy.pod_ready(pod) for pod in fleet_deploy.agent_pods(plane))


# --- the policy changed with kubectl -------------------------------------------------------------


def apply_config(deployed: Deployed, config: str, *, keep: bool = True) -> float:
    """``kubectl apply -f`` of the ConfigMap holding ``config``; with ``keep`` the overlay says so
    too (so a later ``apply -k`` keeps it). When the apply returned (monotonic)."""
    path = deployed.overlay.directory.parent / f"configmap-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(deployed.overlay.configmap(config)))
    deployed.plane.kubectl("apply", "-f", str(path))
    if keep:
        deployed.overlay.config = config
        deployed.overlay.write()
    return time.monotonic()


def config_volume(node: NodeKind, pod: dict[str, Any]) -> pathlib.Path:
    """The pod's ConfigMap volume as that node's kubelet keeps it (``..data`` and the key's link)."""
    (volume,) = [v["name"] for v in fleet_deploy.base_daemonset()["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    return (node.running_kubelet.root_dir / "pods" / pod["metadata"]["uid"] / "volumes" / "kubernetes.io~configmap"
            / volume)


def data_target(node: NodeKind, pod: dict[str, Any]) -> str:
    return os.readlink(config_volume(node, pod) / "..data")


def metric(node: NodeKind, name: str, **labels: str) -> float:
    return fleet_deploy.sample(fleet_deploy.metrics(node), name, **labels)


def messages(deployed: Deployed, node: NodeKind) -> list[str]:
    pod = fleet_deploy.pod_on(deployed.plane, node)
    return [str(line.get("msg")) for line in fleet_deploy.pod_messages(deployed.plane, pod["metadata"]["name"])]


def test_an_edited_configmap_reaches_every_node_through_the_kubelet_and_is_applied(
        deployed: Deployed, record_property: Callable[[str, object], None]) -> None:
    """``kubectl apply`` of the ConfigMap with one more pattern; each node's kubelet rewrites the
    pod's volume (its atomic writer: a new timestamped directory, ``..data`` renamed onto it) and
    the agent reloads and pins the newly covered image. The kubelet rewrites a ConfigMap volume
    only when it syncs the pod again (pkg/kubelet, 1.37): with the Watch strategy its ConfigMap
    manager follows the object through a watch (so the new data is there within about a second),
    and a pod is synced again ``syncFrequency`` after its last sync, jittered up to half as much
    again (pod_workers.go, ``workerResyncIntervalJitterFactor`` 0.5; the sync loop picks due pods
    every second). So the volume is rewritten at most 1.5 x syncFrequency after the apply: 15 s
    with the fleet's 10s (6-14 s measured here), 90 s with the defaults (1m, Watch), then pinctl's
    2 s poll and 0.5 s settle. Measured and printed, not asserted (no test depends on speed)."""
    plane, nodes = deployed.plane, deployed.fleet.nodes
    pods = {node.name: fleet_deploy.pod_on(plane, node) for node in nodes}
    before = {node.name: data_target(node, pods[node.name]) for node in nodes}
    reloads = {node.name: metric(node, "pinctl_config_reloads_total", result="ok") for node in nodes}
    assert not any(fleet_deploy.cri_pinned(node)[ADDED] for node in nodes)
    began = apply_config(deployed, fleet_deploy.policy(EDITED))
    written: dict[str, float] = {}
    pinned: dict[str, float] = {}

    def every_node_pins() -> bool:
        for node in nodes:
            now = round(time.monotonic() - began, 1)
            if node.name not in written and data_target(node, pods[node.name]) != before[node.name]:
                written[node.name] = now
            if node.name not in pinned and fleet_deploy.cri_pinned(node)[ADDED]:
                pinned[node.name] = now
        return len(pinned) == len(nodes)

    wait_until("the edited policy applied on every node", every_node_pins, POLICY_S, lambda: f"{written} {pinned}")
    for node in nodes:
        volume = config_volume(node, pods[node.name])
        assert (volume / fleet_deploy.CONFIG_KEY).read_text() == fleet_deploy.policy(EDITED)
        assert data_target(node, pods[node.name]).startswith("..") and node.name in written
        assert metric(node, "pinctl_config_reloads_total", result="ok") > reloads[node.name]
        assert metric(node, "pinctl_config_last_reload_successful") == 1.0
        said = messages(deployed, node)
        assert "config changed, reloading" in said and "config reloaded" in said, said
        # No restart: the same pod and container took the new policy.
        now = fleet_deploy.pod_on(plane, node)
        assert now["metadata"]["uid"] == pods[node.name]["metadata"]["uid"]
        assert now["status"]["containerStatuses"][0]["restartCount"] == 0
    record_property("fleet_policy_s", max(pinned.values()))
    print(f"edited policy: volume rewritten {written}, pinned {pinned} s after kubectl apply")  # noqa: T201


# --- a rolling update, cordon and drain --------------------------------------------------------


@dataclasses.dataclass
class Sampled:
    """What one node's CRI said during a rollout: pins that lapsed, and which agent containers ran."""

    samples: int = 0
    lapses: list[str] = dataclasses.field(default_factory=list)
    old_running: int = 0
    new_running: int = 0
    none_running: int = 0


def sample_node(node: NodeKind, watched: set[str], old: set[str], into: Sampled) -> None:
    pinned = fleet_deploy.cri_pinned(node)
    running = {c.id for c in cri_pods.list_containers(node.cri_address)
               if c.name == fleet_deploy.CONTAINER and c.state == "running"}
    into.samples += 1
    into.lapses += [f"{ref} at {time.strftime('%H:%M:%S')}" for ref in sorted(watched) if not pinned.get(ref)]
    into.old_running += bool(running & old)
    into.new_running += bool(running - old)
    into.none_running += not running


def test_a_rolling_update_to_a_new_image_never_unpins(deployed: Deployed,
                                                      record_property: Callable[[str, object], None]) -> None:
    """The image retagged as a new version on every node, the overlay applied with it; while the
    DaemonSet controller replaces the pods node by node (``maxUnavailable: 10%``: one at a time
    here), every node's CRI is sampled: none of the policy's images is ever unpinned, even while
    a node has no agent (pinctl unpins nothing when it stops)."""
    plane, nodes = deployed.plane, deployed.fleet.nodes
    with futures.ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        list(pool.map(lambda node: node.retag(AGENT_V1, AGENT_V2), nodes))
    watched = {ref for ref in (COVERED_GLOB, COVERED_EXACT, ADDED)
               if all(fleet_deploy.cri_pinned(node)[ref] for node in nodes)}
    assert {COVERED_GLOB, COVERED_EXACT} <= watched
    old_pods = {pod["metadata"]["uid"] for pod in fleet_deploy.agent_pods(plane)}
    old = {c.id for node in nodes for c in cri_pods.list_containers(node.cri_address)
           if c.name == fleet_deploy.CONTAINER and c.state == "running"}
    sampled = {node.name: Sampled() for node in nodes}
    stop = threading.Event()
    failures: list[BaseException] = []

    def sampler() -> None:
        try:
            while not stop.is_set():
                for node in nodes:
                    sample_node(node, watched, old, sampled[node.name])
                time.sleep(0.2)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    thread = threading.Thread(target=sampler, name="fleet-pin-sampler", daemon=True)
    thread.start()
    began = time.monotonic()
    try:
        deployed.overlay.image = AGENT_V2
        deployed.overlay.write()
        plane.kubectl("apply", "-k", str(deployed.overlay.directory))
        plane.wait_for("the rollout to the new image", lambda: fleet_deploy.rolled_out(plane, len(nodes), AGENT_V2),
                       ROLLOUT_S)
        seconds = round(time.monotonic() - began, 1)
    finally:
        stop.set()
        thread.join(60)
    assert failures == [] and not thread.is_alive()
    for node in nodes:  # once more, with the rollout done: the new agent runs everywhere
        sample_node(node, watched, old, sampled[node.name])
    new_pods = fleet_deploy.agent_pods(plane)
    assert {pod["metadata"]["uid"] for pod in new_pods}.isdisjoint(old_pods)
    assert sorted(pod["spec"]["nodeName"] for pod in new_pods) == sorted(node.name for node in nodes)
    assert all(pod["spec"]["containers"][0]["image"] == AGENT_V2 and fleet_deploy.pod_ready(pod) for pod in new_pods)
    for node in nodes:
        seen = sampled[node.name]
        assert seen.lapses == [], (node.name, seen.lapses)
        # Sampled before (the old agent running) and after (the new one) the node's turn.
        assert seen.old_running and seen.new_running, (node.name, seen)
        assert all(fleet_deploy.cri_pinned(node)[ref] for ref in watched)
    record_property("fleet_rollout_update_s", seconds)
    print(f"rollout {seconds}s; samples per node "  # noqa: T201
          f"{ {name: (s.samples, s.none_running) for name, s in sampled.items()} } (total, with no agent running)")


def test_a_drained_node_keeps_its_agent_and_its_pins(deployed: Deployed) -> None:
    plane = deployed.plane
    node = deployed.fleet.nodes[0]
    pod = fleet_deploy.pod_on(plane, node)
    pinned = {ref for ref, is_pinned in fleet_deploy.cri_pinned(node).items() if is_pinned}
    assert {COVERED_GLOB, COVERED_EXACT} <= pinned
    plane.kubectl("cordon", node.name)
    try:
        done = plane.kubectl("drain", node.name, "--ignore-daemonsets", "--timeout=120s")
        assert plane.kubectl_json("get", "node", node.name)["spec"].get("unschedulable") is True
        # Drain leaves DaemonSet pods alone (and says so); they tolerate the unschedulable taint.
        assert f"{NAMESPACE}/{pod['metadata']['name']}" in done.stdout + done.stderr
        after = fleet_deploy.pod_on(plane, node)
        assert after["metadata"]["uid"] == pod["metadata"]["uid"] and fleet_deploy.pod_ready(after)
        assert after["status"]["containerStatuses"][0]["restartCount"] == 0
        assert {ref for ref, is_pinned in fleet_deploy.cri_pinned(node).items() if is_pinned} >= pinned
        assert fleet_deploy.rolled_out(plane, len(deployed.fleet.nodes), deployed.overlay.image)
    finally:
        plane.kubectl("uncordon", node.name)
    assert not plane.kubectl_json("get", "node", node.name)["spec"].get("unschedulable")

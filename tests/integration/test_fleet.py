"""pinctl's DaemonSet rolled out by Kubernetes itself, on nodes of two runtimes, with kubectl only (issue 33).

The session's control plane (``control_plane``) and its fleet (``fleet``, tests/harness/
cluster_nodes.py): a containerd 1.7 node (pins are labels) and a containerd 2.1 node (labels too,
and a ``pinned_images`` entry of its own CRI config), each with its own kubelet registered to the
API server, address on lo and mount namespace in which the shipped hostPaths (/run/containerd,
/var/lib/containerd) are that node's. Into each node's containerd the test imports pinctl's image
(built from the Containerfile, tests/harness/image_build.py) under the name the overlay gives it,
and the policy's sample images; then ``kubectl apply -k`` of an overlay whose base is the
repository's deploy/kubernetes (tests/harness/fleet_deploy.py says each change and why:
kustomize's ``images:``, ``hostNetwork: true`` since there is no CNI, and the metrics address
``$(POD_IP):9736`` from the downward API so the agents sharing this machine's network do not
collide). Nothing else of the manifest is patched: the hostPaths, the security contexts, the
probes, the token and the namespace are the shipped ones. The policy is a patch of the base's
ConfigMap naming images present on the nodes.

The DaemonSet controller makes the pods, the scheduler binds them, the kubelets run them and
probe them; the test reads the cluster through kubectl, each node's pins through its containerd's
CRI (``pinned``: what the kubelet's image GC honours), its labels and ``pinctl ls``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import pytest
import yaml

from tests.conftest import engine_unavailable
from tests.harness import cri, daemonset_pod, debs, fleet_deploy, image_build, images
from tests.harness.cluster_nodes import CONFIG_PINNED, Fleet, FleetNode
from tests.harness.control_plane import ControlPlane
from tests.harness.fleet_deploy import NAMESPACE, Overlay
from tests.integration.pinctl_runner import pinctl_json

pytestmark = pytest.mark.integration

AGENT = "example.test/pinctl/agent"
AGENT_V1 = f"{AGENT}:fleet-1"
# Covered by the policy: one by a glob, one exactly; the third by nothing.
COVERED_GLOB = "example.test/fleet/platform/proxy:1"
COVERED_EXACT = "example.test/fleet/api:2.14"
NOT_COVERED = "example.test/fleet/other:1"
PATTERNS = ["example.test/fleet/platform/*", COVERED_EXACT]
SAMPLES = (COVERED_GLOB, COVERED_EXACT, NOT_COVERED)
# Generous: a busy machine; the first readiness probe can come a periodSeconds (10) after the start.
ROLLOUT_S = 300.0
PIN_S = 60.0


@dataclasses.dataclass
class Deployed:
    fleet: Fleet
    plane: ControlPlane
    overlay: Overlay
    seconds: float  # from kubectl apply to every pod Ready


@pytest.fixture(scope="module")
def built() -> image_build.BuiltImage:
    try:
        return image_build.pinctl_image(daemonset_pod.plan(daemonset_pod.manifest()).image)
    except (debs.EngineUnavailable, OSError) as exc:
        engine_unavailable(f"the pinctl image cannot be built here: {exc}")


def tag(node: FleetNode, source: str, target: str) -> None:
    """A second name for an image the node holds (``ctr images tag``), once the CRI lists it."""
    node.containerd.ctr("images", "tag", "--force", source, target)
    cri.wait_for_refs(node.containerd.address, [target])


def prepare(node: FleetNode, built: image_build.BuiltImage) -> None:
    """pinctl's image under the overlay's name alone (the archive's name removed: the content
    stays, held by the other), and the policy's samples."""
    image_build.import_image(node.containerd, built)
    tag(node, built.name, AGENT_V1)
    node.containerd.ctr("images", "rm", built.name)
    node.load_images([images.recipe(ref, seed=ref) for ref in SAMPLES])


@pytest.fixture(scope="module")
def deployed(fleet: Fleet, built: image_build.BuiltImage, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    plane = fleet.plane
    with futures.ThreadPoolExecutor(max_workers=len(fleet.nodes)) as pool:
        list(pool.map(lambda node: prepare(node, built), fleet.nodes))
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
    status = fleet_deploy.daemonset_status(plane)["status"]
    assert status["desiredNumberScheduled"] == status["numberReady"] == status["currentNumberScheduled"] == len(nodes)
    pods = [pod for pod in fleet_deploy.agent_pods(plane) if not pod["metadata"].get("deletionTimestamp")]
    # One per node, made by the DaemonSet controller (its controller reference) ...
    assert sorted(pod["spec"]["nodeName"] for pod in pods) == sorted(nodes)
    daemonset_uid = fleet_deploy.daemonset_status(plane)["metadata"]["uid"]
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner.get("controller")) == (
            "DaemonSet", "pinctl", daemonset_uid, True)
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
        held = {tag: image.id for image in cri.list_images(node.containerd.address) for tag in image.repo_tags}
        assert container["imageID"].rpartition("@")[2] == held[AGENT_V1] and container["image"] == AGENT_V1
        assert pod["status"]["podIP"] == pod["status"]["hostIP"] == node.address
        runtime = plane.kubectl_json("get", "node", node.name)["status"]["nodeInfo"]["containerRuntimeVersion"]
        assert runtime.startswith(f"containerd://{node.engine.split('-')[1]}.")
    scheduled = {event["involvedObject"]["name"]: event for event in
                 plane.kubectl_json("-n", NAMESPACE, "get", "events", "--field-selector", "reason=Scheduled")["items"]}
    for pod in pods:
        event = scheduled[pod["metadata"]["name"]]
        assert "default-scheduler" in (event.get("reportingComponent"), event.get("source", {}).get("component"))
        assert pod["spec"]["nodeName"] in event["message"]
    record_property("fleet_rollout_s", deployed.seconds)
    print(f"fleet of {len(nodes)} up in {deployed.fleet.startup_seconds}s, "  # noqa: T201
          f"DaemonSet ready {deployed.seconds}s after kubectl apply")


def test_every_node_pins_the_policys_images(deployed: Deployed) -> None:
    for node in deployed.fleet.nodes:
        def covered_pinned(node: FleetNode = node) -> bool:
            pinned = fleet_deploy.cri_pinned(node)
            return pinned.get(COVERED_GLOB) is True and pinned.get(COVERED_EXACT) is True

        wait_until(f"the policy's images pinned on {node.name}", covered_pinned, PIN_S)
        pinned = fleet_deploy.cri_pinned(node)
        assert pinned[NOT_COVERED] is False and pinned[AGENT_V1] is False
        assert {COVERED_GLOB, COVERED_EXACT} <= fleet_deploy.labelled(node)
        assert NOT_COVERED not in fleet_deploy.labelled(node)
        rows = {row["ref"]: row for row in pinctl_json(node.containerd, "ls", "-n", "k8s.io")["images"]}
        assert rows[COVERED_GLOB]["pinned"] and rows[COVERED_EXACT]["pinned"] and not rows[NOT_COVERED]["pinned"]
        if node.containerd.config_version >= 3:
            # containerd 2.1 pins its own config's entry; the agent's policy does not name it.
            assert pinned[CONFIG_PINNED] is True
            assert "containerd-config" in {reason["kind"] for reason in rows[CONFIG_PINNED]["reasons"]}
        text = fleet_deploy.metrics(node)
        assert fleet_deploy.sample(text, "pinctl_config_last_reload_successful") in (0.0, 1.0)
    for node in deployed.fleet.nodes:
        messages = [line.get("msg") for line in fleet_deploy.pod_messages(deployed.plane,
                                                                          fleet_deploy.pod_on(deployed.plane, node)["metadata"]["name"])]
        assert "full sync" in messages and "pinned" in messages, messages


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
    # What operators apply: a namespace, a ConfigMap, a DaemonSet; no account, role or binding.
    rendered = [doc for doc in yaml.safe_load_all(plane.kubectl("kustomize", str(fleet_deploy.BASE)).stdout) if doc]
    assert sorted(doc["kind"] for doc in rendered) == ["ConfigMap", "DaemonSet", "Namespace"]
    # And none is needed: nothing in the cluster grants the namespace's accounts anything, yet every pod is Ready.
    for kind in ("rolebindings", "clusterrolebindings"):
        bindings = plane.kubectl_json("get", kind, "-A")["items"]
        named = [binding["metadata"]["name"] for binding in bindings for subject in binding.get("subjects") or []
                 if subject.get("namespace") == NAMESPACE or NAMESPACE in subject.get("name", "").split(":")]
        assert named == [], (kind, named)
    assert all(fleet_deploy.pod_ready(pod) for pod in fleet_deploy.agent_pods(plane))

"""Fleet status on the real control plane (issue 46): each agent writes its own Node's condition
``pinctl.io/PolicyApplied`` and Events, and ``pinctl fleet status [--wait]`` reads them.

The session's fleet (tests/harness/cluster_nodes.py: containerd 1.7, containerd 2.1, Docker with
cri-dockerd v0.4.3 behind ``pinctl cri-proxy``, CRI-O v1.34.0, each its own kubelet) gets the
DaemonSets by ``kubectl apply -k`` of an overlay over deploy/kubernetes *with* the opt-in
component deploy/kubernetes/components/node-status (the base has no credentials, test_fleet.py
shows that). The overlay changes what test_fleet.py's does (host network, metrics address),
and three things more: the API server's loopback address for the agents (nothing routes the
``kubernetes`` service here), a 10 s heartbeat and a 10 s check interval, so that staleness
and a change show within a test's patience. What fleet status says is checked against each
node's CRI through that node's socket (what the kubelet's GC reads), not against pinctl.

A Node object without a kubelet stands for a node the DaemonSets do not reach: fleet status
lists it as having no agent and exits 1 until ``-l`` leaves it out.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import pytest
import yaml

from pinctl.fleet.condition import CONDITION_TYPE, revision_of
from tests.harness import crio as crio_harness
from tests.harness import fleet_deploy, image_build
from tests.harness.cluster_crio_node import CrioFleetNode
from tests.harness.cluster_nodes import Fleet
from tests.harness.control_plane import ControlPlane
from tests.harness.fleet_deploy import BASE, NAMESPACE, Overlay

pytestmark = pytest.mark.integration

COMPONENT = BASE / "components" / "node-status"
AGENT = "example.test/pinctl/agent:status-1"
KEPT_GLOB = "example.test/status/platform/proxy:1"
KEPT_EXACT = "example.test/status/api:2.14"
ADDED = "example.test/status/added:1"
SAMPLES = (KEPT_GLOB, KEPT_EXACT, ADDED)
PATTERNS = ["example.test/status/platform/*", KEPT_EXACT]
HEARTBEAT = "10s"
# Two heartbeats: an agent writing every 8 to 10 s is never this late while it runs.
STALE_AFTER_S = 20
STALE_AFTER = f"{STALE_AFTER_S}s"
BARE_NODE = "pinctl-status-no-agent"
BARE_LABEL = "pinctl.test/no-kubelet"
# Generous: a busy machine. A ConfigMap edit reaches a node within 1.5 x the kubelet's 10s
# syncFrequency, then pinctl's poll, a check round and the condition's jitter (5 s at most).
WAIT = "240s"
ROLLOUT_S = 300.0


class StatusOverlay(Overlay):
    """test_fleet.py's overlay, with the node-status component and what this machine needs for it."""

    def __init__(self, directory: pathlib.Path, image: str, config: str, server: str) -> None:
        super().__init__(directory, image, config)
        self.server = server

    def kustomization(self) -> dict[str, Any]:
        found = super().kustomization()
        found["components"] = [os.path.relpath(COMPONENT, self.directory)]
        return found

    def daemonset_patch(self, name: str = fleet_deploy.NAME) -> dict[str, Any]:
        """``args`` is replaced whole by a strategic merge, so it carries the component's two
        (``--node-status $(NODE_NAME)``) and this test's pace; env merges by name."""
        found = super().daemonset_patch(name)
        (container,) = found["spec"]["template"]["spec"]["containers"]
        container["args"] += ["--node-status", "$(NODE_NAME)", "--status-heartbeat", HEARTBEAT,
                              "--check-interval", "10"]
        host, port = self.server.removeprefix("https://").rsplit(":", 1)
        container["env"] += [{"name": "KUBERNETES_SERVICE_HOST", "value": host},
                             {"name": "KUBERNETES_SERVICE_PORT", "value": port}]
        return found


@pytest.fixture(scope="module")
def deployed(fleet: Fleet, agent_image: image_build.BuiltImage,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[StatusOverlay]:
    plane = fleet.plane
    with futures.ThreadPoolExecutor(max_workers=len(fleet.nodes)) as pool:
        list(pool.map(lambda node: fleet_deploy.prepare(node, agent_image, AGENT, SAMPLES), fleet.nodes))
    bare = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": BARE_NODE, "labels": {BARE_LABEL: "true"}}}
    plane.kubectl("apply", "-f", "-", stdin=json.dumps(bare))
    overlay = StatusOverlay(tmp_path_factory.mktemp("status-overlay"), AGENT, fleet_deploy.policy(PATTERNS),
                            plane.server)
    overlay.write()
    plane.kubectl("apply", "-k", str(overlay.directory))
    try:
        plane.wait_for("the DaemonSets rolled out on every node",
                       lambda: fleet_deploy.rolled_out(plane, len(fleet.nodes), AGENT), ROLLOUT_S)
        yield overlay
    finally:
        plane.kubectl("delete", "-k", str(overlay.directory), "--wait=true", "--timeout=120s", check=False)
        plane.kubectl("delete", "node", BARE_NODE, "--wait=false", check=False)


def fleet_status(plane: ControlPlane, *args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "pinctl", "fleet", "status", "--kubeconfig",
                           str(plane.admin_kubeconfig), "-o", "json", *args],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode in (0, 1), done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    assert document["pinctl_result_version"] == 2
    return done.returncode, document


def rows(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["node"]: row for row in document["nodes"]}


def agents_only() -> tuple[str, str]:
    return ("-l", f"!{BARE_LABEL}")


def wait_until(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"not {what} after {timeout}s"
        time.sleep(1.0)
    return found


def test_fleet_status_waits_for_every_node_and_the_cri_agrees(fleet: Fleet, deployed: StatusOverlay) -> None:
    plane = fleet.plane
    code, document = fleet_status(plane, *agents_only(), "--wait", WAIT)
    assert code == 0 and document["all_applied"] is True, document
    assert document["revision"] == revision_of(deployed.config.encode())
    found = rows(document)
    assert sorted(found) == sorted(node.name for node in fleet.nodes)
    for node in fleet.nodes:
        row = found[node.name]
        assert row["state"] == "applied" and row["revision"] == document["revision"], row
        assert row["runtime"].startswith(node.runtime_version_prefix), row
        assert row["images"] == {"wanted": 2, "pinned": 2, "absent": 0, "not_kept": 0}, row
        # Independently of pinctl: what the kubelet's GC reads through that node's CRI.
        pinned = fleet_deploy.cri_pinned(node)
        assert pinned[KEPT_GLOB] and pinned[KEPT_EXACT] and not pinned[ADDED], (node.name, pinned)
    # The node without a kubelet: listed, not applied, and the exit code says so.
    code, everything = fleet_status(plane)
    assert code == 1 and everything["all_applied"] is False
    assert rows(everything)[BARE_NODE]["state"] == "no agent"
    assert sum(row["applied"] for row in everything["nodes"]) == len(fleet.nodes)


def test_kubectl_shows_the_condition_and_the_events(fleet: Fleet, deployed: StatusOverlay) -> None:
    plane = fleet.plane
    column = f'.status.conditions[?(@.type=="{CONDITION_TYPE}")].reason'
    table = plane.kubectl("get", "nodes", "-l", f"!{BARE_LABEL}", "--no-headers",
                          "-o", f"custom-columns=NAME:.metadata.name,PINCTL:{column}").stdout
    assert {tuple(line.split()) for line in table.splitlines()} == {(node.name, "PolicyApplied") for node in fleet.nodes}
    node = fleet.nodes[0]
    described = plane.kubectl("describe", "node", node.name).stdout
    assert CONDITION_TYPE in described and f"revision {revision_of(deployed.config.encode())}" in described
    events = plane.kubectl_json("get", "events", "-n", "default", "--field-selector",
                                f"involvedObject.kind=Node,involvedObject.name={node.name}")["items"]
    reasons = {event["reason"] for event in events if event.get("source", {}).get("component") == "pinctl"}
    assert "PolicyApplied" in reasons, reasons
    assert "PolicyApplied" in described.split("Events:", 1)[1]


def test_an_edited_configmap_is_waited_for_until_every_node_pins_it(fleet: Fleet, deployed: StatusOverlay) -> None:
    plane = fleet.plane
    edited = fleet_deploy.policy([*PATTERNS, ADDED])
    path = deployed.directory.parent / "status-configmap.yaml"
    path.write_text(yaml.safe_dump(deployed.configmap(edited)))
    plane.kubectl("apply", "-f", str(path))
    deployed.config = edited
    deployed.write()
    code, document = fleet_status(plane, *agents_only(), "--wait", WAIT)
    assert code == 0, document
    assert document["revision"] == revision_of(edited.encode()) and document["waited_seconds"] is not None
    for node in fleet.nodes:
        assert rows(document)[node.name]["images"]["pinned"] == 3
        assert fleet_deploy.cri_pinned(node)[ADDED] is True, node.name


def test_a_node_whose_runtime_does_not_keep_an_image_says_why(fleet: Fleet, deployed: StatusOverlay) -> None:
    """A site drop-in of CRI-O sorting after pinctl's replaces its pinned_images: CRI-O keeps
    what the site lists, not the policy's exact image, and the node's row says so."""
    plane = fleet.plane
    (node,) = [node for node in fleet.nodes if isinstance(node, CrioFleetNode)]
    crio = node.running_crio
    crio.write_dropin("zzz-site.conf", crio_harness.pinned_images_dropin([KEPT_GLOB]))
    assert crio.pid is not None
    os.kill(crio.pid, signal.SIGHUP)
    try:
        def not_kept() -> dict[str, Any] | None:
            _code, document = fleet_status(plane, *agents_only())
            row = rows(document)[node.name]
            return row if row["state"] == "not kept" else None

        row = wait_until("the CRI-O node's image reported not kept", not_kept, 180)
        assert row["images"]["not_kept"] >= 1 and "CRI-O" in row["why"], row  # its own reason, not "not pinned yet"
        assert fleet_deploy.cri_pinned(node)[KEPT_EXACT] is False
        code, _document = fleet_status(plane, *agents_only())
        assert code == 1
    finally:
        (crio.dropin_dir / "zzz-site.conf").unlink()
        os.kill(crio.pid, signal.SIGHUP)
    code, document = fleet_status(plane, *agents_only(), "--wait", WAIT)
    assert code == 0, document
    assert fleet_deploy.cri_pinned(node)[KEPT_EXACT] is True


def test_a_stopped_agent_turns_stale(fleet: Fleet, deployed: StatusOverlay) -> None:
    """The CRI-O node's DaemonSet deleted: nothing rewrites its condition, and once it is older
    than --stale-after (two heartbeats here) fleet status says so."""
    plane = fleet.plane
    (node,) = [node for node in fleet.nodes if isinstance(node, CrioFleetNode)]
    plane.kubectl("-n", NAMESPACE, "delete", "daemonset", "pinctl-crio", "--wait=true", "--timeout=120s")
    stopped = time.monotonic()

    def stale() -> dict[str, Any] | None:
        _code, document = fleet_status(plane, *agents_only(), "--stale-after", STALE_AFTER)
        row = rows(document)[node.name]
        return row if row["state"] == "stale" else None

    row = wait_until("the stopped agent's node stale", stale, 180)
    print(f"stale {time.monotonic() - stopped:.0f}s after the agent was stopped")  # noqa: T201
    # Stale means older than --stale-after; the JSON rounds the age to a tenth (20.04 is 20.0).
    assert "is it running?" in row["why"] and row["heartbeat_age_seconds"] >= STALE_AFTER_S
    code, _document = fleet_status(plane, *agents_only(), "--stale-after", STALE_AFTER)
    assert code == 1

"""Prometheus 3 finds the fleet's agents through the API server and the shipped alerts judge them (issue 33, item 4).

The session's fleet (containerd 1.7 and 2.1 nodes, a cri-dockerd one behind pinctl cri-proxy and a CRI-O one, registered to the control plane) runs the
DaemonSet as ``kubectl apply -k`` of an overlay over deploy/kubernetes puts it there
(tests/harness/fleet_deploy.py). The policy names two exact images: every node holds the first;
the second, MISSING, is on every node but the 2.1 one. A Prometheus 3 built from its module runs
deploy/kubernetes/prometheus/scrape.yaml's job as shipped (role pod, namespace pinctl, the same
relabelling) with only what running outside the cluster needs added (the API server's address, its
CA and a client certificate bound to get/list/watch pods) and a 1 s interval, and the shipped rules
(monitoring/prometheusrule.yaml's spec) with one change: each ``for:`` is 1 s, since a test cannot
wait 15 minutes. The expressions, labels and annotations are the shipped ones.

Then: every agent is discovered and scraped, labelled by node; docs/monitoring.md's query for
"which nodes lack image X, and why" names the 2.1 node alone, with state absent;
PinctlPolicyImageNotKept fires there and nowhere else; once the image is imported on that node the agent pins it, the query
comes back empty and the alert clears. A broken ConfigMap applied with kubectl fires the shipped
PinctlConfigReloadFailed on every node (the Docker and CRI-O nodes' agents too), the old policy's pins kept,
each agent's log saying why and no pod restarted; the good one again clears it (test_fleet.py has
no broken ConfigMap of its own: this is the one).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import pytest
import yaml

from tests.harness import fleet_deploy, image_build
from tests.harness.cluster_nodes import Fleet, NodeKind
from tests.harness.fleet_deploy import Overlay
from tests.harness.prometheus import Prometheus, cluster_identity, kubernetes_job, server_config, shipped_job
from tests.unit.test_deploy_monitoring import monitoring_objects, rule_groups

pytestmark = pytest.mark.integration

AGENT = "example.test/pinctl/agent:fleet-prom"
EVERYWHERE = "example.test/fleet-prom/base:1"
MISSING = "example.test/fleet-prom/missing:1"
RULES_FILE = "pinctl-rules.yaml"
ALERT = "PinctlPolicyImageNotKept"
# docs/monitoring.md's query, "which nodes lack image X, and why", with X the missing image's pattern.
LACKING_QUERY = f'pinctl_policy_images{{pattern="{MISSING}", state!="pinned"}} > 0'
# Generous: a busy machine. The agent's figures behind pinctl_policy_images are read 2-15 s after it
# pins (Checker.soon), else every --check-interval (60 s, the shipped default).
ROLLOUT_S = 300.0
CHANGE_S = 240.0
RELOAD_ALERT = "PinctlConfigReloadFailed"
# Not TOML: an unterminated array.
BROKEN = 'pattern_dialect = "pinctl"\npinned_images = [\n  "example.test/fleet-prom/*",\n'
# The deployed fleet's overlay, for a test that changes the ConfigMap.
OVERLAYS: dict[int, Overlay] = {}


def quick_rules() -> str:
    """The shipped rules, each ``for:`` cut to 1 s; nothing else changed."""
    groups = copy.deepcopy(rule_groups(monitoring_objects()))
    for group in groups["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "1s"
    return yaml.safe_dump(groups)


def holds_missing(node: NodeKind) -> bool:
    return node.engine != "containerd-2.1"


@pytest.fixture(scope="module")
def deployed(fleet: Fleet, agent_image: image_build.BuiltImage,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    def prepare(node: NodeKind) -> None:
        fleet_deploy.prepare(node, agent_image, AGENT, (EVERYWHERE, MISSING) if holds_missing(node) else (EVERYWHERE,))

    with futures.ThreadPoolExecutor(max_workers=len(fleet.nodes)) as pool:
        list(pool.map(prepare, fleet.nodes))
    overlay = Overlay(tmp_path_factory.mktemp("overlay"), AGENT, fleet_deploy.policy([EVERYWHERE, MISSING]))
    overlay.write()
    OVERLAYS[id(fleet)] = overlay
    plane = fleet.plane
    plane.kubectl("apply", "-k", str(overlay.directory))
    try:
        plane.wait_for("the DaemonSet rolled out on every node",
                       lambda: fleet_deploy.rolled_out(plane, len(fleet.nodes), AGENT), ROLLOUT_S)
        yield fleet
    finally:
        plane.kubectl("delete", "-k", str(overlay.directory), "--wait=true", "--timeout=120s", check=False)
        for node in fleet.nodes:
            node.remove_images([MISSING, EVERYWHERE])


@pytest.fixture
def prometheus(deployed: Fleet, prometheus3: Callable[..., Prometheus]) -> Prometheus:
    job = kubernetes_job(shipped_job(), cluster_identity(deployed.plane))
    return prometheus3(server_config([job], [RULES_FILE]), {RULES_FILE: quick_rules()})


def firing(server: Prometheus, name: str = ALERT) -> list[dict[str, Any]]:
    return [alert for alert in server.alerts() if alert["labels"].get("alertname") == name
            and alert.get("state") == "firing"]


def lacking(server: Prometheus) -> list[tuple[str, str]]:
    """docs/monitoring.md's query: (node, state) of each series it returns."""
    return sorted((labels.get("node", ""), labels.get("state", "")) for labels, _ in server.query(LACKING_QUERY))


def test_prometheus_finds_every_agent_and_the_alert_follows_the_missing_image(
        deployed: Fleet, prometheus: Prometheus, record_property: Callable[[str, object], None]) -> None:
    server, nodes = prometheus, deployed.by_name()
    (lacks,) = [node for node in deployed.nodes if not holds_missing(node)]

    def every_agent_up() -> dict[str, dict[str, Any]]:
        targets = {target["labels"].get("node", ""): target for target in server.targets()}
        return targets if sorted(targets) == sorted(nodes) and all(
            target["health"] == "up" for target in targets.values()) else {}

    targets = server.wait_for("every node's agent discovered and up", every_agent_up, ROLLOUT_S)
    for name, target in targets.items():
        pod = fleet_deploy.pod_on(deployed.plane, nodes[name])
        # Discovered from the API server: the pod the DaemonSet put on that node, at its IP.
        assert target["labels"]["pod"] == pod["metadata"]["name"]
        assert target["scrapeUrl"] == f"http://{nodes[name].address}:{fleet_deploy.METRICS_PORT}/metrics"
    assert server.own_metric("prometheus_sd_kubernetes_failures_total") == 0

    # Which nodes lack MISSING, and why: the 2.1 node alone, absent. The figures are the agents'
    # check's, so a node whose agent is pinning the image may say unpinned for a moment (the
    # alert's 15 minutes cover that): wait for the answer.
    expected = [(lacks.name, "absent")]
    server.wait_for("docs/monitoring.md's query to name only the node lacking the image",
                    lambda: lacking(server) == expected, CHANGE_S)

    def only_there() -> list[dict[str, Any]]:
        found = firing(server)
        return found if [alert["labels"].get("node") for alert in found] == [lacks.name] else []

    alerts = server.wait_for(f"{ALERT} firing on {lacks.name} alone", only_there, CHANGE_S)
    assert [(a["labels"]["node"], a["labels"]["pattern"], a["labels"]["state"]) for a in alerts] == [
        (lacks.name, MISSING, "absent")]
    assert alerts[0]["annotations"]["summary"] == f"{MISSING} is absent on {lacks.name}"
    # Nothing else fires on a fleet that is otherwise well: the other rules evaluate and keep quiet.
    assert {a["labels"]["alertname"] for a in server.alerts() if a.get("state") == "firing"} == {ALERT}
    assert all(rule.get("health") == "ok" for rule in server.rules())

    # The image arrives on that node: its agent pins it, the query empties and the alert clears.
    arrived = time.monotonic()
    lacks.load_samples([MISSING])
    server.wait_for(f"{MISSING} pinned on {lacks.name}",
                    lambda: fleet_deploy.cri_pinned(lacks).get(MISSING) is True, CHANGE_S)
    server.wait_for("docs/monitoring.md's query to come back empty", lambda: lacking(server) == [], CHANGE_S)
    emptied = round(time.monotonic() - arrived, 1)
    server.wait_for(f"{ALERT} cleared", lambda: firing(server) == [], CHANGE_S)
    print(f"query empty {emptied}s and alert cleared {round(time.monotonic() - arrived, 1)}s "  # noqa: T201
          f"after the image arrived on {lacks.name}")
    assert server.query(f'pinctl_policy_images{{pattern="{MISSING}", state="pinned"}} == 1')
    record_property("targets", sorted(targets))


def apply_configmap(fleet: Fleet, config: str) -> None:
    overlay = OVERLAYS[id(fleet)]
    path = overlay.directory.parent / f"configmap-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(overlay.configmap(config)))
    fleet.plane.kubectl("apply", "-f", str(path))


def test_a_broken_configmap_fires_the_reload_alert_on_every_node_until_mended(
        deployed: Fleet, prometheus: Prometheus) -> None:
    """``kubectl apply`` of a ConfigMap that is not TOML: every node's agent refuses it and keeps
    its policy, and the shipped PinctlConfigReloadFailed fires on every node, evaluated by the
    real Prometheus; the good ConfigMap again, and it clears everywhere."""
    server, nodes = prometheus, deployed.by_name()
    good = OVERLAYS[id(deployed)].config
    server.wait_for("every node's agent discovered and up", lambda: sorted(
        target["labels"].get("node", "") for target in server.targets() if target["health"] == "up") == sorted(nodes),
        ROLLOUT_S)
    pinned_before = {name: fleet_deploy.cri_pinned(node).get(EVERYWHERE) for name, node in nodes.items()}
    assert all(pinned_before.values()), pinned_before
    apply_configmap(deployed, BROKEN)
    try:
        def on_every_node() -> list[dict[str, Any]]:
            found = firing(server, RELOAD_ALERT)
            return found if sorted(alert["labels"].get("node", "") for alert in found) == sorted(nodes) else []

        alerts = server.wait_for(f"{RELOAD_ALERT} firing on every node", on_every_node, CHANGE_S)
        assert {alert["annotations"]["summary"] for alert in alerts} == {
            f"pinctl on {name} could not read its changed config" for name in nodes}
        # The policy in force stays the old one: its image is still pinned everywhere, each agent
        # says why in its log, and none was restarted or made unready for it.
        assert all(fleet_deploy.cri_pinned(node).get(EVERYWHERE) for node in nodes.values())
        for node in nodes.values():
            pod = fleet_deploy.pod_on(deployed.plane, node)
            said = [str(line.get("msg")) for line in fleet_deploy.pod_messages(deployed.plane, pod["metadata"]["name"])]
            assert "config reload failed, keeping the previous one" in said, (node.name, said)
            assert fleet_deploy.pod_ready(pod) and pod["status"]["containerStatuses"][0]["restartCount"] == 0
    finally:
        apply_configmap(deployed, good)
    server.wait_for(f"{RELOAD_ALERT} cleared everywhere", lambda: firing(server, RELOAD_ALERT) == [], CHANGE_S)

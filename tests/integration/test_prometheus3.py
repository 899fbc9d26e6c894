"""Prometheus 3 (built from its Go module) against the shipped monitoring files and the harness's
real API server (issue 33, item 4).

Debian's prometheus 2.42 is built without kubernetes_sd; these tests use ``prometheus3_build``
(tests/harness/prometheus.py): v3's promtool checks deploy/kubernetes/prometheus/scrape.yaml and
the shipped alert rules (and refuses broken copies), and a Prometheus 3 running the shipped
``pinctl`` job discovers pods from ``control_plane`` through ``kubernetes_sd_configs``, once
with a client certificate bound a ClusterRole, once with the token of the service account
deploy/kubernetes/prometheus/rbac.yaml binds.

These tests need no node: what they check is discovery, relabelling and RBAC, so a pod is bound
to a Node object written by the test and its status (phase, IP) is written as a kubelet would.
The real agents on real nodes, discovered and judged by the shipped alerts, are
test_fleet_prometheus.py's. Its port named
``metrics`` is the Prometheus's own, so the discovered target is scraped for real. The Node and
the pods are removed at the end; so is each test's namespace. rbac.yaml's namespaces (pinctl,
monitoring) are left in place: other cluster tests apply deploy/kubernetes into pinctl too. The Node has
no ``kubernetes.io/os`` label, so pinctl's DaemonSet (nodeSelector ``kubernetes.io/os: linux``)
never places a pod on it, and the fleet tests delete their DaemonSet when their module ends.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.harness import engines
from tests.harness.control_plane import ControlPlane
from tests.harness.prometheus import (
    RBAC,
    SCRAPE_CONFIG,
    KubernetesSd,
    Prometheus,
    PrometheusBuild,
    cluster_identity,
    kubernetes_job,
    server_config,
    service_account_identity,
    shipped_job,
)
from tests.unit.test_deploy_monitoring import ALERT_TESTS, ALERTS, alert_rules, monitoring_objects, rule_groups

pytestmark = pytest.mark.integration

KUBE = SCRAPE_CONFIG.parents[1]
RULES_FILE = "pinctl-rules.yaml"  # what scrape.yaml's rule_files names
ACCOUNT = "system:serviceaccount:monitoring:prometheus"


def shipped_rules() -> str:
    return yaml.safe_dump(rule_groups(monitoring_objects()))


# --- promtool v3 ------------------------------------------------------------------------------------


def test_both_binaries_report_the_version_they_were_built_from(prometheus3_build: PrometheusBuild) -> None:
    for binary in (prometheus3_build.prometheus, prometheus3_build.promtool):
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False)
        said = done.stdout + done.stderr
        assert done.returncode == 0 and f"version {engines.PROMETHEUS_VERSION}" in said, said


def _scrape_config_dir(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    (tmp_path / "prometheus.yml").write_text(text)
    (tmp_path / RULES_FILE).write_text(shipped_rules())
    return tmp_path


def test_v3_promtool_passes_the_shipped_scrape_config(prometheus3_build: PrometheusBuild,
                                                      tmp_path: pathlib.Path) -> None:
    work = _scrape_config_dir(tmp_path, SCRAPE_CONFIG.read_text())
    done = prometheus3_build.promtool_run("check", "config", "prometheus.yml", cwd=work)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "SUCCESS" in said, said
    # Its rule file was read and checked too, with every alert in it.
    assert f"{len(alert_rules(rule_groups(monitoring_objects())))} rules found" in said, said


# Each edit breaks the shipped file in a way only a promtool that knows kubernetes_sd can see.
BROKEN_SCRAPE = {
    "role": ("role: pod", "role: pods"),
    "sd-key": ("namespaces:", "namespace:"),
    "relabel-action": ("action: keep", "action: keeep"),
    "relabel-regex": ("regex: metrics", "regex: metrics("),
    "rule-file": (f"- {RULES_FILE}", "- missing-rules.yaml"),
}


@pytest.mark.parametrize("name", sorted(BROKEN_SCRAPE))
def test_v3_promtool_fails_a_broken_scrape_config(prometheus3_build: PrometheusBuild, tmp_path: pathlib.Path,
                                                  name: str) -> None:
    old, new = BROKEN_SCRAPE[name]
    text = SCRAPE_CONFIG.read_text()
    assert old in text, f"{old!r} is not in scrape.yaml"
    work = _scrape_config_dir(tmp_path, text.replace(old, new, 1))
    done = prometheus3_build.promtool_run("check", "config", "prometheus.yml", cwd=work)
    assert done.returncode != 0, done.stdout + done.stderr


def test_v3_promtool_checks_and_tests_the_shipped_rules(prometheus3_build: PrometheusBuild,
                                                        tmp_path: pathlib.Path) -> None:
    (tmp_path / RULES_FILE).write_text(shipped_rules())
    done = prometheus3_build.promtool_run("check", "rules", RULES_FILE, cwd=tmp_path)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr

    broken = rule_groups(monitoring_objects())
    alert_rules(broken)[0]["expr"] = "sum without (kind (pinctl_ready)"
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
    assert prometheus3_build.promtool_run("check", "rules", "broken.yaml", cwd=tmp_path).returncode != 0

    # The unit suite's alert tests (tests/unit/test_deploy_monitoring.py), run by v3's evaluator.
    groups = rule_groups(monitoring_objects())
    for rule in alert_rules(groups):
        rule.pop("annotations", None)
    (tmp_path / "bare.yaml").write_text(yaml.safe_dump(groups))
    tests = {"rule_files": ["bare.yaml"], "evaluation_interval": "1m", "tests": ALERT_TESTS}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    done = prometheus3_build.promtool_run("test", "rules", "tests.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    # And they can fail: an alert expected on the wrong node.
    wrong = json.loads(json.dumps(ALERT_TESTS))
    wrong[0]["alert_rule_test"][1]["exp_alerts"][0]["exp_labels"]["node"] = "n2"
    (tmp_path / "wrong.yaml").write_text(yaml.safe_dump({**tests, "tests": wrong}))
    assert prometheus3_build.promtool_run("test", "rules", "wrong.yaml", cwd=tmp_path).returncode != 0


# --- discovery against the harness's API server ---------------------------------------------------


class FakeNodePods:
    """A Node object and pods bound to it, their status written as a kubelet would; all removed after."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.node = f"prom-node-{uuid.uuid4().hex[:8]}"
        self.pods: list[tuple[str, str]] = []
        plane.kubectl("apply", "-f", "-", stdin=json.dumps(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node}}))

    def pod(self, namespace: str, name: str, labels: dict[str, str], ports: dict[str, int]) -> None:
        """A pod on the node, Running at 127.0.0.1 with these named container ports."""
        # Admission wants the namespace's default service account, which a controller makes.
        self.plane.wait_for(f"serviceaccount {namespace}/default", lambda: self.plane.kubectl(
            "-n", namespace, "get", "serviceaccount", "default", check=False).returncode == 0)
        manifest = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "nodeName": self.node,
                "automountServiceAccountToken": False,
                # The node never becomes Ready: the pod stays through the taints that follow.
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "agent", "image": "pinctl:test",
                                "ports": [{"name": port_name, "containerPort": port}
                                          for port_name, port in ports.items()]}],
            },
        }
        self.plane.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
        self.pods.append((namespace, name))
        status = {"status": {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
                             "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}]}}
        self.plane.kubectl("-n", namespace, "patch", "pod", name, "--subresource=status", "--type=merge",
                           "-p", json.dumps(status))

    def remove(self) -> None:
        for namespace, name in self.pods:
            # No kubelet confirms a graceful deletion here.
            self.plane.kubectl("-n", namespace, "delete", "pod", name, "--force", "--grace-period=0",
                               "--ignore-not-found", check=False)
        self.plane.kubectl("delete", "node", self.node, "--ignore-not-found", check=False)


@pytest.fixture
def fake_node(control_plane: ControlPlane) -> Iterator[FakeNodePods]:
    made = FakeNodePods(control_plane)
    try:
        yield made
    finally:
        made.remove()


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = f"prom-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def _start(prometheus3: Callable[..., Prometheus], sd: KubernetesSd, namespaces: list[str] | None) -> Prometheus:
    job = kubernetes_job(shipped_job(), sd, namespaces=namespaces)
    return prometheus3(server_config([job], [RULES_FILE]), {RULES_FILE: shipped_rules()})


def _meta(target: dict[str, Any], name: str) -> str:
    return str(target.get("discoveredLabels", {}).get(f"__meta_kubernetes_{name}", ""))


def test_prometheus3_discovers_and_scrapes_the_shipped_jobs_pods(
        control_plane: ControlPlane, prometheus3: Callable[..., Prometheus], fake_node: FakeNodePods,
        namespace: str) -> None:
    identity = cluster_identity(control_plane)
    server = _start(prometheus3, identity, [namespace])
    fake_node.pod(namespace, "agent", {"app.kubernetes.io/name": "pinctl"},
                  {"metrics": server.port, "health": server.port + 1})
    fake_node.pod(namespace, "stranger", {"app.kubernetes.io/name": "other"}, {"metrics": server.port})

    def the_agent_up() -> list[dict[str, Any]]:
        targets = server.targets()
        return targets if [t.get("health") for t in targets] == ["up"] else []

    (target,) = server.wait_for("the agent's metrics port scraped", the_agent_up)
    # scrape.yaml's relabelling: one target, named by node and pod; the stranger and the
    # agent's other port are dropped.
    assert target["labels"]["node"] == fake_node.node
    assert target["labels"]["pod"] == "agent"
    assert target["labels"]["job"] == "pinctl"
    assert target["scrapeUrl"] == f"http://127.0.0.1:{server.port}/metrics"
    assert _meta(target, "namespace") == namespace

    def both_dropped() -> list[dict[str, Any]]:
        found = server.targets("dropped")
        return found if len(found) >= 2 else []

    dropped = server.wait_for("the stranger and the other port dropped", both_dropped)
    assert {(_meta(t, "pod_name"), _meta(t, "pod_container_port_name")) for t in dropped} == {
        ("stranger", "metrics"), ("agent", "health")}
    # No list or watch failed, and the scrape's samples carry the node label.
    assert server.own_metric("prometheus_sd_kubernetes_failures_total") == 0
    assert server.wait_for("up{job=pinctl}", lambda: server.query('up{job="pinctl"}')) == [
        ({"__name__": "up", "instance": f"127.0.0.1:{server.port}", "job": "pinctl",
          "node": fake_node.node, "pod": "agent"}, 1.0)]
    # The shipped rules are loaded and evaluate without error; none fires (no pinctl here).
    rules = server.wait_for("every rule evaluated without error", lambda: (
        found if (found := server.rules()) and all(rule.get("health") == "ok" for rule in found) else []))
    assert {rule["name"] for rule in rules} == ALERTS
    assert server.alerts() == []
    assert not [line for line in server.log_text().splitlines() if "level=ERROR" in line], server.log_tail()


def test_without_rbac_discovery_fails_and_says_so(control_plane: ControlPlane,
                                                  prometheus3: Callable[..., Prometheus],
                                                  fake_node: FakeNodePods, namespace: str) -> None:
    identity = cluster_identity(control_plane, rules=[])
    server = _start(prometheus3, identity, [namespace])
    fake_node.pod(namespace, "agent", {"app.kubernetes.io/name": "pinctl"}, {"metrics": server.port})
    server.wait_for("prometheus_sd_kubernetes_failures_total > 0",
                    lambda: (server.own_metric("prometheus_sd_kubernetes_failures_total") or 0) > 0)
    assert server.targets() == []
    # The counter is raised before the error is logged.
    server.wait_for("the refusal in its log", lambda: "forbidden" in server.log_text())


def test_the_shipped_rbac_lets_the_shipped_job_discover_in_pinctl_only(
        control_plane: ControlPlane, prometheus3: Callable[..., Prometheus], fake_node: FakeNodePods,
        namespace: str, tmp_path: pathlib.Path) -> None:
    control_plane.kubectl("apply", "-f", str(KUBE / "namespace.yaml"))
    control_plane.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}}))
    applied = control_plane.kubectl("apply", "-f", str(RBAC)).stdout
    for made in ("serviceaccount/prometheus", "role.rbac.authorization.k8s.io/prometheus-pinctl-discovery",
                 "rolebinding.rbac.authorization.k8s.io/prometheus-pinctl-discovery"):
        assert made in applied, applied
    try:
        def can(*args: str) -> bool:
            done = control_plane.kubectl("auth", "can-i", *args, f"--as={ACCOUNT}", check=False)
            return done.stdout.strip() == "yes"

        assert all(can(verb, "pods", "-n", "pinctl") for verb in ("get", "list", "watch"))
        assert not can("list", "pods", "-n", namespace)
        assert not can("list", "pods", "--all-namespaces")
        assert not can("list", "secrets", "-n", "pinctl")
        assert not can("list", "nodes")
        assert not can("delete", "pods", "-n", "pinctl")

        identity = service_account_identity(control_plane, "monitoring", "prometheus", tmp_path / "token")
        shipped = _start(prometheus3, identity, None)  # the job as shipped: namespace pinctl
        # A pod the job's relabelling drops (another name label, so no DaemonSet in pinctl adopts it):
        # listed through the token, it shows among the dropped targets.
        probe = f"rbac-probe-{uuid.uuid4().hex[:6]}"
        fake_node.pod("pinctl", probe, {"app.kubernetes.io/name": "pinctl-rbac-probe"}, {"metrics": shipped.port})
        shipped.wait_for("the probe pod discovered through the token", lambda: [
            t for t in shipped.targets("dropped") if _meta(t, "pod_name") == probe])
        assert shipped.own_metric("prometheus_sd_kubernetes_failures_total") == 0

        # The same token for another namespace: refused, and the failure counted.
        elsewhere = _start(prometheus3, identity, [namespace])
        elsewhere.wait_for("prometheus_sd_kubernetes_failures_total > 0", lambda: (
            elsewhere.own_metric("prometheus_sd_kubernetes_failures_total") or 0) > 0)
    finally:
        control_plane.kubectl("delete", "-f", str(RBAC), "--ignore-not-found", check=False)

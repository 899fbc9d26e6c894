"""The monitoring manifests in deploy/kubernetes/monitoring (prometheus-operator) against pinctl
and the DaemonSet: the PodMonitor selects the DaemonSet's pods and scrapes its named metrics port,
every alert rule watches metrics pinctl exports and has a severity and a summary, and promtool
checks the rules and runs their unit tests (each alert fires on the series that should raise it
and stays quiet on a healthy node). The mutation tests show that each check can fail."""

from __future__ import annotations

import copy
import pathlib
import re
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import yaml  # PyYAML: part of the test extras

from pinctl.metrics import exposition as metrics

from .deploy_helpers import (
    BASE_DAEMONSET,
    KUBE,
    Parsed,
    container_of,
    daemonset,
    daemonsets,
    named_ports,
    objects,
    parse_fixture,  # noqa: F401  (the parse fixture)
    the,
)

# -- monitoring: PodMonitor and alert rules (prometheus-operator) -----------------------------

MONITORING = KUBE / "monitoring"
# What the alert rules must watch for (issue 13), by alert name.
ALERTS = {"PinctlWatcherNotReady", "PinctlWantedImageAtRisk", "PinctlWantedImageDeletedNextGc", "PinctlCriMismatch",
          "PinctlSyncErrors", "PinctlCriProxyNotReady", "PinctlConfigReloadFailed", "PinctlPolicyImageNotKept"}


def monitoring_manifests() -> dict[str, list[dict[str, Any]]]:
    return {path.name: [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
            for path in sorted(MONITORING.glob("*.yaml"))}


def monitoring_objects() -> list[dict[str, Any]]:
    return [doc for name, docs in monitoring_manifests().items() if name != "kustomization.yaml" for doc in docs]


def rule_groups(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = the("PrometheusRule", docs)["spec"]
    return spec


def alert_rules(groups: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in groups["groups"] for rule in group["rules"] if "alert" in rule]


def check_monitoring(docs: list[dict[str, Any]], pod_docs: list[dict[str, Any]]) -> None:
    namespace = the("Namespace", pod_docs)["metadata"]["name"]
    for doc in docs:
        assert doc["metadata"].get("namespace") == namespace, f"{doc['kind']} is not in {namespace}"
    monitor = the("PodMonitor", docs)["spec"]
    selector = monitor["selector"].get("matchLabels", {})
    for agent in daemonsets(pod_docs):  # every agent, whatever its node's runtime
        pod_labels = agent["spec"]["template"]["metadata"]["labels"]
        assert selector and selector.items() <= pod_labels.items(), f"selector {selector} misses the pods {pod_labels}"
    ports = named_ports(container_of(daemonset(BASE_DAEMONSET, pod_docs)))
    for endpoint in monitor["podMetricsEndpoints"]:
        assert endpoint.get("port") in ports, f"PodMonitor scrapes port {endpoint.get('port')!r}, not one of {ports}"
        assert endpoint.get("path", "/metrics") == "/metrics"
    rules = alert_rules(rule_groups(docs))
    assert ALERTS <= {rule["alert"] for rule in rules}, f"missing alerts: {ALERTS - {r['alert'] for r in rules}}"
    for rule in rules:
        named = set(re.findall(r"\bpinctl_[a-z0-9_]+", rule["expr"]))
        assert named, f"{rule['alert']} watches no pinctl metric"
        unknown = named - set(metrics.SPECS)
        assert not unknown, f"{rule['alert']}: pinctl exports no {sorted(unknown)}"
        assert rule.get("labels", {}).get("severity") in ("warning", "critical"), f"{rule['alert']}: no severity"
        assert rule.get("annotations", {}).get("summary"), f"{rule['alert']}: no summary"


def test_monitoring(parse: Callable[[list[str]], Parsed]) -> None:
    check_monitoring(monitoring_objects(), objects())


def test_monitoring_kustomization_lists_every_manifest() -> None:
    found = monitoring_manifests()
    (kustomization,) = found.pop("kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(found)


MONITORING_EDITS: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "selector": lambda docs: the("PodMonitor", docs)["spec"]["selector"]["matchLabels"].__setitem__("app", "x"),
    "port": lambda docs: the("PodMonitor", docs)["spec"]["podMetricsEndpoints"][0].__setitem__("port", "http"),
    "namespace": lambda docs: the("PodMonitor", docs)["metadata"].__setitem__("namespace", "monitoring"),
    "unknown-metric": lambda docs: alert_rules(rule_groups(docs))[0].__setitem__("expr", "pinctl_redy == 0"),
    "alert-gone": lambda docs: rule_groups(docs)["groups"][0]["rules"].pop(0),
}


@pytest.mark.parametrize("name", sorted(MONITORING_EDITS))
def test_monitoring_check_fails(name: str) -> None:
    docs = copy.deepcopy(monitoring_objects())
    MONITORING_EDITS[name](docs)
    with pytest.raises(AssertionError):
        check_monitoring(docs, objects())


def _promtool() -> str:
    from tests.conftest import engine_unavailable

    tool = shutil.which("promtool")
    if tool is None:
        engine_unavailable("promtool is not installed (apt-get install prometheus; scripts/test-packages.txt)")
    return tool


def promtool(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], capture_output=True, text=True, cwd=cwd, timeout=60, check=False)


def test_alert_rules_pass_promtool_check(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "pinctl.rules.yml"
    path.write_text(yaml.safe_dump(rule_groups(monitoring_objects())))
    result = promtool("check", "rules", str(path), cwd=tmp_path)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_promtool_check_rules_can_fail(tmp_path: pathlib.Path) -> None:
    groups = rule_groups(monitoring_objects())
    alert_rules(groups)[0]["expr"] = "sum without (kind (pinctl_ready)"
    path = tmp_path / "broken.rules.yml"
    path.write_text(yaml.safe_dump(groups))
    assert promtool("check", "rules", str(path), cwd=tmp_path).returncode != 0


# Each alert fires on the series that should raise it, and stays quiet on a healthy node. The
# annotations are left out of this copy: promtool compares them word for word.
NODE = 'node="n1", instance="10.0.0.1:9736"'
ALERT_TESTS: list[dict[str, Any]] = [
    {"interval": "1m",
     "input_series": [{"series": f"pinctl_ready{{{NODE}}}", "values": "1 1 0x30"},
                      {"series": 'pinctl_ready{node="n2", instance="10.0.0.2:9736"}', "values": "1x32"}],
     "alert_rule_test": [{"eval_time": "10m", "alertname": "PinctlWatcherNotReady", "exp_alerts": []},
                         {"eval_time": "14m", "alertname": "PinctlWatcherNotReady",
                          "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1",
                                                         "instance": "10.0.0.1:9736"}}]}]},
    {"interval": "1m",
     "input_series": [{"series": f"pinctl_gc_at_risk_images{{{NODE}}}", "values": "0 2x40"},
                      {"series": f"pinctl_gc_at_risk_deleted_images{{{NODE}}}", "values": "0x10 1x10"}],
     "alert_rule_test": [{"eval_time": "20m", "alertname": "PinctlWantedImageAtRisk", "exp_alerts": []},
                         {"eval_time": "35m", "alertname": "PinctlWantedImageAtRisk",
                          "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1",
                                                         "instance": "10.0.0.1:9736"}}]},
                         {"eval_time": "17m", "alertname": "PinctlWantedImageDeletedNextGc",
                          "exp_alerts": [{"exp_labels": {"severity": "critical", "node": "n1",
                                                         "instance": "10.0.0.1:9736"}}]}]},
    {"interval": "1m",
     "input_series": [{"series": f'pinctl_cri_mismatches{{{NODE}, cause="labels-ignored"}}', "values": "1x30"},
                      {"series": f'pinctl_cri_mismatches{{{NODE}, cause="pattern-only"}}', "values": "0x30"},
                      {"series": 'pinctl_cri_mismatches{node="n2", instance="10.0.0.2:9736", cause="labels-ignored"}',
                       "values": "0x30"}],
     "alert_rule_test": [{"eval_time": "20m", "alertname": "PinctlCriMismatch",
                          "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1",
                                                         "instance": "10.0.0.1:9736"}}]}]},
    {"interval": "1m",
     "input_series": [{"series": f'pinctl_sync_errors_total{{{NODE}, kind="unreachable"}}', "values": "0+1x40"},
                      {"series": 'pinctl_sync_errors_total{node="n2", instance="10.0.0.2:9736", '
                                 'kind="changed-under-us"}', "values": "0+5x40"}],
     "alert_rule_test": [{"eval_time": "10m", "alertname": "PinctlSyncErrors", "exp_alerts": []},
                         {"eval_time": "30m", "alertname": "PinctlSyncErrors",
                          "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1",
                                                         "instance": "10.0.0.1:9736"}}]}]},
    # Pins unreadable for 5 minutes, then readable (n2): no alert; for 12 minutes and on (n1): one.
    {"interval": "1m",
     "input_series": [{"series": 'pinctl_cri_proxy_ready{node="n1", instance="10.0.0.1:9737"}', "values": "1 1 0x30"},
                      {"series": 'pinctl_cri_proxy_ready{node="n2", instance="10.0.0.2:9737"}',
                       "values": "1 1 0x4 1x26"}],
     "alert_rule_test": [{"eval_time": "10m", "alertname": "PinctlCriProxyNotReady", "exp_alerts": []},
                         {"eval_time": "14m", "alertname": "PinctlCriProxyNotReady",
                          "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1",
                                                         "instance": "10.0.0.1:9737"}}]}]},
    # An exact pattern's image absent for 20 minutes (n1): an alert; a glob's image unpinned for 5
    # minutes and then pinned (n2): none; a glob matching nothing (n2, absent): none.
    {"interval": "1m",
     "input_series": [
         {"series": f'pinctl_policy_images{{{NODE}, pattern="example.test/app:1", kind="exact", state="absent"}}',
          "values": "1x25"},
         {"series": 'pinctl_policy_images{node="n2", instance="10.0.0.2:9736", pattern="example.test/*", '
                    'kind="glob", state="unpinned"}', "values": "1x5 0x20"},
         {"series": 'pinctl_policy_images{node="n2", instance="10.0.0.2:9736", pattern="other.test/*", '
                    'kind="glob", state="absent"}', "values": "1x25"}],
     "alert_rule_test": [{"eval_time": "10m", "alertname": "PinctlPolicyImageNotKept", "exp_alerts": []},
                         {"eval_time": "20m", "alertname": "PinctlPolicyImageNotKept",
                          "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1",
                                                         "instance": "10.0.0.1:9736", "pattern": "example.test/app:1",
                                                         "kind": "exact", "state": "absent"}}]}]},
    # A broken config reloaded at minute 2 and kept (n1): an alert; fixed after 3 minutes (n2): none.
    {"interval": "1m",
     "input_series": [{"series": f"pinctl_config_last_reload_successful{{{NODE}}}", "values": "1 1 0x20"},
                      {"series": 'pinctl_config_last_reload_successful{node="n2", instance="10.0.0.2:9736"}',
                       "values": "1 1 0x3 1x16"}],
     "alert_rule_test": [{"eval_time": "6m", "alertname": "PinctlConfigReloadFailed", "exp_alerts": []},
                         {"eval_time": "8m", "alertname": "PinctlConfigReloadFailed",
                          "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1",
                                                         "instance": "10.0.0.1:9736"}}]}]},
]


def test_alert_rules_fire_when_they_should(tmp_path: pathlib.Path) -> None:
    groups = rule_groups(monitoring_objects())
    for rule in alert_rules(groups):
        rule.pop("annotations", None)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(groups))
    tested = {case["alertname"] for test in ALERT_TESTS for case in test["alert_rule_test"]}
    assert tested == ALERTS
    (tmp_path / "tests.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                                                        "tests": ALERT_TESTS}))
    result = promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr

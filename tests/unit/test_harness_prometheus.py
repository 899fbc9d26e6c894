"""The Prometheus 3 harness's pure parts (tests/harness/prometheus.py) and the RBAC example beside
scrape.yaml: the version table's entries, the job the harness derives from the shipped one, the
config it writes, and what rbac.yaml grants. tests/integration/test_prometheus3.py runs the real
Prometheus 3 against the harness's API server."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest
import yaml

from tests.harness import engines
from tests.harness import prometheus as prom
from tests.harness.engines import GoEngine

SD = prom.KubernetesSd("https://127.0.0.1:6443", pathlib.Path("/pki/ca.crt"),
                       cert_file=pathlib.Path("/pki/p.crt"), key_file=pathlib.Path("/pki/p.key"))


def test_both_binaries_come_from_one_module_version_that_names_the_release() -> None:
    server, tool = engines.ENGINES[engines.PROMETHEUS], engines.ENGINES[engines.PROMTOOL]
    assert isinstance(server, GoEngine) and isinstance(tool, GoEngine)
    assert (server.module, server.version) == (tool.module, tool.version)
    assert (server.binary, server.package) == ("prometheus", "cmd/prometheus")
    assert (tool.binary, tool.package) == ("promtool", "cmd/promtool")
    # Module v0.3MM.P is Prometheus 3.MM.P, and --version says so.
    match = re.fullmatch(r"v0\.3(\d\d)\.(\d+)", server.version)
    assert match and engines.PROMETHEUS_VERSION == f"3.{int(match[1])}.{match[2]}"
    for spec in (server, tool):
        assert spec.version_vars == (f"github.com/prometheus/common/version.Version={engines.PROMETHEUS_VERSION}",)
        assert spec.method == "build" and not spec.cgo and not spec.unavailable


def test_the_job_keeps_the_shipped_discovery_and_relabelling_and_reaches_the_given_api_server() -> None:
    shipped = prom.shipped_job()
    job = prom.kubernetes_job(shipped, SD)
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "pod" and sd["namespaces"] == {"names": ["pinctl"]}
    assert sd["api_server"] == "https://127.0.0.1:6443"
    assert sd["tls_config"] == {"ca_file": "/pki/ca.crt", "cert_file": "/pki/p.crt", "key_file": "/pki/p.key"}
    assert "authorization" not in sd
    assert job["relabel_configs"] == shipped["relabel_configs"]
    assert (job["scrape_interval"], job["scrape_timeout"]) == (prom.FAST_INTERVAL, prom.FAST_INTERVAL)
    # The shipped job itself is left as it was.
    assert "api_server" not in shipped["kubernetes_sd_configs"][0]
    assert shipped["scrape_interval"] == "30s"


def test_a_test_namespace_and_a_token_replace_what_they_name() -> None:
    token = prom.KubernetesSd("https://127.0.0.1:1", pathlib.Path("/ca"), token_file=pathlib.Path("/t"))
    (sd,) = prom.kubernetes_job(prom.shipped_job(), token, namespaces=["prom-1"], interval="2s")["kubernetes_sd_configs"]
    assert sd["namespaces"] == {"names": ["prom-1"]}
    assert sd["tls_config"] == {"ca_file": "/ca"}
    assert sd["authorization"] == {"type": "Bearer", "credentials_file": "/t"}


def test_half_a_client_certificate_and_a_job_without_discovery_are_refused() -> None:
    with pytest.raises(ValueError):
        prom.KubernetesSd("https://x", pathlib.Path("/ca"), cert_file=pathlib.Path("/c")).sd_settings()
    with pytest.raises(prom.PrometheusError):
        prom.kubernetes_job({"job_name": "static", "static_configs": [{"targets": ["127.0.0.1:1"]}]}, SD)
    with pytest.raises(prom.PrometheusError):
        prom.shipped_job("no-such-job")


def test_the_server_config_evaluates_and_scrapes_fast_with_its_rule_files() -> None:
    config = prom.server_config([{"job_name": "a"}], ["r.yaml"])
    assert config["global"] == {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
    assert config["rule_files"] == ["r.yaml"] and config["scrape_configs"] == [{"job_name": "a"}]


def test_samples_of_an_exposition() -> None:
    text = ("# TYPE prometheus_sd_kubernetes_failures_total counter\nprometheus_sd_kubernetes_failures_total 3\n"
            "# TYPE up gauge\nup{job=\"b\",instance=\"a\"} 1\n")
    assert prom.samples(text) == {("prometheus_sd_kubernetes_failures_total", ()): 3.0,
                                  ("up", (("instance", "a"), ("job", "b"))): 1.0}


def _rbac() -> dict[str, dict[str, Any]]:
    docs = [doc for doc in yaml.safe_load_all(prom.RBAC.read_text()) if doc]
    kinds = [doc["kind"] for doc in docs]
    assert sorted(kinds) == ["Role", "RoleBinding", "ServiceAccount"], kinds
    return {doc["kind"]: doc for doc in docs}


def test_rbac_grants_reading_pods_in_the_namespace_the_job_watches_and_nothing_else() -> None:
    found = _rbac()
    watched = {name for sd in prom.shipped_job()["kubernetes_sd_configs"] for name in sd["namespaces"]["names"]}
    role, binding, account = found["Role"], found["RoleBinding"], found["ServiceAccount"]
    assert {role["metadata"]["namespace"], binding["metadata"]["namespace"]} == watched == {"pinctl"}
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]


def test_bootstrap_builds_both_with_the_other_go_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.harness import gobuild

    built: list[str] = []

    def binary(name: str) -> pathlib.Path:
        built.append(name)
        return pathlib.Path("/x") / name

    monkeypatch.setattr(gobuild, "binary", binary)
    # scripts/bootstrap --test runs `python -m tests.harness.gobuild` with no names: every Go engine.
    assert gobuild.build_all([]) == 0
    assert {engines.PROMETHEUS, engines.PROMTOOL, engines.CRIO, engines.CRICTL} <= set(built)


@pytest.mark.parametrize("ci", ["", "true"])
def test_a_build_that_fails_skips_locally_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    from tests.harness import debs

    def broken() -> prom.PrometheusBuild:
        raise debs.EngineUnavailable("go build failed")

    monkeypatch.setattr(prom, "ensure_build", broken)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception if ci else pytest.skip.Exception, match="go build failed"):
        prom.build_or_unavailable()

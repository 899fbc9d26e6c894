"""Prometheus 3 and its promtool, built from their Go module, run on loopback for the tests.

Debian's prometheus (2.42, used by tests/integration/test_metrics.py) is built without
kubernetes_sd, so its promtool refuses deploy/kubernetes/prometheus/scrape.yaml. These come from
``github.com/prometheus/prometheus`` (``engines.PROMETHEUS``, ``engines.PROMTOOL``), built once per
machine by ``gobuild.py``.

:class:`Prometheus` runs one server under a work directory of its own:

    <work>/prometheus.yml   the config (JSON, which is YAML)
    <work>/<rule file>      each rule file it was given, beside the config (relative names)
    <work>/data/            its TSDB
    <work>/prometheus.log   its output

on a free port of 127.0.0.1, and waits for ``/-/ready``. ``query()``, ``targets()``, ``alerts()``,
``rules()`` and ``own_metrics()`` read its HTTP API and its own /metrics.

For ``kubernetes_sd_configs`` against the harness's API server (tests/harness/control_plane.py):
:func:`cluster_identity` mints a client certificate and binds it a ClusterRole that may get, list
and watch pods (what pod discovery needs, in any namespace a test uses), and
:func:`kubernetes_job` turns a shipped scrape job (:func:`shipped_scrape_config`) into one that
reaches that API server (``api_server``, ``tls_config``, the certificate or a bearer token file),
scraping as fast as a test wants, optionally in another namespace. The same job points at the pods
of real nodes as it does at the pods a test writes by hand.

Fixtures (registered in tests/conftest.py): ``prometheus3_build`` (session: both binaries, a build
that fails skips locally and fails in CI) and ``prometheus3`` (a factory; every server it starts is
stopped at the test's end).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Optional, TypeVar

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import debs, engines, gobuild
from tests.harness.containerd import dying_with_parent, terminate
from tests.harness.control_plane import ControlPlane, loopback_env
from tests.harness.pod_fixtures import _unavailable
from tests.harness.ports import free_port

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRAPE_CONFIG = REPO / "deploy" / "kubernetes" / "prometheus" / "scrape.yaml"
RBAC = REPO / "deploy" / "kubernetes" / "prometheus" / "rbac.yaml"
# Generous: a first start on a busy machine replays nothing but still compiles its config.
READY_S = 120.0
STOP_GRACE_S = 20.0
HTTP_TIMEOUT_S = 10.0
PROMTOOL_TIMEOUT_S = 120.0
# Waits for what Prometheus does (a discovery, a scrape, a rule's evaluation): never a wall time.
WAIT_S = 120.0
POLL_S = 0.25
# Scrape and evaluate every second: a test waits for a condition, never for the shipped 30 s.
FAST_INTERVAL = "1s"
POD_READER_RULES: list[dict[str, Any]] = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]

T = TypeVar("T")


class PrometheusError(RuntimeError):
    """Prometheus did not start, died, or its API answered with an error."""


@dataclasses.dataclass(frozen=True)
class PrometheusBuild:
    prometheus: pathlib.Path
    promtool: pathlib.Path

    def promtool_run(self, *args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
        """``promtool ARGS`` in ``cwd`` (promtool reads a config's rule files relative to it)."""
        return subprocess.run([str(self.promtool), *args], capture_output=True, text=True, cwd=cwd,
                              timeout=PROMTOOL_TIMEOUT_S, env=loopback_env(), check=False)


def ensure_build() -> PrometheusBuild:
    """Both binaries, built on first use (``gobuild.binary``; raises ``debs.EngineUnavailable``)."""
    return PrometheusBuild(gobuild.binary(engines.PROMETHEUS), gobuild.binary(engines.PROMTOOL))


# --- configuration (pure) --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class KubernetesSd:
    """How a Prometheus outside the cluster reaches its API server: its CA, then a client
    certificate or a bearer token file (a service account's token)."""

    api_server: str
    ca_file: pathlib.Path
    cert_file: Optional[pathlib.Path] = None
    key_file: Optional[pathlib.Path] = None
    token_file: Optional[pathlib.Path] = None

    def sd_settings(self) -> dict[str, Any]:
        """The keys one ``kubernetes_sd_configs`` entry gains."""
        tls: dict[str, Any] = {"ca_file": str(self.ca_file)}
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("a client certificate needs both cert_file and key_file")
        if self.cert_file is not None and self.key_file is not None:
            tls.update(cert_file=str(self.cert_file), key_file=str(self.key_file))
        settings: dict[str, Any] = {"api_server": self.api_server, "tls_config": tls}
        if self.token_file is not None:
            settings["authorization"] = {"type": "Bearer", "credentials_file": str(self.token_file)}
        return settings


def shipped_scrape_config(path: pathlib.Path = SCRAPE_CONFIG) -> dict[str, Any]:
    config = yaml.safe_load(path.read_text())
    if not isinstance(config, dict) or not isinstance(config.get("scrape_configs"), list):
        raise PrometheusError(f"{path} has no scrape_configs")
    return config


def shipped_job(name: str = "pinctl", path: pathlib.Path = SCRAPE_CONFIG) -> dict[str, Any]:
    for job in shipped_scrape_config(path)["scrape_configs"]:
        if job.get("job_name") == name:
            return dict(job)
    raise PrometheusError(f"{path} has no job {name!r}")


def kubernetes_job(job: Mapping[str, Any], sd: KubernetesSd, *, namespaces: Optional[Sequence[str]] = None,
                   interval: str = FAST_INTERVAL) -> dict[str, Any]:
    """``job`` (a scrape config with ``kubernetes_sd_configs``) reaching ``sd``'s API server.

    Everything else is kept as shipped (role, relabelling, path); ``namespaces`` replaces the
    namespaces each discovery watches (a test's own, on the shared cluster); the scrape interval
    and timeout become ``interval``.
    """
    result = copy.deepcopy(dict(job))
    configs = result.get("kubernetes_sd_configs")
    if not configs:
        raise PrometheusError(f"job {result.get('job_name')!r} has no kubernetes_sd_configs")
    for entry in configs:
        entry.update(sd.sd_settings())
        if namespaces is not None:
            entry["namespaces"] = {"names": list(namespaces)}
    result["scrape_interval"] = interval
    result["scrape_timeout"] = interval
    return result


def server_config(scrape_configs: Sequence[Mapping[str, Any]], rule_files: Sequence[str] = (),
                  interval: str = FAST_INTERVAL) -> dict[str, Any]:
    """A whole prometheus.yml: the jobs, the rule files (names beside the config), fast intervals."""
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "rule_files": list(rule_files),
        "scrape_configs": [dict(job) for job in scrape_configs],
    }


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """An exposition's samples: (name, sorted labels) -> value."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return found


# --- identities on the harness's cluster -----------------------------------------------------------


def cluster_identity(plane: ControlPlane, name: str = "", *, rules: Optional[list[dict[str, Any]]] = None) -> KubernetesSd:
    """A client certificate for user ``pinctl-test-prometheus-<name>``, bound a ClusterRole of
    ``rules`` (get/list/watch pods unless told otherwise; ``[]`` binds nothing)."""
    name = name or uuid.uuid4().hex[:8]
    user = f"pinctl-test-prometheus-{name}"
    pair = plane.pki.client(user, user)
    wanted = POD_READER_RULES if rules is None else rules
    if wanted:
        objects = {"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": user},
             "rules": wanted},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": user},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]},
        ]}
        plane.kubectl("apply", "-f", "-", stdin=json.dumps(objects))
    return KubernetesSd(plane.server, plane.pki.ca.cert, cert_file=pair.cert, key_file=pair.key)


def service_account_identity(plane: ControlPlane, namespace: str, account: str, token_file: pathlib.Path,
                             duration: str = "2h") -> KubernetesSd:
    """A service account's token (TokenRequest, through ``kubectl create token``) in ``token_file``."""
    token = plane.kubectl("-n", namespace, "create", "token", account, f"--duration={duration}").stdout.strip()
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    return KubernetesSd(plane.server, plane.pki.ca.cert, token_file=token_file)


# --- the server ------------------------------------------------------------------------------------


class Prometheus:
    """One Prometheus 3 on 127.0.0.1, with ``config`` and ``rule_files`` (name -> text) under ``work``."""

    def __init__(self, build: PrometheusBuild, work: pathlib.Path, config: Mapping[str, Any],
                 rule_files: Optional[Mapping[str, str]] = None) -> None:
        self.build = build
        self.work = work
        self.config = dict(config)
        self.rule_files = dict(rule_files or {})
        self.port = 0
        self.log_path = work / "prometheus.log"
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        """host:port, as a scrape target names it."""
        return f"127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [str(self.build.prometheus), f"--config.file={self.work / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.work / 'data'}", f"--web.listen-address={self.address}",
                "--log.level=info"]

    def start(self) -> Prometheus:
        self.work.mkdir(parents=True, exist_ok=True)
        for name, text in self.rule_files.items():
            (self.work / name).write_text(text)
        (self.work / "prometheus.yml").write_text(json.dumps(self.config, indent=2) + "\n")
        self.port = free_port()
        with open(self.log_path, "ab") as log:
            # cwd: rule files named relative to the config resolve beside it either way.
            self._proc = subprocess.Popen(dying_with_parent(self.argv()), cwd=self.work, stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT, env=loopback_env())
        try:
            self.wait_for("/-/ready answering 200", lambda: self._status("/-/ready") == 200, READY_S)
        except BaseException:
            self.stop()
            raise
        return self

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            terminate(proc, STOP_GRACE_S)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    # --- HTTP ---

    def _get(self, path: str) -> tuple[int, str]:
        try:
            with self._opener.open(self.url + path, timeout=HTTP_TIMEOUT_S) as reply:
                return int(reply.status), reply.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode(errors="replace")

    def _status(self, path: str) -> int:
        try:
            return self._get(path)[0]
        except (OSError, urllib.error.URLError):
            return 0

    def api(self, path: str, **params: str) -> Any:
        """``data`` of ``/api/v1/<path>``; an answer other than success raises PrometheusError."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        status, body = self._get(f"/api/v1/{path}{query}")
        try:
            answer = json.loads(body)
        except ValueError:
            raise PrometheusError(f"/api/v1/{path}: {status} {body[:500]}") from None
        if status != 200 or not isinstance(answer, dict) or answer.get("status") != "success":
            raise PrometheusError(f"/api/v1/{path}{query}: {status} {body[:1000]}")
        return answer.get("data")

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        """An instant query's vector: (labels, value) per series."""
        data = self.api("query", query=expr)
        if data.get("resultType") == "scalar":
            return [({}, float(data["result"][1]))]
        return [(dict(item["metric"]), float(item["value"][1])) for item in data["result"]]

    def targets(self, state: str = "active") -> list[dict[str, Any]]:
        """``activeTargets`` (or ``droppedTargets`` with ``state="dropped"``) of /api/v1/targets."""
        data = self.api("targets", state=state)
        found: list[dict[str, Any]] = data.get(f"{state}Targets") or []
        return found

    def alerts(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.api("alerts").get("alerts") or []
        return found

    def rules(self) -> list[dict[str, Any]]:
        """Every rule of every group, as /api/v1/rules gives it (with ``health`` and ``lastError``)."""
        return [rule for group in self.api("rules").get("groups") or [] for rule in group.get("rules") or []]

    def own_metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        status, body = self._get("/metrics")
        if status != 200:
            raise PrometheusError(f"/metrics: {status} {body[:500]}")
        return samples(body)

    def own_metric(self, name: str, **labels: str) -> Optional[float]:
        """The sum of the server's own samples ``name`` whose labels include ``labels`` (None: no sample)."""
        wanted = set(labels.items())
        values = [value for (sample, found), value in self.own_metrics().items()
                  if sample == name and wanted <= set(found)]
        return sum(values) if values else None

    def wait_for(self, what: str, probe: Callable[[], T], timeout: float = WAIT_S) -> T:
        """``probe()``'s first truthy answer; fails at once when Prometheus exits, at ``timeout`` otherwise."""
        deadline = time.monotonic() + timeout
        last_error = ""
        while True:
            if not self.is_alive():
                code = self._proc.poll() if self._proc else None
                raise PrometheusError(f"prometheus exited ({code}) while waiting for {what}; log {self.log_path}:\n"
                                      f"{self.log_tail()}")
            try:
                answer = probe()
                if answer:
                    return answer
            except (OSError, urllib.error.URLError, PrometheusError) as exc:
                last_error = str(exc)
            if time.monotonic() >= deadline:
                raise PrometheusError(f"{what}: not within {timeout:.0f} s"
                                      f"{f' (last error: {last_error})' if last_error else ''}; log tail:\n"
                                      f"{self.log_tail()}")
            time.sleep(POLL_S)


# --- fixtures ---------------------------------------------------------------------------------------


def build_or_unavailable() -> PrometheusBuild:
    """:func:`ensure_build`, or a skip (a failure with CI=true) saying why it cannot be had."""
    try:
        return ensure_build()
    except debs.EngineUnavailable as exc:
        _unavailable(f"Prometheus {engines.PROMETHEUS_VERSION} unavailable: {exc}")


@pytest.fixture(scope="session")
def prometheus3_build() -> PrometheusBuild:
    """Prometheus 3 and promtool (``engines.PROMETHEUS``), built once per machine."""
    return build_or_unavailable()


@pytest.fixture
def prometheus3(prometheus3_build: PrometheusBuild,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Prometheus]]:
    """``start(config, rule_files=None)``: a running Prometheus 3, stopped at the test's end."""
    started: list[Prometheus] = []

    def start(config: Mapping[str, Any], rule_files: Optional[Mapping[str, str]] = None) -> Prometheus:
        server = Prometheus(prometheus3_build, tmp_path_factory.mktemp("prometheus3"), config, rule_files)
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.stop()


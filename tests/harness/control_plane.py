"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

The binaries come from ``kubernetes_build.py`` (built once per machine). :class:`ControlPlane`
puts everything under one base directory, on free ports of 127.0.0.1 only:

    <base>/pki/            the CA, serving and client certificates, service-account keys (cluster_pki.py)
    <base>/kubeconfigs/    admin, controller-manager, scheduler, and each node minted later
    <base>/etcd/           etcd's data (``--unsafe-no-fsync``: a test cluster lives one session)
    <base>/logs/<name>.log each component's output

Choices that matter for the cluster tests built on it:

* ``--authorization-mode=Node,RBAC`` and the ``NodeRestriction`` admission plugin: a kubelet
  registers with a certificate from :meth:`ControlPlane.node_kubeconfig` (``system:node:<name>``
  in ``system:nodes``) and may change only its own Node and its own pods, as on a real cluster;
  the admin is in ``system:masters``.
* The controller-manager runs each controller under its own service account
  (``--use-service-account-credentials``), signs tokens with the key the apiserver verifies
  (``--service-account-private-key-file``), hands pods the CA (``--root-ca-file``) and can sign
  kubelet CSRs with the cluster CA (``--cluster-signing-*``).
* The service range is in loopback (:data:`SERVICE_CIDR`): nothing here routes service IPs (no
  kube-proxy), and should anything ever try the ``kubernetes`` service's address it stays on this
  machine. ``--endpoint-reconciler-type=none``: the apiserver advertises 127.0.0.1, which an
  Endpoints object may not hold, so it keeps none; a pod that needs the API is given
  :attr:`ControlPlane.server` (host network) instead.
* The controller-manager and scheduler serve with certificates of the cluster CA, so their
  health checks verify the chain; both elect leaders through Leases in ``kube-system``.

Every child gets the parent-death signal (``containerd.dying_with_parent``) and no proxy settings
(everything is loopback). :meth:`ControlPlane.start` waits for etcd's /health, the apiserver's
/readyz and the others' /healthz with generous deadlines (the machine is busy), and when a
component dies or never gets healthy it stops the rest and says which one, with its log's tail.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import pathlib
import re
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any, Optional, TypeVar

from tests.harness import cluster_pki
from tests.harness.containerd import dying_with_parent, terminate
from tests.harness.kubernetes_build import EtcdBuild, KubernetesBuild
from tests.harness.ports import free_port

# Loopback, and far from anything else the harness binds (it binds 127.0.0.1 only).
SERVICE_CIDR = "127.16.0.0/24"
KUBERNETES_SERVICE_IP = "127.16.0.1"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Generous: two shared cores, busy with other work; a first start on an idle machine takes seconds.
ETCD_READY_S = 120.0
APISERVER_READY_S = 300.0
COMPONENT_READY_S = 240.0
STOP_GRACE_S = 20.0
KUBECTL_TIMEOUT_S = 120.0
POLL_S = 0.25
LEADER_LEASES = ("kube-controller-manager", "kube-scheduler")
# cobra's "Error: ...", klog's E and F lines, etcd's JSON lines at level error or fatal.
_ERROR_LINE = re.compile(r'^(Error:|[EF]\d{4} |\{"level":"(error|fatal)")')
_PROXY_VARS = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy",
                         "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"})


T = TypeVar("T")


class ControlPlaneError(RuntimeError):
    """A component did not start, died, or a kubectl call failed."""


def loopback_env() -> dict[str, str]:
    """This process's environment without proxy settings: every address the cluster uses is loopback."""
    return {key: value for key, value in os.environ.items() if key not in _PROXY_VARS}


@dataclasses.dataclass
class Component:
    """One control-plane process, its log, and how long it took to become healthy."""

    name: str
    argv: list[str]
    log_path: pathlib.Path
    ready_seconds: float = 0.0
    _proc: Optional[subprocess.Popen[bytes]] = None
    _started: float = 0.0

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(dying_with_parent(self.argv), stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, env=loopback_env())
        self._started = time.monotonic()
        _RUNNING[self._proc.pid] = self

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc else None

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_code(self) -> Optional[int]:
        return self._proc.poll() if self._proc else None

    def mark_ready(self) -> None:
        self.ready_seconds = round(time.monotonic() - self._started, 1)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        _RUNNING.pop(proc.pid, None)
        terminate(proc, STOP_GRACE_S)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def error_lines(self, limit: int = 5) -> list[str]:
        """The log's first error lines: a bad flag's "Error:" heads a usage text that fills the tail."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return [line[:500] for line in lines if _ERROR_LINE.match(line)][:limit]

    def describe_death(self) -> str:
        errors = "\n".join(self.error_lines()) or "(none)"
        return (f"{self.name} exited with {self.exit_code()} (log {self.log_path})\n--- first errors ---\n{errors}\n"
                f"--- log tail ---\n{self.log_tail(20)}")


_RUNNING: dict[int, Component] = {}


def _stop_all() -> None:
    for component in list(_RUNNING.values()):
        component.stop()


atexit.register(_stop_all)


@dataclasses.dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int

    @classmethod
    def free(cls) -> Ports:
        """Five distinct free ports (ports.free_port: below the ephemeral range)."""
        return cls(*(free_port() for _ in range(5)))


class ControlPlane:
    """etcd and the three control-plane components of one build, under ``base_dir``; see the module doc."""

    def __init__(self, base_dir: pathlib.Path, kubernetes: KubernetesBuild, etcd: EtcdBuild) -> None:
        self.base_dir = base_dir
        self.kubernetes = kubernetes
        self.etcd = etcd
        self.pki = cluster_pki.ClusterPki(base_dir / "pki")
        self.kubeconfig_dir = base_dir / "kubeconfigs"
        self.log_dir = base_dir / "logs"
        self.ports = Ports.free()
        self.components: dict[str, Component] = {}
        self.startup_seconds = 0.0
        self._serving: dict[str, cluster_pki.KeyPair] = {}
        self._admin: Optional[cluster_pki.KeyPair] = None

    # --- addresses and credentials -------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.etcd_client}"

    @property
    def admin_kubeconfig(self) -> pathlib.Path:
        return self.kubeconfig_dir / "admin.kubeconfig"

    def _write_kubeconfig(self, name: str, user: str, credentials: cluster_pki.KeyPair) -> pathlib.Path:
        self.kubeconfig_dir.mkdir(parents=True, exist_ok=True)
        return cluster_pki.write_kubeconfig(self.kubeconfig_dir / f"{name}.kubeconfig", self.server, self.pki.ca.cert,
                                            user, credentials)

    def node_kubeconfig(self, node_name: str) -> pathlib.Path:
        """A kubelet's kubeconfig for ``node_name``: the Node authorizer's ``system:node:<name>``."""
        return self._write_kubeconfig(f"node-{node_name}", f"system:node:{node_name}", self.pki.node_client(node_name))

    def _make_credentials(self) -> None:
        pki = self.pki.create()
        self._serving["kube-apiserver"] = pki.serving(
            "kube-apiserver",
            ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local"),
            ("127.0.0.1", KUBERNETES_SERVICE_IP),
        )
        self._serving["kube-controller-manager"] = pki.serving("kube-controller-manager")
        self._serving["kube-scheduler"] = pki.serving("kube-scheduler")
        self._admin = pki.client("admin", "pinctl-test-admin", ("system:masters",))
        self._write_kubeconfig("admin", "pinctl-test-admin", self._admin)
        self._write_kubeconfig("controller-manager", "system:kube-controller-manager",
                               pki.client("controller-manager", "system:kube-controller-manager"))
        self._write_kubeconfig("scheduler", "system:kube-scheduler", pki.client("scheduler", "system:kube-scheduler"))
        pki.client("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",))

    # --- each component's command line ----------------------------------------------------------

    def etcd_argv(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        return [
            str(self.etcd.binary), "--name=pinctl-test", f"--data-dir={self.base_dir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=pinctl-test={peer}", "--initial-cluster-state=new",
            # A throwaway store: fsync per write only slows a busy machine down.
            "--unsafe-no-fsync", "--log-level=warn",
        ]

    def apiserver_argv(self) -> list[str]:
        pki, serving = self.pki, self._serving["kube-apiserver"]
        kubelet_client = pki.directory / "apiserver-kubelet-client"
        return [
            str(self.kubernetes.binary("kube-apiserver")),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.ports.apiserver}",
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={pki.ca.cert}",
            "--authorization-mode=Node,RBAC",
            # A kubelet may change only its own Node and the pods bound to it (with Node authorization).
            "--enable-admission-plugins=NodeRestriction",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--endpoint-reconciler-type=none",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.service_account.cert}",
            f"--service-account-signing-key-file={pki.service_account.key}",
            f"--kubelet-client-certificate={kubelet_client}.crt", f"--kubelet-client-key={kubelet_client}.key",
            # A node's address, never its name: the default tries Hostname first, which would be a
            # DNS lookup leaving the machine (the fleet's nodes have 198.18.0.N on lo, cluster_nodes.py).
            "--kubelet-preferred-address-types=InternalIP",
            # pinctl's DaemonSet runs privileged (deploy/kubernetes).
            "--allow-privileged=true",
            f"--cert-dir={self.base_dir / 'apiserver-certs'}",
            "--profiling=false", "--v=1",
        ]

    def _delegating(self, name: str, kubeconfig: pathlib.Path, port: int) -> list[str]:
        serving = self._serving[name]
        return [
            f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={self.pki.ca.cert}",
            "--leader-elect=true", "--profiling=false", "--v=1",
        ]

    def controller_manager_argv(self) -> list[str]:
        pki = self.pki
        return [
            str(self.kubernetes.binary("kube-controller-manager")),
            *self._delegating("kube-controller-manager", self.kubeconfig_dir / "controller-manager.kubeconfig",
                              self.ports.controller_manager),
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.service_account.key}",
            f"--root-ca-file={pki.ca.cert}",
            f"--cluster-signing-cert-file={pki.ca.cert}", f"--cluster-signing-key-file={pki.ca.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--cert-dir={self.base_dir / 'controller-manager-certs'}",
        ]

    def scheduler_argv(self) -> list[str]:
        return [
            str(self.kubernetes.binary("kube-scheduler")),
            *self._delegating("kube-scheduler", self.kubeconfig_dir / "scheduler.kubeconfig", self.ports.scheduler),
        ]

    # --- health -----------------------------------------------------------------------------------

    def _opener(self, client: bool) -> urllib.request.OpenerDirector:
        context = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        if client and self._admin:
            context.load_cert_chain(str(self._admin.cert), str(self._admin.key))
        return urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))

    def get(self, url: str, *, as_admin: bool = True, timeout: float = 5.0) -> tuple[int, str]:
        """(status, body) of a GET on one of the cluster's endpoints; HTTP errors are answers too."""
        opener = self._opener(as_admin) if url.startswith("https:") else urllib.request.build_opener(
            urllib.request.ProxyHandler({}))
        try:
            with opener.open(url, timeout=timeout) as reply:
                return int(reply.status), reply.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode(errors="replace")

    def health_urls(self) -> dict[str, str]:
        return {
            "etcd": f"{self.etcd_url}/health",
            "kube-apiserver": f"{self.server}/readyz",
            "kube-controller-manager": f"https://127.0.0.1:{self.ports.controller_manager}/healthz",
            "kube-scheduler": f"https://127.0.0.1:{self.ports.scheduler}/healthz",
        }

    def healthy(self, name: str) -> tuple[bool, str]:
        """Whether ``name`` says it is healthy now, and what it said."""
        try:
            # The controller-manager and scheduler answer /healthz to anyone (always-allowed path).
            status, body = self.get(self.health_urls()[name], as_admin=name == "kube-apiserver")
        except (OSError, urllib.error.URLError) as exc:
            return False, str(exc)
        if name == "etcd":
            try:
                return status == 200 and json.loads(body).get("health") == "true", body
            except ValueError:
                return False, body
        return status == 200 and body.strip() == "ok", f"{status} {body.strip()[-2000:]}"

    def _wait_healthy(self, component: Component, deadline_s: float) -> None:
        deadline = time.monotonic() + deadline_s
        said = ""
        while time.monotonic() < deadline:
            dead = [c for c in self.components.values() if not c.is_alive()]
            if dead:
                raise ControlPlaneError("\n".join(c.describe_death() for c in dead))
            ok, said = self.healthy(component.name)
            if ok:
                component.mark_ready()
                return
            time.sleep(POLL_S)
        errors = "\n".join(component.error_lines()) or "(none)"
        raise ControlPlaneError(f"{component.name} not healthy within {deadline_s:.0f} s (last answer: {said})\n"
                                f"--- first errors ---\n{errors}\n"
                                f"--- log tail ({component.log_path}) ---\n{component.log_tail(20)}")

    # --- life -------------------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        """Make the credentials, start each component in order and wait for it; all or nothing."""
        began = time.monotonic()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._make_credentials()
        steps: Sequence[tuple[str, Callable[[], list[str]], float]] = (
            ("etcd", self.etcd_argv, ETCD_READY_S),
            ("kube-apiserver", self.apiserver_argv, APISERVER_READY_S),
            ("kube-controller-manager", self.controller_manager_argv, COMPONENT_READY_S),
            ("kube-scheduler", self.scheduler_argv, COMPONENT_READY_S),
        )
        try:
            for name, argv, deadline_s in steps:
                component = Component(name, argv(), self.log_dir / f"{name}.log")
                self.components[name] = component
                component.start()
                if name in ("etcd", "kube-apiserver"):
                    # The others need these answering before they can do anything.
                    self._wait_healthy(component, deadline_s)
            for name in LEADER_LEASES:
                self._wait_healthy(self.components[name], COMPONENT_READY_S)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = round(time.monotonic() - began, 1)
        return self

    def stop(self) -> None:
        """Each component in the reverse order of its start (etcd last)."""
        for component in reversed(list(self.components.values())):
            component.stop()

    def dead_components(self) -> list[str]:
        return [name for name, component in self.components.items() if not component.is_alive()]

    # --- kubectl ------------------------------------------------------------------------------------

    def kubectl(self, *args: str, kubeconfig: Optional[pathlib.Path] = None, stdin: Optional[str] = None,
                check: bool = True, timeout: float = KUBECTL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """The built kubectl against this cluster, as the admin unless ``kubeconfig`` says otherwise."""
        argv = [str(self.kubernetes.binary("kubectl")), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}",
                f"--cache-dir={self.base_dir / 'kubectl-cache'}", *args]
        try:
            done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout,
                                  env=loopback_env(), check=False)
        except subprocess.TimeoutExpired as exc:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: no answer within {timeout:.0f} s") from exc
        if check and done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip()}")
        return done

    def kubectl_json(self, *args: str, kubeconfig: Optional[pathlib.Path] = None) -> dict[str, Any]:
        value = json.loads(self.kubectl(*args, "-o", "json", kubeconfig=kubeconfig).stdout)
        if not isinstance(value, dict):
            raise ControlPlaneError(f"kubectl {' '.join(args)} -o json gave {type(value).__name__}, not an object")
        return value

    def lease_holder(self, name: str) -> str:
        """Who holds the Lease ``kube-system/<name>`` ("" when nobody does yet)."""
        done = self.kubectl("-n", "kube-system", "get", "lease", name, "-o", "jsonpath={.spec.holderIdentity}",
                            check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    def wait_for(self, what: str, probe: Callable[[], T], timeout: float = COMPONENT_READY_S) -> T:
        """``probe()``'s first truthy answer; polls until ``timeout``, failing early when a component died."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = self.dead_components()
            if dead:
                raise ControlPlaneError(f"while waiting for {what}: "
                                        + "\n".join(self.components[name].describe_death() for name in dead))
            answer = probe()
            if answer:
                return answer
            time.sleep(POLL_S * 4)
        raise ControlPlaneError(f"{what}: not within {timeout:.0f} s")

    def wait_for_leases(self, timeout: float = COMPONENT_READY_S) -> dict[str, str]:
        """Each of :data:`LEADER_LEASES` with its holder, once both are held."""
        return {name: str(self.wait_for(f"a holder of lease kube-system/{name}",
                                        functools.partial(self.lease_holder, name), timeout))
                for name in LEADER_LEASES}

"""pinctl's DaemonSet on the harness's fleet, the way an operator deploys it: a kustomize overlay over
the repository's deploy/kubernetes, applied with kubectl (tests/integration/test_fleet.py).

:class:`Overlay` writes the overlay into a temporary directory: its base is ``deploy/kubernetes``
itself (a relative path to it), kustomize's ``images:`` names the image the nodes hold, and two
patches say what this machine needs (see :meth:`Overlay.daemonset_patch`); the policy is a patch of
the base's ConfigMap. Nothing of the base is copied or edited.

The rest reads what the cluster and the nodes say: the DaemonSet's status and pods through
kubectl, each node's pins through its containerd's CRI (``pinned``, what the kubelet's GC
honours) and labels, each agent's ``/metrics`` at its pod IP.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import urllib.request
from typing import Any

import yaml

from tests.harness import cri, image_build
from tests.harness.cluster_nodes import NodeKind
from tests.harness.control_plane import ControlPlane

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "kubernetes"
NAMESPACE = "pinctl"
NAME = "pinctl"
# Each DaemonSet of the base and its file: containerd nodes, and those labelled for another runtime.
DAEMONSETS = {"pinctl": "daemonset.yaml", "pinctl-cri-dockerd": "daemonset-cri-dockerd.yaml",
              "pinctl-crio": "daemonset-crio.yaml"}
# The DaemonSet of each node that is not a containerd one, by the node's runtime.
DAEMONSET_BY_RUNTIME = {"cri-dockerd": "pinctl-cri-dockerd", "cri-o": "pinctl-crio"}
CONTAINER = "pinctl"
CONFIGMAP = "pinctl-config"
CONFIG_KEY = "config.toml"
METRICS_PORT = 9736
READY_PROBE_S = 2
# No proxy from the environment: every agent listens on a node address on lo.
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def daemonset_of(node: NodeKind) -> str:
    """The DaemonSet whose agent runs on ``node``: the one its runtime's label selects."""
    return DAEMONSET_BY_RUNTIME.get(node.engine, NAME)


def base_daemonset(name: str = NAME) -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load((BASE / DAEMONSETS[name]).read_text())
    return found


def base_image_name() -> str:
    """The image's name in the base (``pinctl`` of ``pinctl:0.1.0``): what ``images:`` matches."""
    (container,) = base_daemonset()["spec"]["template"]["spec"]["containers"]
    image: str = container["image"]
    return image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image


def policy(patterns: list[str]) -> str:
    """A pinctl policy file (the ConfigMap's ``config.toml``) keeping ``patterns`` in ``k8s.io``."""
    lines = ['pattern_dialect = "pinctl"', 'namespaces = ["k8s.io"]', "pinned_images = ["]
    lines += [f"  {json.dumps(pattern)}," for pattern in patterns]
    return "\n".join([*lines, "]", ""])


@dataclasses.dataclass
class Overlay:
    """A kustomize overlay in ``directory`` over the repository's deploy/kubernetes."""

    directory: pathlib.Path
    image: str  # repository:tag as the nodes hold it
    config: str  # the ConfigMap's config.toml

    def kustomization(self) -> dict[str, Any]:
        repository, tag = self.image.rsplit(":", 1)
        return {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(BASE, self.directory)],
            "images": [{"name": base_image_name(), "newName": repository, "newTag": tag}],
            "patches": [*({"path": f"{name}-patch.yaml"} for name in DAEMONSETS), {"path": "configmap-patch.yaml"}],
        }

    def daemonset_patch(self, name: str = NAME) -> dict[str, Any]:
        """What this machine needs changed in DaemonSet ``name``, as a strategic merge patch:

        * ``hostNetwork: true``: no CNI plugin here (the nodes' runtimes have a loopback-only
          conflist), so the pod shares its node's network, whose address is the node's own
          198.18.0.N on lo;
        * env ``POD_IP`` from ``status.podIP`` (a host-network pod's IP is its node's) and the
          ``--metrics-address`` argument ``$(POD_IP):9736`` for ``0.0.0.0:9736``: every node's
          agent shares this machine's network, and on 0.0.0.0 the second would find the port
          taken (and listen on every interface of the machine). The probes name the port
          ``metrics`` and the kubelet probes the pod IP, so they follow unchanged. ``args`` is a
          list, which a strategic merge replaces whole: it is the base's with that one value changed;
        * the readiness probe every 2 s, not the shipped 10 s: a rollout replaces a DaemonSet's
          pods one at a time, each waiting for its first Ready probe, so the shipped period cost
          the fleet tests up to 10 s per pod, node after node. The probe is otherwise the base's.
        """
        (container,) = base_daemonset(name)["spec"]["template"]["spec"]["containers"]
        args = list(container["args"])
        args[args.index("--metrics-address") + 1] = f"$(POD_IP):{METRICS_PORT}"
        env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
        return {
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"template": {"spec": {"hostNetwork": True,
                                           "containers": [{"name": CONTAINER, "env": env, "args": args,
                                                           "readinessProbe": {"periodSeconds": READY_PROBE_S}}]}}},
        }

    def configmap(self, config: str | None = None) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIGMAP, "namespace": NAMESPACE},
                "data": {CONFIG_KEY: self.config if config is None else config}}

    def write(self) -> pathlib.Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        documents = [("kustomization.yaml", self.kustomization()), ("configmap-patch.yaml", self.configmap())]
        documents += [(f"{name}-patch.yaml", self.daemonset_patch(name)) for name in DAEMONSETS]
        for file_name, document in documents:
            (self.directory / file_name).write_text(yaml.safe_dump(document, sort_keys=False))
        return self.directory


# --- what the nodes hold before the agents come --------------------------------------------------


def prepare(node: NodeKind, built: image_build.BuiltImage, agent: str, samples: tuple[str, ...]) -> None:
    """pinctl's image under the overlay's name ``agent`` alone, and sample images named ``samples``."""
    node.prepare_agent(built, agent)
    node.load_samples(samples)


# --- what the cluster says ------------------------------------------------------------------------


def daemonset_status(plane: ControlPlane, name: str = NAME) -> dict[str, Any]:
    found: dict[str, Any] = plane.kubectl_json("-n", NAMESPACE, "get", "daemonset", name)
    return found


def rolled_out(plane: ControlPlane, nodes: int, image: str) -> bool:
    """Every node runs a Ready pod of its DaemonSet's current template, and each DaemonSet's
    controller has seen that: the DaemonSets share the nodes out, one each."""
    scheduled = 0
    for name in DAEMONSETS:
        found = daemonset_status(plane, name)
        status = found.get("status", {})
        (container,) = found["spec"]["template"]["spec"]["containers"]
        wanted = status.get("desiredNumberScheduled", 0)
        if not (container["image"] == image and status.get("observedGeneration") == found["metadata"]["generation"]
                and status.get("numberReady") == wanted and status.get("updatedNumberScheduled", 0) == wanted
                and status.get("numberAvailable", 0) == wanted and not status.get("numberUnavailable")):
            return False
        scheduled += wanted
    return scheduled == nodes


def agent_pods(plane: ControlPlane) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = plane.kubectl_json(
        "-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/name=pinctl")["items"]
    return items


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True" and not pod["metadata"].get("deletionTimestamp")


def pod_on(plane: ControlPlane, node: NodeKind) -> dict[str, Any]:
    (pod,) = [pod for pod in agent_pods(plane) if pod["spec"].get("nodeName") == node.name
              and not pod["metadata"].get("deletionTimestamp")]
    return pod


def pod_messages(plane: ControlPlane, pod_name: str) -> list[dict[str, Any]]:
    """The agent's JSON log lines, through the apiserver and that node's kubelet (``kubectl logs``)."""
    text = plane.kubectl("-n", NAMESPACE, "logs", pod_name, "-c", CONTAINER).stdout
    lines = []
    for line in text.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


# --- what the nodes say -------------------------------------------------------------------------


def cri_pinned(node: NodeKind) -> dict[str, bool]:
    """Each tag in the CRI the node's kubelet uses, and whether it reports it pinned (what the kubelet's GC reads)."""
    return {tag: image.pinned for image in cri.list_images(node.cri_address) for tag in image.repo_tags}


def pinctl_json(node: NodeKind, *args: str, codes: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """``pinctl ARGS -o json`` run on the host against the node's runtime (which runs in the
    node's mount namespace), its document."""
    env = {**os.environ, **node.pinctl_env()}
    env.pop("CONTAINERD_NAMESPACE", None)
    done = subprocess.run([sys.executable, "-m", "pinctl", *args, *node.pinctl_args(), "-o", "json"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode in codes, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def ls_rows(node: NodeKind) -> dict[str, dict[str, Any]]:
    """``pinctl ls -o json`` on the host, rows by reference."""
    return {row["ref"]: row for row in pinctl_json(node, "ls")["images"]}


def metrics(node: NodeKind, timeout: float = 5.0) -> str:
    with _LOOPBACK.open(f"http://{node.address}:{METRICS_PORT}/metrics", timeout=timeout) as reply:
        text: str = reply.read().decode(errors="replace")
    return text


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition ``text`` (0 when it is absent)."""
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    pattern = re.compile(r"^%s(?:\{([^}]*)\})? (\S+)$" % re.escape(name), re.M)
    for match in pattern.finditer(text):
        found = ",".join(sorted((match.group(1) or "").split(","))) if match.group(1) else ""
        if found == wanted:
            return float(match.group(2))
    return 0.0

"""The Kubernetes manifests in deploy/kubernetes against pinctl itself, no cluster needed: the
DaemonSet's command line is parsed by pinctl's real click tree, the ConfigMap's config.toml is
loaded by pinctl's real config loader, and mounts, volumes, the socket path, the probes and the
security context are checked against each other; every object is in the one privileged
namespace. The mutation tests at the end show that each check can fail."""

from __future__ import annotations

import copy
import os
import pathlib
from collections.abc import Callable
from typing import Any

import click
import pytest

from pinctl.config import loader as config
from pinctl.config.files import toml_reader
from pinctl.config.settings import DIALECTS, KEYS
from pinctl.errors import PinctlError
from pinctl.pins import lint
from pinctl.pins.policy import compile_policy

from .deploy_helpers import (
    DEFAULT_SOCKET,
    KUBE,
    Parsed,
    BASE_DAEMONSET,
    RUNTIME_LABEL,
    check_watch_command,
    container_of,
    daemonset,
    daemonsets,
    has_registry_host,
    manifests,
    metrics_address,
    named_ports,
    objects,
    parse_fixture,  # noqa: F401  (the parse fixture)
    the,
)

CONFIG_MAP = "pinctl-config"
METRICS_PORT = "metrics"
CONFIG_KEY = "config.toml"
# CRI-O's agent talks to no containerd: its pins are CRI-O's files, which pinctl's drop-in joins
# (written below /etc/crio), and a SIGHUP to the crio process, found in the node's PID namespace.
CRIO = "cri-o"
CRIO_ETC = "/etc/crio"


# -- Kubernetes ---------------------------------------------------------------------------


def config_text(configmap: dict[str, Any]) -> str:
    assert configmap["metadata"]["name"] == CONFIG_MAP
    text: str = configmap["data"][CONFIG_KEY]
    return text


def check_pod(docs: list[dict[str, Any]], parse: Callable[[list[str]], Parsed]) -> None:
    """Every DaemonSet of the manifests, each on its own (:func:`check_agent`), then what they share."""
    for each in daemonsets(docs):
        check_agent(each, docs, parse)
    check_node_selection(docs)


def check_agent(agent: dict[str, Any], docs: list[dict[str, Any]], parse: Callable[[list[str]], Parsed]) -> None:
    pod = agent["spec"]["template"]["spec"]
    container = container_of(agent)
    argv = [*container.get("command", []), *container.get("args", [])]
    assert argv[:1] == ["pinctl"], f"the container runs {argv[:1]}"
    parsed = parse(argv[1:])
    check_watch_command(parsed)

    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    mounts = {mount["mountPath"]: mount for mount in container.get("volumeMounts", [])}
    for mount in mounts.values():
        assert mount["name"] in volumes, f"volumeMount {mount['name']} has no volume"
    used = {mount["name"] for mount in mounts.values()}
    assert not set(volumes) - used, f"volumes mounted nowhere: {sorted(set(volumes) - used)}"

    runtime = node_choice(agent)[0]
    endpoint = str(parsed.option("--runtime-endpoint") or "")
    if CRIO in runtime:
        check_crio_agent(pod, mounts, volumes, endpoint)
    else:
        # The socket's directory is mounted, so that a restarted containerd's new socket shows.
        check_socket_directory(str(parsed.option("--address") or DEFAULT_SOCKET), mounts, volumes)
        assert not pod.get("hostPID"), "hostPID is not needed: pinctl signals no process here"
    if endpoint:
        # The CRI endpoint's directory too, read-only, for the same reason as the socket's.
        runtime_run = os.path.dirname(endpoint.removeprefix("unix://"))
        assert runtime_run in mounts, f"pinctl asks the CRI at {endpoint}, but {runtime_run} is not mounted"
        assert mounts[runtime_run].get("readOnly") is True, f"{runtime_run} is mounted writable"

    config_path = parsed.option("--config")
    assert config_path, "the container gives no --config"
    directory, name = os.path.split(config_path)
    assert directory in mounts, f"--config {config_path}: nothing is mounted at {directory}"
    source = volumes[mounts[directory]["name"]].get("configMap")
    assert source and source["name"] == CONFIG_MAP, f"{directory} is not the ConfigMap {CONFIG_MAP}"
    files = {item["path"]: item["key"] for item in source.get("items", [])} or {CONFIG_KEY: CONFIG_KEY}
    assert files.get(name) == CONFIG_KEY, f"--config {config_path} is not the ConfigMap's {CONFIG_KEY}"
    assert mounts[directory].get("readOnly") is True
    assert source.get("defaultMode", 0o644) & 0o022 == 0, "pinctl as root refuses a group/other-writable config"
    config_text(the("ConfigMap", docs))

    assert pod.get("automountServiceAccountToken") is False, "pinctl needs no API access: no token"
    for key in ("hostNetwork", "hostIPC"):
        assert not pod.get(key), f"{key} is not needed"
    security = container.get("securityContext", {})
    assert security.get("readOnlyRootFilesystem") is True
    assert security.get("allowPrivilegeEscalation") is False
    assert not security.get("privileged")
    assert security.get("capabilities", {}).get("drop") == ["ALL"]
    # CRI-O's agent reads crio's /proc/PID/exe before it signals it (a ptrace read check); no other.
    allowed = ["SYS_PTRACE"] if CRIO in node_choice(agent)[0] else []
    assert security.get("capabilities", {}).get("add", []) == allowed
    uid = security.get("runAsUser", pod.get("securityContext", {}).get("runAsUser"))
    assert uid == 0, f"runAsUser {uid}: the socket is root's (0660), so pinctl runs as uid 0"
    assert any(t.get("operator") == "Exists" and not t.get("key") for t in pod.get("tolerations", [])), (
        "a toleration with operator Exists and no key is needed to run on every node"
    )
    resources = container.get("resources", {})
    for part in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources.get(part, {})), f"resources.{part} needs cpu and memory"
    image = container["image"]
    assert not has_registry_host(image), f"image {image} names a registry: leave it to the operator"
    assert ":" in image and not image.endswith(":latest"), f"image {image} needs a version tag"
    check_probes(container, metrics_address(parsed))


def check_socket_directory(socket: str, mounts: dict[str, Any], volumes: dict[str, Any]) -> None:
    """The socket's directory from the node, at its own path, read-only, following new mounts."""
    run = os.path.dirname(socket)
    assert run in mounts, f"pinctl talks to {socket}, but its directory {run} is not mounted"
    host = volumes[mounts[run]["name"]].get("hostPath")
    assert host and host.get("type") == "Directory", f"{run} is not a hostPath of type Directory"
    assert host["path"] == run, f"hostPath {host['path']} is mounted at {run}"
    assert mounts[run].get("readOnly") is True, f"{run} is mounted writable"
    assert mounts[run].get("mountPropagation") == "HostToContainer", (
        f"{run} without HostToContainer holds on to the mounts of containers the node has removed")


def check_crio_agent(pod: dict[str, Any], mounts: dict[str, Any], volumes: dict[str, Any], endpoint: str) -> None:
    """CRI-O's agent: its socket's directory as the containerd one's, /etc/crio writable at its own
    path (pinctl's drop-in), and the node's PID namespace (the SIGHUP)."""
    assert endpoint, "a CRI-O agent names CRI-O's socket with -r"
    check_socket_directory(endpoint.removeprefix("unix://"), mounts, volumes)
    assert CRIO_ETC in mounts, f"pinctl writes its drop-in below {CRIO_ETC}, which is not mounted"
    host = volumes[mounts[CRIO_ETC]["name"]].get("hostPath")
    assert host and host["path"] == CRIO_ETC and host.get("type") == "Directory", f"{CRIO_ETC} is not the node's"
    assert not mounts[CRIO_ETC].get("readOnly"), f"{CRIO_ETC} is read-only: pinctl cannot write its drop-in"
    assert pod.get("hostPID") is True, "without hostPID pinctl cannot find crio to make it re-read its files"


def node_choice(agent: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(runtimes the DaemonSet takes by the label, runtimes it leaves out with NotIn)."""
    pod = agent["spec"]["template"]["spec"]
    taken = {pod.get("nodeSelector", {})[RUNTIME_LABEL]} if RUNTIME_LABEL in pod.get("nodeSelector", {}) else set()
    terms = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
    left: set[str] = set()
    for term in terms.get("nodeSelectorTerms", []):
        for expression in term.get("matchExpressions", []):
            if expression["key"] == RUNTIME_LABEL and expression["operator"] == "NotIn":
                left |= set(expression["values"])
    return taken, left


def check_node_selection(docs: list[dict[str, Any]]) -> None:
    """Each node gets one agent: the base where the runtime label is absent (or names no other
    DaemonSet), each other DaemonSet exactly where the label names it; all share one pod shape."""
    base = daemonset(BASE_DAEMONSET, docs)
    base_taken, left_out = node_choice(base)
    assert not base_taken, "the base DaemonSet must run on unlabelled (containerd) nodes"
    others = [each for each in daemonsets(docs) if each is not base]
    taken = [node_choice(each)[0] for each in others]
    assert all(len(one) == 1 for one in taken), "each other DaemonSet selects one runtime by the label"
    assert left_out == set().union(*taken), f"the base leaves out {sorted(left_out)}, the others take {taken}"
    shared = ("securityContext", "resources", "ports", "livenessProbe", "readinessProbe", "image", "command")
    for each in others:
        for key in shared:
            theirs, ours = container_of(each).get(key), container_of(base).get(key)
            if key == "securityContext" and CRIO in node_choice(each)[0] and isinstance(theirs, dict):
                # CRI-O's agent adds back SYS_PTRACE alone (check_agent): the rest is the same.
                theirs = {**theirs, "capabilities": {"drop": theirs.get("capabilities", {}).get("drop")}}
            assert theirs == ours, f"{each['metadata']['name']}: {key} differs"
        labels = each["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "pinctl", "the PodMonitor and the scrape job select every agent by name"


def check_probes(container: dict[str, Any], address: tuple[str, int]) -> None:
    """The metrics port is named, served on the pod's address, and probed on /healthz and /readyz."""
    host, port = address
    assert host in ("", "0.0.0.0", "::"), f"--metrics-address {host}: the kubelet and Prometheus reach the pod's IP"
    ports = named_ports(container)
    assert ports.get(METRICS_PORT) == port, f"no containerPort {port} named {METRICS_PORT!r}: {ports}"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container.get(probe, {}).get("httpGet", {})
        assert get.get("path") == path, f"{probe} does not GET {path}"
        assert ports.get(get.get("port"), get.get("port")) == port, f"{probe} is not on the metrics port"


def test_daemonset(parse: Callable[[list[str]], Parsed]) -> None:
    check_pod(objects(), parse)


def test_daemonset_image_tells_the_operator_to_push_it() -> None:
    lines = (KUBE / "daemonset.yaml").read_text().splitlines()
    (at,) = [n for n, line in enumerate(lines) if line.strip().startswith("image:")]
    near = " ".join(lines[max(0, at - 3): at + 1]).lower()
    assert "#" in near and "registry" in near, "say beside the image where to push it"


def check_config(text: str, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    path.chmod(0o644)  # as root, config.load refuses a file others can write
    keys = set(toml_reader().loads(text))
    assert keys <= set(KEYS), f"unknown keys: {sorted(keys - set(KEYS))}"
    cfg = config.load(flags={}, environ={}, config_path=str(path))
    assert cfg.files == [str(path)]
    assert cfg.settings.namespaces == ("k8s.io",), "the kubelet's images are in k8s.io"
    assert cfg.settings.pattern_dialect in DIALECTS
    assert cfg.patterns, "a policy with no patterns pins nothing"
    assert compile_policy(cfg.patterns)
    problems = lint.lint(cfg.patterns, None)
    assert not problems, [p.message for p in problems]


def test_configmap_config(tmp_path: pathlib.Path) -> None:
    check_config(config_text(the("ConfigMap", objects())), tmp_path)


def check_namespaces(docs: list[dict[str, Any]]) -> None:
    namespace = the("Namespace", docs)["metadata"]
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == namespace["name"], f"{doc['kind']} is not in {namespace['name']}"
    # The pod mounts a hostPath, which Pod Security's baseline and restricted levels refuse.
    assert namespace.get("labels", {}).get("pod-security.kubernetes.io/enforce") == "privileged"


def test_namespaces() -> None:
    check_namespaces(objects())


def test_kustomization_lists_every_manifest() -> None:
    found = manifests()
    (kustomization,) = found.pop("kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(found)


RBAC_KINDS = frozenset({"ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"})


def check_no_api_access(docs: list[dict[str, Any]]) -> None:
    """What `kubectl apply -k deploy/kubernetes` applies gives pinctl no identity: docs/fleet.md's
    "nothing from pinctl" holds only while this does."""
    kinds = sorted({doc["kind"] for doc in docs} & RBAC_KINDS)
    assert not kinds, f"the agent needs no API access, yet the manifests hold {kinds}"
    for each in daemonsets(docs):
        pod = each["spec"]["template"]["spec"]
        assert pod.get("serviceAccountName", "default") == "default", "no service account of its own"
        assert pod.get("automountServiceAccountToken") is False
        volumes = [volume for volume in pod.get("volumes", []) if "projected" in volume or "secret" in volume]
        assert not volumes, f"no token or secret volume, yet {volumes}"


def test_the_agent_has_no_api_identity() -> None:
    check_no_api_access(objects())


@pytest.mark.parametrize("edit", ["rbac", "account", "projected"])
def test_no_api_identity_check_fails(edit: str) -> None:
    docs = copy.deepcopy(objects())
    pod = daemonset(BASE_DAEMONSET, docs)["spec"]["template"]["spec"]
    if edit == "rbac":
        docs.append({"kind": "ClusterRole", "metadata": {"name": "pinctl"}})
    elif edit == "account":
        pod["serviceAccountName"] = "pinctl"
    else:
        pod["volumes"].append({"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}})
    with pytest.raises(AssertionError):
        check_no_api_access(docs)


# -- each check can fail --------------------------------------------------------------------


def _edited(edit: Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], None]) -> list[dict[str, Any]]:
    docs = copy.deepcopy(objects())
    base = daemonset(BASE_DAEMONSET, docs)
    edit(base["spec"]["template"]["spec"], container_of(base), the("ConfigMap", docs))
    return docs


def _variant_edited(name: str, edit: Callable[[dict[str, Any], dict[str, Any]], None]) -> list[dict[str, Any]]:
    docs = copy.deepcopy(objects())
    variant = daemonset(name, docs)
    edit(variant["spec"]["template"]["spec"], container_of(variant))
    return docs


def _mount(container: dict[str, Any], path: str) -> dict[str, Any]:
    (found,) = [mount for mount in container["volumeMounts"] if mount["mountPath"] == path]
    return found


DOCKER_AGENT, CRIO_AGENT = "pinctl-cri-dockerd", "pinctl-crio"
VARIANT_EDITS: dict[str, tuple[str, Callable[[dict[str, Any], dict[str, Any]], None]]] = {
    "label-unknown-to-base": (DOCKER_AGENT, lambda pod, c: pod["nodeSelector"].__setitem__(RUNTIME_LABEL, "gvisor")),
    "no-label": (DOCKER_AGENT, lambda pod, c: pod["nodeSelector"].pop(RUNTIME_LABEL)),
    "other-limits": (DOCKER_AGENT, lambda pod, c: c["resources"]["limits"].__setitem__("memory", "1Gi")),
    "runtime-endpoint-not-mounted": (DOCKER_AGENT,
                                     lambda pod, c: c["args"].extend(["-r", "unix:///run/elsewhere/cri.sock"])),
    "docker-host-pid": (DOCKER_AGENT, lambda pod, c: pod.__setitem__("hostPID", True)),
    "crio-no-host-pid": (CRIO_AGENT, lambda pod, c: pod.pop("hostPID")),
    "crio-etc-read-only": (CRIO_AGENT, lambda pod, c: _mount(c, CRIO_ETC).__setitem__("readOnly", True)),
    "crio-etc-elsewhere": (CRIO_AGENT, lambda pod, c: _mount(c, CRIO_ETC).__setitem__("mountPath", "/etc/crio-site")),
    "crio-socket-writable": (CRIO_AGENT, lambda pod, c: _mount(c, "/run/crio").__setitem__("readOnly", False)),
    "crio-label-other": (CRIO_AGENT, lambda pod, c: pod["nodeSelector"].__setitem__(RUNTIME_LABEL, "crio")),
}


@pytest.mark.parametrize("name", sorted(VARIANT_EDITS))
def test_variant_check_fails(name: str, parse: Callable[[list[str]], Parsed]) -> None:
    with pytest.raises(AssertionError):
        check_pod(_variant_edited(*VARIANT_EDITS[name]), parse)


POD_EDITS: dict[str, Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], None]] = {
    "bad-option": lambda pod, c, cm: c["args"].append("--wacth"),
    "no-watch": lambda pod, c, cm: c["args"].remove("--watch"),
    "text-log": lambda pod, c, cm: c.__setitem__("args", [a if a != "json" else "text" for a in c["args"]]),
    "address-not-mounted": lambda pod, c, cm: c["args"].extend(["--address", "/run/k3s/containerd/containerd.sock"]),
    "mount-without-volume": lambda pod, c, cm: c["volumeMounts"].append({"name": "gone", "mountPath": "/x"}),
    "unused-volume": lambda pod, c, cm: pod["volumes"].append({"name": "spare", "emptyDir": {}}),
    "host-path-moved": lambda pod, c, cm: next(v for v in pod["volumes"] if "hostPath" in v)["hostPath"]
    .__setitem__("path", "/run/k3s/containerd"),
    "socket-file": lambda pod, c, cm: next(v for v in pod["volumes"] if "hostPath" in v)["hostPath"]
    .__setitem__("type", "Socket"),
    "socket-directory-writable": lambda pod, c, cm: c["volumeMounts"][0].__setitem__("readOnly", False),
    "socket-directory-private": lambda pod, c, cm: c["volumeMounts"][0].pop("mountPropagation"),
    "config-elsewhere": lambda pod, c, cm: c.__setitem__(
        "args", [a.replace("/etc/pinctl/", "/etc/other/") for a in c["args"]]),
    "config-misnamed": lambda pod, c, cm: c.__setitem__(
        "args", [a.replace("config.toml", "pinctl.toml") for a in c["args"]]),
    "writable-config": lambda pod, c, cm: next(v for v in pod["volumes"] if "configMap" in v)["configMap"]
    .__setitem__("defaultMode", 0o666),
    "token": lambda pod, c, cm: pod.__setitem__("automountServiceAccountToken", True),
    "writable-root": lambda pod, c, cm: c["securityContext"].__setitem__("readOnlyRootFilesystem", False),
    "escalation": lambda pod, c, cm: c["securityContext"].__setitem__("allowPrivilegeEscalation", True),
    "capability": lambda pod, c, cm: c["securityContext"]["capabilities"].__setitem__("add", ["DAC_OVERRIDE"]),
    "non-root": lambda pod, c, cm: c["securityContext"].__setitem__("runAsUser", 65534),
    "tolerations": lambda pod, c, cm: pod.__setitem__("tolerations", [{"key": "x", "operator": "Exists"}]),
    "no-limits": lambda pod, c, cm: c["resources"].pop("limits"),
    "registry-image": lambda pod, c, cm: c.__setitem__("image", "registry.example/pinctl:0.1.0"),
    "metrics-on-loopback": lambda pod, c, cm: c.__setitem__(
        "args", [a.replace("0.0.0.0:", "127.0.0.1:") for a in c["args"]]),
    "metrics-port-renamed": lambda pod, c, cm: c["ports"][0].__setitem__("name", "http"),
    "metrics-port-moved": lambda pod, c, cm: c["ports"][0].__setitem__("containerPort", 9100),
    "no-liveness": lambda pod, c, cm: c.pop("livenessProbe"),
    "readiness-on-healthz": lambda pod, c, cm: c["readinessProbe"]["httpGet"].__setitem__("path", "/healthz"),
    "configmap-renamed": lambda pod, c, cm: cm["metadata"].__setitem__("name", "other"),
    "other-runtimes-not-left-out": lambda pod, c, cm: pod.pop("affinity"),
}


@pytest.mark.parametrize("name", sorted(POD_EDITS))
def test_daemonset_check_fails(name: str, parse: Callable[[list[str]], Parsed]) -> None:
    with pytest.raises((AssertionError, click.UsageError)):
        check_pod(_edited(POD_EDITS[name]), parse)


@pytest.mark.parametrize("text", [
    'pinned_images = ["registry.example/a/*"]\nnamespaces = ["k8s.io"]\nunknown_key = 1\n',
    'pinned_images = ["registry.example/a/*"]\nnamespaces = ["moby"]\n',
    'pinned_images = []\nnamespaces = ["k8s.io"]\n',
    'pinned_images = ["*"]\nnamespaces = ["k8s.io"]\n',
    'pinned_images = ["registry.example/a/*", "registry.example/a/b:1"]\nnamespaces = ["k8s.io"]\n',
    'pinned_images = "registry.example/a/*"\nnamespaces = ["k8s.io"]\n',
], ids=["unknown-key", "namespace", "empty", "invalid-pattern", "shadowed", "wrong-type"])
def test_config_check_fails(text: str, tmp_path: pathlib.Path) -> None:
    with pytest.raises((AssertionError, PinctlError)):
        check_config(text, tmp_path)


def test_namespace_check_fails() -> None:
    docs = copy.deepcopy(objects())
    the("ConfigMap", docs)["metadata"]["namespace"] = "kube-system"
    with pytest.raises(AssertionError):
        check_namespaces(docs)

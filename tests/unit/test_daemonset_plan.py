"""What the pod test runs is what deploy/kubernetes/daemonset.yaml says: tests/harness/daemonset_pod.py
reads the manifest strictly, and anything in it that the harness would not run (a volume, a
capability, a key it does not know) fails here, before the pod test runs something else."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.harness import daemonset_pod
from tests.harness.daemonset_pod import ManifestNotHandled
from tests.harness.protowire import Reader, encode


def container(daemonset: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = daemonset["spec"]["template"]["spec"]["containers"][0]
    return found


def test_the_plan_is_the_manifests() -> None:
    daemonset = daemonset_pod.manifest()
    found = daemonset_pod.plan(daemonset)
    spec = container(daemonset)
    assert found.args == tuple(spec["args"]) and found.command == ("pinctl",)
    assert found.image == spec["image"] and found.container == spec["name"]
    mounts = {mount.container_path: mount for mount in found.mounts}
    assert set(mounts) == {mount["mountPath"] for mount in spec["volumeMounts"]}
    run = mounts["/run/containerd"]
    assert (run.kind, run.source, run.host_type, run.read_only, run.propagation) == \
        ("hostPath", "/run/containerd", "Directory", True, 1)
    config = mounts["/etc/pinctl"]
    assert (config.kind, config.source, config.read_only, config.default_mode) == \
        ("configMap", "pinctl-config", True, 0o444)
    assert found.ports == {"metrics": 9736}
    assert found.liveness == ("/healthz", 9736) and found.readiness == ("/readyz", 9736)
    assert (found.uid, found.gid, found.read_only_root, found.drop, found.no_new_privs) == (0, 0, True, ("ALL",), True)
    assert found.seccomp_runtime_default and found.grace_seconds == 10
    assert (found.cpu_limit_millis, found.memory_limit_bytes) == (200, 192 << 20)


def test_the_container_config_mounts_each_stand_in(tmp_path: Path) -> None:
    found = daemonset_pod.plan(daemonset_pod.manifest())
    (tmp_path / "run").mkdir()
    (tmp_path / "root").mkdir()
    (tmp_path / "config").mkdir()
    sources = {"/run/containerd": tmp_path / "run", "/var/lib/containerd": tmp_path / "root",
               "pinctl-config": tmp_path / "config", "/var/lib/pinctl/history": tmp_path / "history"}
    config = Reader(encode(daemonset_pod.container_config(found, "pinctl:0.1.0", sources, "pinctl.log")))
    mounts = {Reader(raw).text(1): Reader(raw) for raw in config.all_bytes(7)}
    assert mounts["/run/containerd"].text(2) == str(tmp_path / "run")
    # The journal's directory is made as the kubelet makes a DirectoryOrCreate hostPath, and writable.
    assert (tmp_path / "history").is_dir() and mounts["/var/lib/pinctl/history"].integer(3) == 0
    assert mounts["/etc/pinctl"].integer(3) == 1 and mounts["/run/containerd"].integer(5) == 1
    assert config.texts(4) == list(found.args)
    security = config.message(15).message(2)
    assert security.message(1).texts(2) == ["ALL"] and security.integer(7) == 1 and security.integer(11) == 1
    with pytest.raises(ManifestNotHandled, match="no stand-in for hostPath /var/lib/containerd"):
        daemonset_pod.container_config(found, "pinctl:0.1.0", {k: v for k, v in sources.items()
                                                               if k != "/var/lib/containerd"}, "pinctl.log")
    (tmp_path / "root").rmdir()
    (tmp_path / "root").write_text("")
    with pytest.raises(ManifestNotHandled, match="is not a Directory"):
        daemonset_pod.container_config(found, "pinctl:0.1.0", sources, "pinctl.log")


EDITS: dict[str, Callable[[dict[str, Any], dict[str, Any]], None]] = {
    "host-network": lambda pod, c: pod.__setitem__("hostNetwork", True),
    "env": lambda pod, c: c.__setitem__("env", [{"name": "X", "value": "1"}]),
    "second-container": lambda pod, c: pod["containers"].append(copy.deepcopy(c)),
    "init-container": lambda pod, c: pod.__setitem__("initContainers", [copy.deepcopy(c)]),
    "emptydir-volume": lambda pod, c: pod.update(
        volumes=[*pod["volumes"], {"name": "scratch", "emptyDir": {}}],
        containers=[{**c, "volumeMounts": [*c["volumeMounts"], {"name": "scratch", "mountPath": "/tmp"}]}]),
    "unused-volume": lambda pod, c: pod["volumes"].append({"name": "spare", "hostPath": {"path": "/x"}}),
    "sub-path": lambda pod, c: c["volumeMounts"][1].__setitem__("subPath", "config.toml"),
    "configmap-items": lambda pod, c: next(v for v in pod["volumes"] if "configMap" in v)["configMap"]
    .__setitem__("items", [{"key": "config.toml", "path": "pinctl.toml"}]),
    "capability-added": lambda pod, c: c["securityContext"]["capabilities"].__setitem__("add", ["NET_ADMIN"]),
    "privileged": lambda pod, c: c["securityContext"].__setitem__("privileged", True),
    "selinux": lambda pod, c: c["securityContext"].__setitem__("seLinuxOptions", {"level": "s0"}),
    "pod-fsgroup": lambda pod, c: pod["securityContext"].__setitem__("fsGroup", 2000),
    "seccomp-unconfined": lambda pod, c: pod["securityContext"].__setitem__("seccompProfile", {"type": "Unconfined"}),
    "exec-probe": lambda pod, c: c.__setitem__("livenessProbe", {"exec": {"command": ["true"]}}),
    "token": lambda pod, c: pod.__setitem__("automountServiceAccountToken", True),
    "propagation": lambda pod, c: c["volumeMounts"][0].__setitem__("mountPropagation", "Sideways"),
    "lifecycle": lambda pod, c: c.__setitem__("lifecycle", {"preStop": {"exec": {"command": ["sleep", "5"]}}}),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_what_the_harness_would_not_run_is_an_error(name: str) -> None:
    daemonset = copy.deepcopy(daemonset_pod.manifest())
    EDITS[name](daemonset["spec"]["template"]["spec"], container(daemonset))
    with pytest.raises(ManifestNotHandled):
        daemonset_pod.plan(daemonset)

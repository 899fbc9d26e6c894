"""The fleet harness's pure parts: a registered kubelet's config and argv, a node's namespace binds,
the overlay over deploy/kubernetes, the metrics reader.

tests/integration/test_fleet.py runs the real nodes and DaemonSet; these pin what it relies on
without starting anything.
"""

from __future__ import annotations

import ipaddress
import pathlib

import pytest
import yaml

from tests.harness import cluster_nodes, fleet_deploy, kubelet


def registered(tmp_path: pathlib.Path, **changes: object) -> kubelet.Kubelet:
    registration = kubelet.Registration(tmp_path / "node.kubeconfig", "198.18.0.7", taints=(cluster_nodes.FLEET_TAINT,),
                                        labels={cluster_nodes.RUNTIME_LABEL: "containerd-1.7"})
    return kubelet.Kubelet(tmp_path, "unix:///run/containerd/containerd.sock", node_name="pinctl-198-18-0-7",
                           binary=tmp_path / "kubelet", registration=registration, **changes)  # type: ignore[arg-type]


def test_a_registered_kubelet_names_its_kubeconfig_and_node_ip_and_serves_there(tmp_path: pathlib.Path) -> None:
    made = registered(tmp_path)
    config = made.config()
    assert config["registerNode"] is True and config["address"] == "198.18.0.7"
    assert (config["healthzBindAddress"], config["readOnlyPort"]) == ("127.0.0.1", 0)
    assert (config["syncFrequency"], config["configMapAndSecretChangeDetectionStrategy"]) == ("1m", "Watch")
    assert config["registerWithTaints"] == [cluster_nodes.FLEET_TAINT]
    argv = made.argv()
    assert f"--kubeconfig={tmp_path / 'node.kubeconfig'}" in argv and "--node-ip=198.18.0.7" in argv
    assert "--hostname-override=pinctl-198-18-0-7" in argv
    assert f"--node-labels={cluster_nodes.RUNTIME_LABEL}=containerd-1.7" in argv
    assert argv[0] == "unshare"  # no node namespace given: its own, as standalone


def test_a_standalone_kubelet_is_unchanged(tmp_path: pathlib.Path) -> None:
    made = kubelet.Kubelet(tmp_path, "/run/x.sock", binary=tmp_path / "kubelet")
    config = made.config()
    for key in ("registerNode", "syncFrequency", "configMapAndSecretChangeDetectionStrategy", "registerWithTaints"):
        assert key not in config
    assert config["address"] == "127.0.0.1"
    assert not any(arg.startswith(("--kubeconfig", "--node-ip")) for arg in made.argv())


def test_a_kubelet_in_its_nodes_namespace_joins_it_and_binds_nothing_itself(tmp_path: pathlib.Path) -> None:
    made = registered(tmp_path, mount_namespace="/proc/4242/ns/mnt")
    argv = made.argv()
    assert argv[:3] == ["nsenter", "--mount=/proc/4242/ns/mnt", "--"] and argv[3] == str(tmp_path / "kubelet")
    assert "unshare" not in argv


def test_node_addresses_are_in_the_benchmarking_range_and_never_loopback() -> None:
    assert cluster_nodes.NODE_NET.subnet_of(ipaddress.IPv4Network("198.18.0.0/15"))
    first = next(cluster_nodes.NODE_NET.hosts())
    assert not first.is_loopback and not first.is_global
    assert cluster_nodes.node_name("198.18.0.12") == "pinctl-198-18-0-12"


def test_a_nodes_namespace_binds_containerd_over_the_manifests_host_paths_after_the_private_dirs(
        tmp_path: pathlib.Path) -> None:
    node = cluster_nodes.FleetNode("containerd-1.7", tmp_path, plane=None, sync_frequency="10s")  # type: ignore[arg-type]

    class Daemon:
        data_dir = tmp_path / "fs"
        socket_dir = tmp_path / "s"

    binds, shared = node._binds(Daemon(), registered(tmp_path / "k"))  # type: ignore[arg-type]
    targets = [target for _source, target in binds]
    # A private dir first, then what is bound inside it: the later bind must not be hidden.
    assert targets.index("/var/lib") < targets.index(cluster_nodes.NODE_ROOT)
    assert targets.index("/run") < targets.index(cluster_nodes.NODE_RUN)
    assert dict((target, source) for source, target in binds)[cluster_nodes.NODE_ROOT] == tmp_path / "fs" / "root"
    assert dict((target, source) for source, target in binds)[cluster_nodes.NODE_RUN] == tmp_path / "s"
    assert shared == [cluster_nodes.NODE_RUN]
    # The mount points exist inside the private directories, not on the host.
    for source, target in binds:
        if target in ("/var/lib", "/run"):
            assert (source / pathlib.Path(target + "/containerd").name).is_dir()
    with pytest.raises(cluster_nodes.FleetError):
        cluster_nodes.NodeNamespace([(tmp_path / "a b", "/run")], [])


def test_the_overlay_is_the_repositorys_base_with_three_changes(tmp_path: pathlib.Path) -> None:
    overlay = fleet_deploy.Overlay(tmp_path / "overlay", "example.test/pinctl/agent:fleet-1",
                                   fleet_deploy.policy(["example.test/fleet/*"]))
    overlay.write()
    kustomization = yaml.safe_load((overlay.directory / "kustomization.yaml").read_text())
    (base,) = kustomization["resources"]
    assert (overlay.directory / base).resolve() == fleet_deploy.BASE.resolve()
    assert kustomization["images"] == [{"name": "pinctl", "newName": "example.test/pinctl/agent", "newTag": "fleet-1"}]
    assert [entry["path"] for entry in kustomization["patches"]] == [
        *(f"{name}-patch.yaml" for name in fleet_deploy.DAEMONSETS), "configmap-patch.yaml"]
    for name in fleet_deploy.DAEMONSETS:  # every DaemonSet of the base, each with the same three changes
        patch = yaml.safe_load((overlay.directory / f"{name}-patch.yaml").read_text())
        assert patch["metadata"]["name"] == name
        spec = patch["spec"]["template"]["spec"]
        assert spec["hostNetwork"] is True
        (container,) = spec["containers"]
        base_args = fleet_deploy.base_daemonset(name)["spec"]["template"]["spec"]["containers"][0]["args"]
        changed = [(old, new) for old, new in zip(base_args, container["args"]) if old != new]
        assert changed == [("0.0.0.0:9736", "$(POD_IP):9736")] and len(base_args) == len(container["args"])
        assert container["env"] == [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    config = yaml.safe_load((overlay.directory / "configmap-patch.yaml").read_text())
    assert config["data"]["config.toml"] == fleet_deploy.policy(["example.test/fleet/*"])


def test_a_policy_reads_as_toml_and_samples_are_read_by_their_labels() -> None:
    import tomllib

    assert tomllib.loads(fleet_deploy.policy(["a/*", 'b"c']))["pinned_images"] == ["a/*", 'b"c']
    text = ('# HELP x\npinctl_config_reloads_total{result="ok"} 3\npinctl_config_reloads_total{result="failed"} 1\n'
            "pinctl_config_last_reload_successful 0\n")
    assert fleet_deploy.sample(text, "pinctl_config_reloads_total", result="failed") == 1.0
    assert fleet_deploy.sample(text, "pinctl_config_reloads_total", result="ok") == 3.0
    assert fleet_deploy.sample(text, "pinctl_config_last_reload_successful") == 0.0
    assert fleet_deploy.sample(text, "pinctl_absent") == 0.0

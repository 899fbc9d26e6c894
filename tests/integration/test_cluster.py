"""A real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) on loopback.

The foundation of the cluster tests (issue 33): ``control_plane`` is one cluster for the whole
session, built from source with the go command. No pod of these tests runs: the fleet's nodes
(test_fleet.py), when they are up, are tainted against them; each test works in a namespace of its own and checks what the real components did, through the built kubectl.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.harness import kubernetes_build
from tests.harness.control_plane import LEADER_LEASES, ControlPlane

pytestmark = pytest.mark.integration

# The controllers work at their own pace on a busy machine: wait for what they do, never time it.
CONTROLLER_WAIT_S = 180.0


def _namespace(plane: ControlPlane, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    plane.kubectl("create", "namespace", name)
    return name


def test_the_apiserver_reports_the_built_version(control_plane: ControlPlane,
                                                 record_property: Callable[[str, object], None]) -> None:
    record_property("startup_seconds", control_plane.startup_seconds)
    record_property("ready_seconds", {name: c.ready_seconds for name, c in control_plane.components.items()})
    versions = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    assert versions["clientVersion"]["gitVersion"] == kubernetes_build.KUBERNETES_VERSION
    assert versions["serverVersion"]["gitVersion"] == kubernetes_build.KUBERNETES_VERSION
    status, body = control_plane.get(f"{control_plane.server}/version")
    assert status == 200 and json.loads(body)["gitVersion"] == kubernetes_build.KUBERNETES_VERSION
    # Loopback only: the server the kubeconfig names is 127.0.0.1.
    assert control_plane.server.startswith("https://127.0.0.1:")


def test_a_namespace_and_a_configmap_round_trip_through_apply(control_plane: ControlPlane) -> None:
    name = f"apply-{uuid.uuid4().hex[:8]}"
    data = {"pins": "example.test/app:1\nexample.test/app:2\n", "empty": ""}
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pinctl", "namespace": name}, "data": data},
        ],
    }
    applied = control_plane.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    assert f"namespace/{name} created" in applied.stdout
    assert "configmap/pinctl created" in applied.stdout
    stored = control_plane.kubectl_json("-n", name, "get", "configmap", "pinctl")
    assert stored["data"] == data
    # Applying the same again changes nothing; a changed value is patched in place.
    again = control_plane.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    assert "configmap/pinctl unchanged" in again.stdout
    manifest["items"][1]["data"] = {**data, "pins": "example.test/app:3\n"}
    control_plane.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    assert control_plane.kubectl_json("-n", name, "get", "configmap", "pinctl")["data"] == {**data, "pins": "example.test/app:3\n"}
    control_plane.kubectl("delete", "namespace", name, "--wait=false")


def test_the_scheduler_and_the_controller_manager_are_healthy_and_lead(control_plane: ControlPlane) -> None:
    for name in LEADER_LEASES:
        ok, said = control_plane.healthy(name)
        assert ok, f"{name}: {said}"
    holders = control_plane.wait_for_leases()
    for name, holder in holders.items():
        # "<hostname>_<uuid>": the one process of each that runs here.
        assert holder and "_" in holder, f"lease {name}: {holder!r}"
    ready = control_plane.kubectl("get", "--raw", "/readyz?verbose").stdout
    assert "readyz check passed" in ready
    assert control_plane.dead_components() == []


def test_a_deployment_gets_its_replicaset_and_pending_pods_from_the_real_controllers(
        control_plane: ControlPlane) -> None:
    namespace = _namespace(control_plane, "deploy")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "sleeper", "namespace": namespace},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "sleeper"}},
            "template": {
                "metadata": {"labels": {"app": "sleeper"}},
                # Never pulled: no node runs it (the fleet's nodes, when up, are tainted).
                "spec": {"containers": [{"name": "sleeper", "image": "example.test/sleeper:1"}]},
            },
        },
    }
    control_plane.kubectl("apply", "-f", "-", stdin=json.dumps(deployment))

    def replica_sets() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = control_plane.kubectl_json("-n", namespace, "get", "replicasets")["items"]
        return items

    (replica_set,) = control_plane.wait_for("the Deployment's ReplicaSet", replica_sets, CONTROLLER_WAIT_S)
    owners = replica_set["metadata"]["ownerReferences"]
    assert [(owner["kind"], owner["name"], owner.get("controller")) for owner in owners] == [("Deployment", "sleeper", True)]
    assert replica_set["spec"]["replicas"] == 2

    def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = control_plane.kubectl_json("-n", namespace, "get", "pods")["items"]
        return items if len(items) == 2 else []

    made = control_plane.wait_for("the ReplicaSet's two pods", pods, CONTROLLER_WAIT_S)
    for pod in made:
        assert pod["metadata"]["ownerReferences"][0]["name"] == replica_set["metadata"]["name"]
        # No node for them (the fleet's are tainted): the scheduler finds nowhere, so they stay Pending and unbound.
        assert pod["status"]["phase"] == "Pending"
        assert "nodeName" not in pod["spec"]
    control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


def test_a_minted_node_kubeconfig_authenticates_as_that_node(control_plane: ControlPlane) -> None:
    node = f"node-{uuid.uuid4().hex[:6]}"
    kubeconfig = control_plane.node_kubeconfig(node)
    whoami = control_plane.kubectl_json("auth", "whoami", kubeconfig=kubeconfig)
    user = whoami["status"]["userInfo"]
    assert user["username"] == f"system:node:{node}"
    assert "system:nodes" in user["groups"] and "system:authenticated" in user["groups"]
    assert control_plane.kubectl("get", "--raw", "/api", kubeconfig=kubeconfig).stdout.startswith("{")
    # The Node authorizer's rules, not the admin's: its own Node object, no other, and no secrets.
    def can_i(*request: str) -> str:
        return control_plane.kubectl("auth", "can-i", *request, kubeconfig=kubeconfig, check=False).stdout.strip()

    assert can_i("get", f"nodes/{node}") == "yes"
    assert can_i("get", "nodes/some-other-node").startswith("no")
    assert can_i("list", "secrets", "--all-namespaces").startswith("no")

"""deploy/kubernetes/components/node-status against the base, no cluster needed: the component is
rendered over the base's manifests (deploy_helpers.with_component, which the integration test
compares with kubectl kustomize) and each DaemonSet, the RBAC objects and the admission policies
are checked against each other and against the contract the agent follows. What the policies
refuse is shown on a real API server: tests/integration/test_node_status_rbac.py. The mutation
tests at the end show that each check can fail."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from pinctl.fleet.condition import CONDITION_TYPE
from tests.harness.control_plane import SERVICE_ACCOUNT_ISSUER

from .deploy_helpers import (
    KUBE,
    NODE_EVENTS_NAMESPACE,
    NODE_STATUS,
    NODE_STATUS_ACCOUNT,
    NODE_STATUS_NAMESPACE,
    NODE_STATUS_USER,
    Parsed,
    container_of,
    daemonsets,
    kustomization,
    json_patch_add,
    objects,
    parse_fixture,  # noqa: F401  (the parse fixture)
    with_component,
)
from .test_deploy_kubernetes import check_no_api_access, check_pod

COMPONENT, NAMESPACE, ACCOUNT, USERNAME = NODE_STATUS, NODE_STATUS_NAMESPACE, NODE_STATUS_ACCOUNT, NODE_STATUS_USER
EVENTS_NAMESPACE, CONDITION = NODE_EVENTS_NAMESPACE, CONDITION_TYPE
NODE_CLAIM = "authentication.kubernetes.io/node-name"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
NODE_ARGS = ["--node-status", "$(NODE_NAME)"]
AGENT_MEMORY = "112Mi"
NODE_ENV = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
RBAC_KINDS = frozenset({"ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"})


def rendered() -> list[dict[str, Any]]:
    return with_component(objects(), COMPONENT)


def _one(docs: list[dict[str, Any]], kind: str, name: str = ACCOUNT) -> dict[str, Any]:
    found = [doc for doc in docs if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind} {name}, wanted one"
    return found[0]


# -- the component and the base ------------------------------------------------------------


def test_the_component_lists_every_file() -> None:
    spec = kustomization(COMPONENT)
    assert spec["apiVersion"] == "kustomize.config.k8s.io/v1alpha1" and spec["kind"] == "Component"
    used = set(spec["resources"]) | {patch["path"] for patch in spec["patches"]}
    files = {path.name for path in COMPONENT.glob("*.yaml")} - {"kustomization.yaml"}
    assert used == files, f"in the directory but not the kustomization: {sorted(files - used)}"


def check_base_without_credentials(base_kustomization: dict[str, Any], docs: list[dict[str, Any]]) -> None:
    """The credentials are opt-in: `kubectl apply -k deploy/kubernetes` applies none of them."""
    assert not base_kustomization.get("components"), "the base must not include a component"
    assert not [item for item in base_kustomization["resources"] if "components" in item]
    check_no_api_access(docs)


def test_the_base_alone_has_no_credentials() -> None:
    check_base_without_credentials(kustomization(KUBE), objects())


# -- the DaemonSets -------------------------------------------------------------------------


def check_daemonsets(docs: list[dict[str, Any]], base: list[dict[str, Any]]) -> None:
    """Every DaemonSet of the base, and each the same way: the account, a pod-bound token at the
    in-cluster path, NODE_NAME and the two args at the end; nothing else of the base changed."""
    account = _one(docs, "ServiceAccount")["metadata"]["name"]
    names = sorted(each["metadata"]["name"] for each in daemonsets(base))
    assert sorted(each["metadata"]["name"] for each in daemonsets(docs)) == names
    for each in daemonsets(docs):
        name = each["metadata"]["name"]
        (before,) = [old for old in daemonsets(base) if old["metadata"]["name"] == name]
        pod, container = each["spec"]["template"]["spec"], container_of(each)
        assert pod.get("serviceAccountName") == account, f"{name}: service account {pod.get('serviceAccountName')}"
        assert pod.get("automountServiceAccountToken") is False, f"{name}: only the projected token may be mounted"
        old_args = container_of(before)["args"]
        assert container["args"] == [*old_args, *NODE_ARGS], f"{name}: args end {container['args'][len(old_args):]}"
        env = container.get("env", [])
        assert NODE_ENV in env, f"{name}: no NODE_NAME from spec.nodeName"
        kept = [e for e in env if e != NODE_ENV]
        assert kept == container_of(before).get("env", []), f"{name}: the base's env changed"
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == TOKEN_DIR]
        assert mount.get("readOnly") is True, f"{name}: the token is mounted writable"
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        check_projected_token(name, volume)
        # lightkube's memory (about 13 MiB, the component's patch says where it was measured) is asked for.
        requests = container["resources"]["requests"]
        assert requests["memory"] == AGENT_MEMORY, f"{name}: memory request {requests['memory']}"
        assert container_of(before)["resources"]["requests"]["memory"] != AGENT_MEMORY
        assert _without_additions(each, mount["name"], before) == before, f"{name}: more changed than the component's additions"


def check_projected_token(name: str, volume: dict[str, Any]) -> None:
    sources = volume.get("projected", {}).get("sources", [])
    tokens = [source["serviceAccountToken"] for source in sources if "serviceAccountToken" in source]
    assert len(tokens) == 1, f"{name}: {len(tokens)} serviceAccountToken sources"
    token = tokens[0]
    assert token.get("path") == "token"
    # The harness's API server takes its issuer as its one audience, as a default API server does.
    assert token.get("audience") == SERVICE_ACCOUNT_ISSUER, f"{name}: audience {token.get('audience')}"
    # The API server's minimum is 600 s; an hour, renewed by the kubelet at 80 % of it.
    assert token.get("expirationSeconds") == 3600, f"{name}: expirationSeconds {token.get('expirationSeconds')}"
    ca = [source["configMap"] for source in sources if "configMap" in source]
    assert ca == [{"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}], f"{name}: {ca}"
    namespace = [source["downwardAPI"] for source in sources if "downwardAPI" in source]
    assert namespace == [{"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}]
    assert len(sources) == 3, f"{name}: the token volume holds more than token, ca.crt and namespace"


def _without_additions(daemonset: dict[str, Any], volume: str, before: dict[str, Any]) -> dict[str, Any]:
    """The DaemonSet less what the component adds or changes: what must equal the base's."""
    copied = copy.deepcopy(daemonset)
    pod = copied["spec"]["template"]["spec"]
    container = container_of(copied)
    container["resources"]["requests"]["memory"] = container_of(before)["resources"]["requests"]["memory"]
    pod.pop("serviceAccountName", None)
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] != volume]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != volume]
    container["env"] = [e for e in container.get("env", []) if e != NODE_ENV]
    if not container["env"]:
        container.pop("env")
    if container["args"][-2:] == NODE_ARGS:
        container["args"] = container["args"][:-2]
    return copied


def test_every_daemonset_gets_the_same_identity() -> None:
    check_daemonsets(rendered(), objects())


def test_the_patched_daemonsets_pass_the_base_checks(parse: Callable[[list[str]], Parsed]) -> None:
    """The base's own checks (test_deploy_kubernetes.py) on the patched DaemonSets: every volume
    mounted, the args parsed by pinctl's click tree, no capability added."""
    check_pod(rendered(), parse)


# -- RBAC ---------------------------------------------------------------------------------------


def check_rbac(docs: list[dict[str, Any]]) -> None:
    account = _one(docs, "ServiceAccount")
    assert account["metadata"]["namespace"] == NAMESPACE
    assert account.get("automountServiceAccountToken") is False, "the account's token is mounted only where projected"
    role = _one(docs, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}], role["rules"]
    events = _one(docs, "Role")
    assert events["metadata"]["namespace"] == EVENTS_NAMESPACE, "kubectl describe node finds Node Events in default"
    wanted = [{"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}]
    assert events["rules"] == wanted, events["rules"]
    subject = {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}
    for kind, granted in (("ClusterRoleBinding", role), ("RoleBinding", events)):
        binding = _one(docs, kind)
        assert binding["subjects"] == [subject], f"{kind}: {binding['subjects']}"
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": granted["kind"],
                                      "name": granted["metadata"]["name"]}
        assert binding["metadata"].get("namespace") == granted["metadata"].get("namespace")
    kinds = sorted(doc["kind"] for doc in docs if doc["kind"] in RBAC_KINDS)
    assert kinds == sorted(RBAC_KINDS), f"RBAC objects beyond the five: {kinds}"


def test_rbac_grants_the_status_patch_and_events_alone() -> None:
    check_rbac(rendered())


# -- the admission policies -----------------------------------------------------------------------


def check_policies(docs: list[dict[str, Any]]) -> None:
    """Each policy bound with Deny, fail-closed, for this account alone, reading the token's node;
    together they cover updates of nodes and nodes/status and creates and updates of events."""
    policies = [doc for doc in docs if doc["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [doc for doc in docs if doc["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert policies, "no ValidatingAdmissionPolicy"
    assert sorted(b["spec"]["policyName"] for b in bindings) == sorted(p["metadata"]["name"] for p in policies)
    covered: set[tuple[str, str]] = set()
    for policy in policies:
        name, spec = policy["metadata"]["name"], policy["spec"]
        assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert spec.get("failurePolicy") == "Fail", f"{name}: a policy that cannot run must refuse"
        conditions = [c["expression"] for c in spec.get("matchConditions", [])]
        assert conditions == [f"request.userInfo.username == '{USERNAME}'"], f"{name}: matches {conditions}"
        variables = {v["name"]: v["expression"] for v in spec.get("variables", [])}
        assert NODE_CLAIM in variables.get("node", ""), f"{name}: the node is not the token's"
        assert spec["validations"][0]["expression"] == "variables.node != ''", f"{name}: a token with no node passes"
        for rule in spec["matchConstraints"]["resourceRules"]:
            assert rule["apiGroups"] == [""] and rule["apiVersions"] == ["v1"]
            covered |= {(resource, op) for resource in rule["resources"] for op in rule["operations"]}
        (binding,) = [b for b in bindings if b["spec"]["policyName"] == name]
        assert binding["spec"]["validationActions"] == ["Deny"], f"{name}: {binding['spec']['validationActions']}"
        assert not binding["spec"].get("matchResources"), f"{name}: the binding narrows the policy"
    wanted = {("nodes", "UPDATE"), ("nodes/status", "UPDATE"), ("events", "CREATE"), ("events", "UPDATE")}
    assert wanted <= covered, f"not covered: {sorted(wanted - covered)}"
    text = yaml.safe_dump(policies)
    assert f"'{CONDITION}'" in text, f"no policy names the condition {CONDITION}"


def test_the_policies_hold_the_account_to_its_node() -> None:
    check_policies(rendered())


# -- each check can fail ----------------------------------------------------------------------------


def _daemonset(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [doc for doc in daemonsets(docs) if doc["metadata"]["name"] == name]
    return found


def _token(docs: list[dict[str, Any]], name: str = "pinctl-crio") -> dict[str, Any]:
    pod = _daemonset(docs, name)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "projected" in v]
    found: dict[str, Any] = volume["projected"]["sources"][0]["serviceAccountToken"]
    return found


def _pod(docs: list[dict[str, Any]], name: str = "pinctl-cri-dockerd") -> dict[str, Any]:
    found: dict[str, Any] = _daemonset(docs, name)["spec"]["template"]["spec"]
    return found


DAEMONSET_EDITS: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "other-account": lambda docs: _pod(docs).__setitem__("serviceAccountName", "default"),
    "automount": lambda docs: _pod(docs).__setitem__("automountServiceAccountToken", True),
    "args-order": lambda docs: container_of(_daemonset(docs, "pinctl")).__setitem__(
        "args", [*NODE_ARGS, *container_of(_daemonset(docs, "pinctl"))["args"][:-2]]),
    "no-env": lambda docs: container_of(_daemonset(docs, "pinctl-crio")).pop("env"),
    "audience": lambda docs: _token(docs).__setitem__("audience", "pinctl"),
    "no-expiry": lambda docs: _token(docs).pop("expirationSeconds"),
    "writable-token": lambda docs: container_of(_daemonset(docs, "pinctl"))["volumeMounts"][-1].__setitem__(
        "readOnly", False),
    "extra-change": lambda docs: _pod(docs).__setitem__("hostNetwork", True),
    "one-daemonset-unpatched": lambda docs: docs.__setitem__(
        docs.index(_daemonset(docs, "pinctl-crio")), copy.deepcopy(_daemonset(objects(), "pinctl-crio"))),
}


@pytest.mark.parametrize("name", sorted(DAEMONSET_EDITS))
def test_daemonset_check_fails(name: str) -> None:
    docs = rendered()
    DAEMONSET_EDITS[name](docs)
    with pytest.raises((AssertionError, ValueError)):
        check_daemonsets(docs, objects())


RBAC_EDITS: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "get-nodes": lambda docs: _one(docs, "ClusterRole")["rules"].append(
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}),
    "update-status": lambda docs: _one(docs, "ClusterRole")["rules"][0]["verbs"].append("update"),
    "events-cluster-wide": lambda docs: _one(docs, "Role")["metadata"].__setitem__("namespace", NAMESPACE),
    "events-delete": lambda docs: _one(docs, "Role")["rules"][0]["verbs"].append("delete"),
    "other-subject": lambda docs: _one(docs, "RoleBinding")["subjects"][0].__setitem__("name", "default"),
    "account-automount": lambda docs: _one(docs, "ServiceAccount").pop("automountServiceAccountToken"),
    "extra-binding": lambda docs: docs.append({"kind": "ClusterRoleBinding", "metadata": {"name": "more"}}),
}


@pytest.mark.parametrize("name", sorted(RBAC_EDITS))
def test_rbac_check_fails(name: str) -> None:
    docs = rendered()
    RBAC_EDITS[name](docs)
    with pytest.raises(AssertionError):
        check_rbac(docs)


def _policy(docs: list[dict[str, Any]], name: str = ACCOUNT) -> dict[str, Any]:
    return _one(docs, "ValidatingAdmissionPolicy", name)["spec"]


POLICY_EDITS: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "ignore-failures": lambda docs: _policy(docs).__setitem__("failurePolicy", "Ignore"),
    "every-user": lambda docs: _policy(docs).pop("matchConditions"),
    "warn-only": lambda docs: _one(docs, "ValidatingAdmissionPolicyBinding")["spec"].__setitem__(
        "validationActions", ["Warn"]),
    "no-events": lambda docs: _policy(docs, f"{ACCOUNT}-events")["matchConstraints"]["resourceRules"][0].__setitem__(
        "resources", ["pods"]),
    "node-from-elsewhere": lambda docs: _policy(docs)["variables"][0].__setitem__("expression", "object.metadata.name"),
    "claim-not-required": lambda docs: _policy(docs)["validations"].pop(0),
    "unbound": lambda docs: docs.remove(_one(docs, "ValidatingAdmissionPolicyBinding", f"{ACCOUNT}-events")),
}


@pytest.mark.parametrize("name", sorted(POLICY_EDITS))
def test_policy_check_fails(name: str) -> None:
    docs = rendered()
    POLICY_EDITS[name](docs)
    with pytest.raises(AssertionError):
        check_policies(docs)


# -- API Priority and Fairness ------------------------------------------------------------------------


def _granted(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(verb, resource, where) the RBAC objects grant: where is "*" cluster-wide, else a namespace."""
    found: set[tuple[str, str, str]] = set()
    for kind, where in (("ClusterRole", "*"), ("Role", None)):
        role = _one(docs, kind)
        for rule in role["rules"]:
            found |= {(verb, resource, where or role["metadata"]["namespace"])
                      for verb in rule["verbs"] for resource in rule["resources"]}
    return found


def check_flowcontrol(docs: list[dict[str, Any]]) -> None:
    """One FlowSchema for this account's writes alone, exactly what RBAC grants it, into a
    Limited priority level of the component's own, placed before service-accounts (9000) and
    after the system's schemas."""
    level = _one(docs, "PriorityLevelConfiguration")
    schema = _one(docs, "FlowSchema")
    assert level["apiVersion"] == schema["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
    assert level["spec"]["type"] == "Limited" and level["spec"]["limited"]["limitResponse"]["type"] == "Queue"
    spec = schema["spec"]
    assert spec["priorityLevelConfiguration"] == {"name": level["metadata"]["name"]}
    assert 1000 < spec["matchingPrecedence"] < 9000, spec["matchingPrecedence"]
    (rule,) = spec["rules"]
    assert rule["subjects"] == [{"kind": "ServiceAccount", "serviceAccount": {"name": ACCOUNT, "namespace": NAMESPACE}}]
    assert not rule.get("nonResourceRules"), "the agent makes no non-resource requests"
    matched: set[tuple[str, str, str]] = set()
    for each in rule["resourceRules"]:
        assert each["apiGroups"] == [""]
        places = ["*"] if each.get("clusterScope") else each["namespaces"]
        matched |= {(verb, resource, where) for verb in each["verbs"] for resource in each["resources"]
                    for where in places}
    assert matched == _granted(docs), f"the FlowSchema matches {sorted(matched)}"


def test_the_agents_writes_have_a_priority_level_of_their_own() -> None:
    check_flowcontrol(rendered())


FLOW_EDITS: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "every-account": lambda docs: _one(docs, "FlowSchema")["spec"]["rules"][0]["subjects"].__setitem__(
        0, {"kind": "Group", "group": {"name": "system:serviceaccounts"}}),
    "more-than-granted": lambda docs: _one(docs, "FlowSchema")["spec"]["rules"][0]["resourceRules"][0][
        "verbs"].append("update"),
    "after-service-accounts": lambda docs: _one(docs, "FlowSchema")["spec"].__setitem__("matchingPrecedence", 9500),
    "shared-level": lambda docs: _one(docs, "FlowSchema")["spec"].__setitem__(
        "priorityLevelConfiguration", {"name": "workload-low"}),
    "exempt": lambda docs: _one(docs, "PriorityLevelConfiguration")["spec"].__setitem__("type", "Exempt"),
}


@pytest.mark.parametrize("name", sorted(FLOW_EDITS))
def test_flowcontrol_check_fails(name: str) -> None:
    docs = rendered()
    FLOW_EDITS[name](docs)
    with pytest.raises((AssertionError, KeyError)):
        check_flowcontrol(docs)


@pytest.mark.parametrize("edit", ["components", "resource", "credentials"])
def test_base_check_fails(edit: str) -> None:
    base = copy.deepcopy(kustomization(KUBE))
    docs = objects()
    if edit == "components":
        base["components"] = ["components/node-status"]
    elif edit == "resource":
        base["resources"].append("components/node-status/rbac.yaml")
    else:
        docs = rendered()
    with pytest.raises(AssertionError):
        check_base_without_credentials(base, docs)


def test_the_renderer_appends_as_kustomize_does() -> None:
    """deploy_helpers.with_component's JSON patch: '-' appends, a key is set, a missing parent fails."""
    doc: dict[str, Any] = {"a": {"list": [1]}}
    json_patch_add(doc, "/a/list/-", 2)
    json_patch_add(doc, "/a/new", {"x": 1})
    assert doc == {"a": {"list": [1, 2], "new": {"x": 1}}}
    with pytest.raises(KeyError):
        json_patch_add(doc, "/b/list/-", 3)

"""deploy/kubernetes/components/node-status on the harness's real API server: what an agent's token
may write, and each write it may not, refused by RBAC or by the admission policies.

No kubelet runs (the session's ``control_plane``, not the fleet): the test applies the component's
RBAC and policies with ``kubectl apply -k`` of the component's directory (its DaemonSet patch finds
no DaemonSet there), creates two Node objects of its own and a pod bound to the first that never
starts, and mints the token a projected volume would hold: bound to that pod, for the audience the
DaemonSets ask for. The API server puts the pod's node in it, and the policies read that.

Requests go over HTTPS with the token, not through kubectl: ``kubectl patch`` reads the object
first, which the account may not (it has patch alone, as the agent needs).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pathlib
import ssl
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional

import pytest
import yaml

from tests.harness.control_plane import SERVICE_ACCOUNT_ISSUER, ControlPlane, ControlPlaneError
from pinctl.fleet.condition import CONDITION_TYPE
from tests.unit.deploy_helpers import (KUBE, NODE_EVENTS_NAMESPACE, NODE_STATUS, NODE_STATUS_ACCOUNT, NODE_STATUS_NAMESPACE,
                                      NODE_STATUS_USER, objects, with_component)

pytestmark = pytest.mark.integration

COMPONENT, NAMESPACE, ACCOUNT, USERNAME = NODE_STATUS, NODE_STATUS_NAMESPACE, NODE_STATUS_ACCOUNT, NODE_STATUS_USER
EVENTS_NAMESPACE, CONDITION = NODE_EVENTS_NAMESPACE, CONDITION_TYPE
SEEDED = "pinctl.test/Seeded"
NODE_POLICY, EVENTS_POLICY = "pinctl-node-status", "pinctl-node-status-events"
FLOW = "pinctl-node-status"  # the FlowSchema and its PriorityLevelConfiguration
FLOW_SCHEMA_HEADER, PRIORITY_LEVEL_HEADER = "x-kubernetes-pf-flowschema-uid", "x-kubernetes-pf-prioritylevel-uid"
# The API server loads new RBAC objects and policies from its informers: wait for them to apply.
LOADED_WAIT_S = 120.0
STRATEGIC, MERGE, JSON = ("application/strategic-merge-patch+json", "application/merge-patch+json",
                          "application/json")


@dataclasses.dataclass
class Answer:
    code: int
    body: dict[str, Any]
    headers: dict[str, str] = dataclasses.field(default_factory=dict)  # names in lower case

    @property
    def message(self) -> str:
        return str(self.body.get("message", ""))


@dataclasses.dataclass
class Granted:
    """The component applied, two Nodes, a pod on the first, and its token."""

    plane: ControlPlane
    node_a: str
    node_b: str
    pod: str
    token: str
    suffix: str

    def call(self, method: str, path: str, body: Optional[Any] = None, *, content_type: str = JSON,
             token: Optional[str] = None) -> Answer:
        """One request to the API server as the token (this test's own by default)."""
        context = ssl.create_default_context(cafile=str(self.plane.pki.ca.cert))
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                             urllib.request.HTTPSHandler(context=context))
        request = urllib.request.Request(
            self.plane.server + path, method=method, data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token or self.token}", "Content-Type": content_type})
        try:
            with opener.open(request, timeout=30) as reply:
                return Answer(int(reply.status), json.loads(reply.read() or b"{}"), _lower(reply.headers.items()))
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                said = json.loads(text)
            except ValueError:
                said = {"message": text.decode(errors="replace")}
            return Answer(int(exc.code), said if isinstance(said, dict) else {"message": str(said)},
                          _lower(exc.headers.items()))

    def patch_status(self, node: str, patch: dict[str, Any], *, dry_run: bool = False,
                     token: Optional[str] = None) -> Answer:
        query = "?dryRun=All" if dry_run else ""
        return self.call("PATCH", f"/api/v1/nodes/{node}/status{query}", patch, content_type=STRATEGIC, token=token)

    def create_event(self, event: dict[str, Any], namespace: str = EVENTS_NAMESPACE, *, dry_run: bool = False,
                     token: Optional[str] = None) -> Answer:
        query = "?dryRun=All" if dry_run else ""
        return self.call("POST", f"/api/v1/namespaces/{namespace}/events{query}", event, token=token)

    def node(self, name: str) -> dict[str, Any]:
        """The Node as the admin reads it."""
        return self.plane.kubectl_json("get", "node", name)

    def event(self, about: str, kind: str = "Node", namespace: str = EVENTS_NAMESPACE, reason: str = "PolicyApplied",
              message: str = "") -> dict[str, Any]:
        """An Event in the shape the kubelet gives its node Events (uid: the node's name)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{about}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
            "involvedObject": {"kind": kind, "name": about, "uid": about},
            "reason": reason, "message": message or f"revision 0123456789ab: test {self.suffix}", "type": "Normal",
            "source": {"component": "pinctl", "host": about},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }


def _lower(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers}


def condition(status: str = "True", kind: str = CONDITION, reason: str = "PolicyApplied",
              message: str = "revision 0123456789ab: 5 wanted, 5 pinned") -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"status": {"conditions": [{"type": kind, "status": status, "reason": reason, "message": message,
                                       "lastHeartbeatTime": now, "lastTransitionTime": now}]}}


def conditions(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {each["type"]: each for each in node.get("status", {}).get("conditions", [])}


def jwt_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


def _namespace_state(plane: ControlPlane) -> str:
    """"Active", "Terminating" or "" when namespace pinctl is absent (the fleet tests delete theirs)."""
    done = plane.kubectl("get", "namespace", NAMESPACE, "-o", "jsonpath={.status.phase}", check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def _wait_until(what: str, probe: Any, timeout: float = LOADED_WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    said = None
    while time.monotonic() < deadline:
        ok, said = probe()
        if ok:
            return said
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {said})")


@pytest.fixture(scope="module")
def granted(control_plane: ControlPlane) -> Iterator[Granted]:
    plane = control_plane
    suffix = uuid.uuid4().hex[:6]
    # Node names of this module's own: the fleet's nodes are named pinctl-198-18-0-N.
    node_a, node_b, pod = f"pinctl-rbac-a-{suffix}", f"pinctl-rbac-b-{suffix}", f"node-status-{suffix}"
    if _namespace_state(plane) == "Terminating":
        plane.wait_for(f"namespace {NAMESPACE} gone", lambda: _namespace_state(plane) == "", timeout=LOADED_WAIT_S)
    created_namespace = _namespace_state(plane) == ""
    if created_namespace:
        plane.kubectl("create", "namespace", NAMESPACE)
    try:
        plane.kubectl("apply", "-k", str(COMPONENT))
        for name in (node_a, node_b):
            # No kubelet: the Node stays without a Ready condition of its own. Unschedulable, so
            # the scheduler places nothing here; the pod below names its node itself.
            plane.kubectl("create", "-f", "-", stdin=json.dumps({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"pinctl.test/rbac": suffix},
                             "annotations": {"pinctl.test/owner": "test_node_status_rbac"}},
                "spec": {"unschedulable": True}}))
            # A condition of another writer, for the policy to keep. Not Ready or a pressure
            # condition: the node lifecycle controller rewrites those on a node without a kubelet.
            plane.kubectl("patch", "node", name, "--subresource=status", "--type=strategic", "-p", json.dumps(
                condition(kind=SEEDED, reason="Seeded", message="written by the admin")))
        plane.kubectl("create", "-f", "-", stdin=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": NAMESPACE},
            "spec": {
                "nodeName": node_a, "serviceAccountName": ACCOUNT, "automountServiceAccountToken": False,
                # Never evicted from its unreachable node: a bound token dies with its pod.
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "never-started", "image": "never-started:0"}]}}))
        token = plane.kubectl("-n", NAMESPACE, "create", "token", ACCOUNT, "--bound-object-kind", "Pod",
                              "--bound-object-name", pod, "--audience", SERVICE_ACCOUNT_ISSUER).stdout.strip()
        made = Granted(plane, node_a, node_b, pod, token, suffix)

        # Loaded once the policies refuse (dry run: nothing is written) what RBAC lets through.
        def refused(answer: Answer, policy: str) -> tuple[bool, str]:
            return answer.code == 422 and f"'{policy}'" in answer.message, f"{answer.code} {answer.message}"

        _wait_until("the node policy refusing node B", lambda: refused(
            made.patch_status(node_b, condition(), dry_run=True), NODE_POLICY))
        _wait_until("the events policy refusing an Event about node B", lambda: refused(
            made.create_event(made.event(node_b), dry_run=True), EVENTS_POLICY))
        yield made
    finally:
        # No kubelet confirms a graceful deletion here: forced, or the namespace waits for PodGC.
        plane.kubectl("-n", NAMESPACE, "delete", "pod", pod, "--ignore-not-found", "--grace-period=0", "--force",
                      check=False)
        for name in (node_a, node_b):
            # A finalizer a failing test let through would hold the deletion forever.
            plane.kubectl("patch", "node", name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)
        plane.kubectl("delete", "node", node_a, node_b, "--ignore-not-found", check=False)
        for name in (node_a, node_b):
            plane.kubectl("-n", EVENTS_NAMESPACE, "delete", "events", f"--field-selector=involvedObject.name={name}",
                          "--ignore-not-found", check=False)
        plane.kubectl("delete", "-k", str(COMPONENT), "--ignore-not-found", check=False)
        if created_namespace:
            plane.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=120s", check=False)


# -- the token ---------------------------------------------------------------------------------


def test_the_token_names_the_pods_node(granted: Granted) -> None:
    claims = jwt_claims(granted.token)
    assert claims["aud"] == [SERVICE_ACCOUNT_ISSUER]
    assert claims["sub"] == USERNAME
    assert claims["kubernetes.io"]["pod"]["name"] == granted.pod
    assert claims["kubernetes.io"]["node"]["name"] == granted.node_a, claims["kubernetes.io"]
    # What admission sees: the user's extra, from the claim.
    review = granted.call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review.code == 201, review.message
    user = review.body["status"]["userInfo"]
    assert user["username"] == USERNAME
    assert user["extra"]["authentication.kubernetes.io/node-name"] == [granted.node_a]


# -- what it may write ---------------------------------------------------------------------------


def test_its_own_condition_is_written(granted: Granted) -> None:
    before = granted.node(granted.node_a)
    answer = granted.patch_status(granted.node_a, condition("True"))
    assert answer.code == 200, answer.message
    after = granted.node(granted.node_a)
    written = conditions(after)[CONDITION]
    assert (written["status"], written["reason"]) == ("True", "PolicyApplied")
    others = {kind: each for kind, each in conditions(after).items() if kind != CONDITION}
    assert others == conditions(before), "another condition changed"
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    # The merge key is the type: a second write replaces it, as the agent's heartbeat does.
    answer = granted.patch_status(granted.node_a, condition("False", reason="ImagesNotKept"))
    assert answer.code == 200, answer.message
    again = conditions(granted.node(granted.node_a))
    assert (again[CONDITION]["status"], again[CONDITION]["reason"]) == ("False", "ImagesNotKept")
    assert [kind for kind in again if kind == CONDITION] == [CONDITION]


def test_an_event_about_its_node_is_written_where_describe_shows_it(granted: Granted) -> None:
    event = granted.event(granted.node_a, message=f"written by the token {granted.suffix}")
    answer = granted.create_event(event)
    assert answer.code == 201, answer.message
    name = event["metadata"]["name"]
    # A repeat is a patch of the same Event (count, lastTimestamp), as client-go's recorder does.
    repeat = granted.call("PATCH", f"/api/v1/namespaces/{EVENTS_NAMESPACE}/events/{name}",
                          {"count": 2}, content_type=MERGE)
    assert repeat.code == 200, repeat.message
    described = granted.plane.kubectl("describe", "node", granted.node_a).stdout
    assert f"written by the token {granted.suffix}" in described, described[-1500:]


def test_describe_node_does_not_show_node_events_from_another_namespace(granted: Granted) -> None:
    """Why the Role is in default: an Event in pinctl must name pinctl as its object's namespace,
    and kubectl describe node asks for Events whose object names none."""
    nameless = granted.event(granted.node_a, namespace=NAMESPACE, message=f"in pinctl, no namespace {granted.suffix}")
    refused = granted.plane.kubectl("create", "-f", "-", stdin=json.dumps(nameless), check=False)
    assert refused.returncode != 0 and "does not match event.namespace" in refused.stderr, refused.stderr
    named = granted.event(granted.node_a, namespace=NAMESPACE, message=f"in pinctl, named {granted.suffix}")
    named["involvedObject"]["namespace"] = NAMESPACE
    granted.plane.kubectl("create", "-f", "-", stdin=json.dumps(named))
    try:
        described = granted.plane.kubectl("describe", "node", granted.node_a).stdout
        assert f"in pinctl, named {granted.suffix}" not in described
    finally:
        granted.plane.kubectl("-n", NAMESPACE, "delete", "event", named["metadata"]["name"], check=False)


def test_its_writes_queue_at_the_components_own_priority_level(granted: Granted) -> None:
    """API Priority and Fairness (the component's flowcontrol.yaml): the API server names, in each
    answer's headers, the FlowSchema and priority level it classified the request by. The agent's
    two kinds of write land in the component's own; anything else the account asks does not."""
    plane = granted.plane
    schema = plane.kubectl("get", "flowschema", FLOW, "-o", "jsonpath={.metadata.uid}").stdout.strip()
    level = plane.kubectl("get", "prioritylevelconfiguration", FLOW, "-o", "jsonpath={.metadata.uid}").stdout.strip()
    assert schema and level

    def classified(answer: Answer) -> tuple[str, str]:
        return answer.headers.get(FLOW_SCHEMA_HEADER, ""), answer.headers.get(PRIORITY_LEVEL_HEADER, "")

    # The API server's flow-control configuration follows its informers: wait for ours to load.
    _wait_until("the status write classified by the component's FlowSchema", lambda: (
        classified(answer := granted.patch_status(granted.node_a, condition(), dry_run=True)) == (schema, level),
        f"{answer.code} {classified(answer)}"))
    event = granted.create_event(granted.event(granted.node_a), dry_run=True)
    assert event.code == 201 and classified(event) == (schema, level), (event.code, classified(event))
    review = granted.call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    other_schema, other_level = classified(review)
    assert other_schema and other_schema != schema and other_level != level, classified(review)


# -- what it may not ---------------------------------------------------------------------------------


def test_another_nodes_condition_is_refused(granted: Granted) -> None:
    answer = granted.patch_status(granted.node_b, condition())
    assert answer.code == 422, answer.message
    assert f"'{NODE_POLICY}'" in answer.message
    assert f"may write Node {granted.node_a} only, not {granted.node_b}" in answer.message
    assert CONDITION not in conditions(granted.node(granted.node_b))


Refusal = tuple[dict[str, Any], str, Callable[[dict[str, Any]], bool]]


def _forbidden_status_patches(granted: Granted) -> dict[str, Refusal]:
    """Each status patch on node A the policy refuses: the patch, the words its refusal says, and
    how its effect would show on the Node (the node lifecycle controller may write the Node
    meanwhile, so the test looks for the effect, not for an unchanged resourceVersion)."""
    other = "of the Node's conditions, this account may write pinctl.io/PolicyApplied only"
    metadata = "the Node's labels, annotations and other metadata are not this account's to change"
    status = "of the Node's status, this account may change the conditions only"
    evil, pods = f"pinctl.test/evil-{granted.suffix}", str(100 + int(granted.suffix, 16) % 900)
    return {
        "Ready": (condition(kind="Ready", reason="KubeletReady"), other,
                  lambda node: conditions(node).get("Ready", {}).get("reason") == "KubeletReady"),
        "another-pinctl-condition": (condition(kind="pinctl.io/Other"), other,
                                     lambda node: "pinctl.io/Other" in conditions(node)),
        "another-writers-condition": (condition(kind=SEEDED, status="False", reason="Changed"), other,
                                      lambda node: conditions(node)[SEEDED]["status"] == "False"),
        "another-writers-condition-deleted": ({"status": {"conditions": [{"type": SEEDED, "$patch": "delete"}]}},
                                              other, lambda node: SEEDED not in conditions(node)),
        "label": ({"metadata": {"labels": {evil: "1"}}}, metadata,
                  lambda node: evil in node["metadata"].get("labels", {})),
        "annotation": ({"metadata": {"annotations": {evil: "1"}}}, metadata,
                       lambda node: evil in node["metadata"].get("annotations", {})),
        "finalizer": ({"metadata": {"finalizers": [evil]}}, metadata,
                      lambda node: evil in node["metadata"].get("finalizers", [])),
        "label-beside-the-condition": ({**condition(message=evil), "metadata": {"labels": {evil: "1"}}}, metadata,
                                       lambda node: conditions(node).get(CONDITION, {}).get("message") == evil),
        "capacity": ({"status": {"capacity": {"pods": pods}}}, status,
                     lambda node: node["status"].get("capacity", {}).get("pods") == pods),
        "address": ({"status": {"addresses": [{"type": "InternalIP", "address": "198.51.100.7"}]}}, status,
                    lambda node: bool(node["status"].get("addresses"))),
    }


FORBIDDEN_STATUS = ["Ready", "another-pinctl-condition", "another-writers-condition",
                    "another-writers-condition-deleted", "label", "annotation", "finalizer",
                    "label-beside-the-condition", "capacity", "address"]


@pytest.mark.parametrize("name", FORBIDDEN_STATUS)
def test_a_status_patch_beyond_its_condition_is_refused(granted: Granted, name: str) -> None:
    patch, said, took_effect = _forbidden_status_patches(granted)[name]
    assert not took_effect(granted.node(granted.node_a)), "the test's premise: not so before the patch"
    answer = granted.patch_status(granted.node_a, patch)
    assert answer.code == 422, f"{answer.code}: {answer.message}"
    assert f"'{NODE_POLICY}'" in answer.message and said in answer.message, answer.message
    assert not took_effect(granted.node(granted.node_a)), "refused, yet the Node shows the change"


def test_a_label_through_nodes_is_refused_by_rbac(granted: Granted) -> None:
    answer = granted.call("PATCH", f"/api/v1/nodes/{granted.node_a}",
                          {"metadata": {"labels": {"pinctl.test/evil": "1"}}}, content_type=STRATEGIC)
    assert answer.code == 403, answer.message
    assert f'User "{USERNAME}" cannot patch resource "nodes"' in answer.message
    assert "pinctl.test/evil" not in granted.node(granted.node_a)["metadata"]["labels"]


@pytest.mark.parametrize("what", ["another-node", "a-pod", "another-namespace", "taken-over"])
def test_an_event_beyond_its_node_is_refused(granted: Granted, what: str) -> None:
    if what == "taken-over":
        # Its own Event, patched to be about node B.
        own = granted.event(granted.node_a)
        assert granted.create_event(own).code == 201
        answer = granted.call("PATCH", f"/api/v1/namespaces/{EVENTS_NAMESPACE}/events/{own['metadata']['name']}",
                              {"involvedObject": {"name": granted.node_b, "uid": granted.node_b}}, content_type=MERGE)
        code, said = 422, f"Events about Node {granted.node_a} only, not about Node {granted.node_b}"
    elif what == "another-node":
        answer = granted.create_event(granted.event(granted.node_b))
        code, said = 422, f"Events about Node {granted.node_a} only, not about Node {granted.node_b}"
    elif what == "a-pod":
        answer = granted.create_event(granted.event(granted.node_a, kind="Pod"))
        code, said = 422, f"Events about Node {granted.node_a} only, not about Pod {granted.node_a}"
    else:
        event = granted.event(granted.node_a, namespace=NAMESPACE)
        event["involvedObject"]["namespace"] = NAMESPACE
        answer = granted.create_event(event, namespace=NAMESPACE)
        code, said = 403, f'cannot create resource "events" in API group "" in the namespace "{NAMESPACE}"'
    assert answer.code == code, f"{answer.code}: {answer.message}"
    assert said in answer.message, answer.message


@pytest.mark.parametrize("path", [
    "/api/v1/nodes", "NODE", f"/api/v1/namespaces/{NAMESPACE}/secrets", "/api/v1/namespaces/kube-system/secrets",
    f"/api/v1/namespaces/{EVENTS_NAMESPACE}/events", f"/api/v1/namespaces/{NAMESPACE}/pods",
], ids=["list-nodes", "get-its-node", "secrets-pinctl", "secrets-kube-system", "list-events", "list-pods"])
def test_reads_are_refused(granted: Granted, path: str) -> None:
    answer = granted.call("GET", f"/api/v1/nodes/{granted.node_a}" if path == "NODE" else path)
    assert answer.code == 403, f"{answer.code}: {answer.message}"
    assert f'User "{USERNAME}" cannot' in answer.message


def test_a_token_that_names_no_node_is_refused(granted: Granted) -> None:
    token = granted.plane.kubectl("-n", NAMESPACE, "create", "token", ACCOUNT,
                                  "--audience", SERVICE_ACCOUNT_ISSUER).stdout.strip()
    assert "node" not in jwt_claims(token)["kubernetes.io"]
    said = "the token names no node"
    answer = granted.patch_status(granted.node_a, condition(), token=token)
    assert answer.code == 422 and said in answer.message, f"{answer.code}: {answer.message}"
    answer = granted.create_event(granted.event(granted.node_a), token=token)
    assert answer.code == 422 and said in answer.message, f"{answer.code}: {answer.message}"


def test_a_token_for_another_audience_is_refused(granted: Granted) -> None:
    token = granted.plane.kubectl("-n", NAMESPACE, "create", "token", ACCOUNT, "--bound-object-kind", "Pod",
                                  "--bound-object-name", granted.pod, "--audience", "pinctl.test").stdout.strip()
    answer = granted.patch_status(granted.node_a, condition(), token=token)
    assert answer.code == 401, f"{answer.code}: {answer.message}"


def test_the_policies_hold_should_rbac_be_widened(granted: Granted) -> None:
    """Patch on nodes and Events through events.k8s.io granted beside the component: the policies
    alone still refuse a label, a spec change and an Event about another node."""
    plane, name = granted.plane, f"pinctl-rbac-widened-{granted.suffix}"
    plane.kubectl("create", "clusterrole", name, "--verb=patch", "--resource=nodes")
    plane.kubectl("create", "clusterrolebinding", name, f"--clusterrole={name}",
                  f"--serviceaccount={NAMESPACE}:{ACCOUNT}")
    plane.kubectl("-n", EVENTS_NAMESPACE, "create", "role", name, "--verb=create", "--resource=events.events.k8s.io")
    plane.kubectl("-n", EVENTS_NAMESPACE, "create", "rolebinding", name, f"--role={name}",
                  f"--serviceaccount={NAMESPACE}:{ACCOUNT}")
    try:
        nodes = f"/api/v1/nodes/{granted.node_a}"
        # An empty patch changes nothing, so the policy lets it by: 200 once RBAC has the grant.
        _wait_until("the widened ClusterRole", lambda: (
            (answer := granted.call("PATCH", nodes + "?dryRun=All", {}, content_type=STRATEGIC)).code == 200,
            answer.message))
        label = granted.call("PATCH", nodes, {"metadata": {"labels": {"pinctl.test/evil": "1"}}},
                             content_type=STRATEGIC)
        assert label.code == 422 and "labels, annotations" in label.message, f"{label.code}: {label.message}"
        spec = granted.call("PATCH", nodes, {"spec": {"unschedulable": False}}, content_type=STRATEGIC)
        assert spec.code == 422 and "the Node's spec" in spec.message, f"{spec.code}: {spec.message}"
        event = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                 "metadata": {"name": f"{granted.node_b}.{granted.suffix}", "namespace": EVENTS_NAMESPACE},
                 "regarding": {"kind": "Node", "name": granted.node_b, "uid": granted.node_b},
                 "reason": "PolicyApplied", "note": "test", "type": "Normal", "action": "Report",
                 "reportingController": "pinctl.io/agent", "reportingInstance": granted.node_a,
                 "eventTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())}
        path = f"/apis/events.k8s.io/v1/namespaces/{EVENTS_NAMESPACE}/events"
        answer = _wait_until("the widened Role", lambda: (
            (said := granted.call("POST", path, event)).code != 403, said))
        # Checked in core v1's shape: the policy's rule matches the equivalent resource.
        assert answer.code == 422, f"{answer.code}: {answer.message}"
        assert f"not about Node {granted.node_b}" in answer.message, answer.message
    finally:
        plane.kubectl("delete", "clusterrolebinding,clusterrole", name, "--ignore-not-found", check=False)
        plane.kubectl("-n", EVENTS_NAMESPACE, "delete", "rolebinding,role", name, "--ignore-not-found", check=False)


# -- the rendering the unit tests check ----------------------------------------------------------------


def _keyed(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]): doc for doc in docs}


def test_kubectl_kustomize_renders_what_the_unit_tests_check(control_plane: ControlPlane,
                                                             tmp_path: pathlib.Path) -> None:
    """An overlay of the base and the component, as the README shows, rendered by kubectl's
    kustomize, equals tests/unit/deploy_helpers.with_component's rendering."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(KUBE, overlay)], "components": [os.path.relpath(COMPONENT, overlay)]}))
    try:
        text = control_plane.kubectl("kustomize", str(overlay)).stdout
    except ControlPlaneError as exc:
        pytest.fail(str(exc))
    rendered = _keyed([doc for doc in yaml.safe_load_all(text) if doc])
    ours = _keyed(with_component(objects(), COMPONENT))
    assert sorted(rendered) == sorted(ours)
    for key, doc in ours.items():
        assert rendered[key] == doc, f"{key}: kustomize renders it otherwise"

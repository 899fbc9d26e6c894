"""The fake fleet's pure parts (tests/harness/fake_nodes.py): what each Node says, without an API server.

bench/bench_fleet_status.py creates them on a real control plane; these pin what a test or a
benchmark reading them relies on: the plan is the same every time, the shares are roughly
those declared, and pinctl's condition is worded as the agent words it, for each state.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from collections import Counter

from pinctl.fleet import condition as pinctl_condition
from tests.harness import fake_nodes

REVISION = "0123456789ab"
NOW = 1_800_000_000.0
# The agent's message: "revision R: W wanted, P pinned, A absent, N not kept[; ...]".
MESSAGE = re.compile(r"revision (?P<rev>[0-9a-f]{12}): (?P<wanted>\d+) wanted, (?P<pinned>\d+) pinned, "
                     r"(?P<absent>\d+) absent, (?P<not_kept>\d+) not kept(; [^\n]+)?")


def test_the_plan_is_the_same_every_time_and_names_sort_in_order() -> None:
    first, again = fake_nodes.plan(2000), fake_nodes.plan(2000)
    assert first == again
    assert [n.name for n in first] == sorted(n.name for n in first)
    assert first[0].name == "fake-node-00001" and len({n.name for n in first}) == 2000


def test_the_shares_are_about_those_declared() -> None:
    nodes = fake_nodes.plan(10000)
    states = Counter(n.state for n in nodes)
    for state, share in fake_nodes.STATES:
        assert abs(states[state] / 10000 - share) < 0.02, state
    runtimes = Counter(n.runtime.split("://")[0] for n in nodes)
    assert set(runtimes) == {"containerd", "docker", "cri-o"}
    assert all((n.runtime_label is None) == n.runtime.startswith("containerd://") for n in nodes)


def test_each_state_writes_its_condition() -> None:
    expected = {"applied": ("True", "PolicyApplied", REVISION), "not-kept": ("False", "ImagesNotKept", REVISION),
                "old-revision": ("True", "PolicyApplied", fake_nodes.OLD_REVISION),
                "stale": ("True", "PolicyApplied", REVISION),
                "reload-failed": ("False", "ReloadFailed", fake_nodes.OLD_REVISION),
                "agent-not-ready": ("Unknown", "AgentNotReady", REVISION)}
    seen = set()
    for node in fake_nodes.plan(1000):
        condition = fake_nodes.pinctl_condition(node, REVISION, NOW)
        if node.state == "none":
            assert condition is None
            continue
        assert condition is not None
        seen.add(node.state)
        assert (condition["status"], condition["reason"]) == expected[node.state][:2]
        found = MESSAGE.fullmatch(condition["message"])
        assert found and found["rev"] == expected[node.state][2], condition["message"]
        counts = [int(found[k]) for k in ("wanted", "pinned", "absent", "not_kept")]
        assert counts[0] == sum(counts[1:])
        assert (counts[3] > 0) == (node.state == "not-kept")
        age = NOW - calendar.timegm(time.strptime(condition["lastHeartbeatTime"], "%Y-%m-%dT%H:%M:%SZ"))
        assert (age > 15 * 60) == (node.state == "stale")
    assert seen == set(expected)


def test_a_node_object_is_sized_like_a_real_one_and_carries_what_a_kubelet_reports() -> None:
    for node in fake_nodes.plan(50):
        body = fake_nodes.node_object(node, REVISION, NOW)
        size = len(json.dumps(body, separators=(",", ":")))
        assert 5_000 < size < 15_000
        status = body["status"]
        assert status["nodeInfo"]["containerRuntimeVersion"] == node.runtime
        assert 20 <= len(status["images"]) <= 40
        sizes = [image["sizeBytes"] for image in status["images"]]
        assert sizes == sorted(sizes, reverse=True)
        kinds = [c["type"] for c in status["conditions"]]
        assert kinds[:4] == ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        assert (fake_nodes.CONDITION_TYPE in kinds) == (node.state != "none")
        assert body["metadata"]["labels"][fake_nodes.FAKE_LABEL] == "true"
        assert body["metadata"]["labels"].get("pinctl.io/runtime") == node.runtime_label


def test_the_status_patch_carries_the_condition_alone() -> None:
    node = next(n for n in fake_nodes.plan(100) if n.state == "not-kept")
    condition = fake_nodes.pinctl_condition(node, REVISION, NOW)
    assert condition is not None
    assert json.loads(fake_nodes.status_patch(condition)) == {"status": {"conditions": [condition]}}


def test_pinctl_reads_every_condition_as_planned() -> None:
    assert fake_nodes.CONDITION_TYPE == pinctl_condition.CONDITION_TYPE
    assert fake_nodes.revision_of(b"policy") == pinctl_condition.revision_of(b"policy")
    for node in fake_nodes.plan(1000):
        condition = fake_nodes.pinctl_condition(node, REVISION, NOW)
        if condition is None:
            continue
        parsed = pinctl_condition.parse_message(condition["message"])
        assert parsed is not None, condition["message"]
        assert parsed.revision == (REVISION if node.state not in ("old-revision", "reload-failed")
                                   else fake_nodes.OLD_REVISION)

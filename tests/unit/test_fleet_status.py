"""The Node condition's words and fleet status's judgement of them (pinctl.fleet, pure)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pinctl.fleet.condition import (CONDITION_TYPE, MESSAGE_MAX, NodeReport, PolicyCounts, condition_of,
                                    parse_message, revision_of, rfc3339)
from pinctl.fleet.status import judge, progress_line

NOW = datetime(2026, 12, 5, 12, 0, 0, tzinfo=timezone.utc)
REV = revision_of(b'pinned_images = ["example.test/*"]\n')


def node(name: str, condition: Optional[dict[str, Any]] = None, runtime: str = "containerd://1.7.24") -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True"}] + ([{"type": CONDITION_TYPE, **condition}] if condition else [])
    return {"metadata": {"name": name}, "status": {"nodeInfo": {"containerRuntimeVersion": runtime},
                                                   "conditions": conditions}}


def written(report: NodeReport, age: float = 30.0) -> dict[str, Any]:
    condition = condition_of(report)
    return {"status": condition.status, "reason": condition.reason, "message": condition.message,
            "lastHeartbeatTime": rfc3339(NOW - timedelta(seconds=age))}


def test_the_revision_is_the_content_hash() -> None:
    assert REV == revision_of(b'pinned_images = ["example.test/*"]\n') and len(REV) == 12
    assert REV != revision_of(b'pinned_images = ["example.test/*"]\n\n')


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6),
       st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=400))
def test_every_message_reads_back(wanted: int, pinned: int, absent: int, not_kept: int, why: str) -> None:
    counts = PolicyCounts(wanted, pinned, absent, not_kept)
    report = NodeReport(REV, counts, "example.test/a:1" if not_kept else "", why if not_kept else "")
    condition = condition_of(report)
    assert len(condition.message) <= MESSAGE_MAX and "\n" not in condition.message
    parsed = parse_message(condition.message)
    assert parsed is not None and parsed.revision == REV and parsed.counts == counts


@pytest.mark.parametrize(("report", "status", "reason"), [
    (NodeReport(REV, PolicyCounts(2, 2)), "True", "PolicyApplied"),
    (NodeReport(REV, PolicyCounts(3, 2, 1)), "True", "PolicyApplied"),
    (NodeReport(REV, PolicyCounts(2, 1, 0, 1), "example.test/a:1", "the runtime ignores the pin label"),
     "False", "ImagesNotKept"),
    (NodeReport(REV, PolicyCounts(2, 2), reload_failed="config.toml:3: bad"), "False", "ReloadFailed"),
    (NodeReport(REV, PolicyCounts(2, 1, 0, 1), ready=False, not_ready_why="containerd is away"),
     "Unknown", "AgentNotReady"),
])
def test_the_condition_says_the_worst_first(report: NodeReport, status: str, reason: str) -> None:
    condition = condition_of(report)
    assert (condition.status, condition.reason) == (status, reason)
    patch = condition.as_patch(NOW, NOW)
    (entry,) = patch["status"]["conditions"]  # type: ignore[index]
    assert entry["type"] == CONDITION_TYPE and entry["lastHeartbeatTime"] == "2026-12-05T12:00:00Z"


def test_a_message_of_another_grammar_is_not_guessed_at() -> None:
    assert parse_message("all good") is None
    assert parse_message("revision abc: 1 wanted") is None


def judged(*nodes: dict[str, Any], stale_after: float = 900.0) -> dict[str, Any]:
    return {row.node: row for row in judge(nodes, REV, NOW, stale_after).rows}


def test_each_state_and_its_reason() -> None:
    old = revision_of(b"before")
    found = judged(
        node("applied", written(NodeReport(REV, PolicyCounts(3, 2, 1)))),
        node("old", written(NodeReport(old, PolicyCounts(2, 2)))),
        node("kept-not", written(NodeReport(REV, PolicyCounts(2, 1, 0, 1), "example.test/a:1", "it is ignored"))),
        node("reload", written(NodeReport(old, PolicyCounts(2, 2), reload_failed="config.toml:3: bad"))),
        node("unready", written(NodeReport(REV, PolicyCounts(2, 2), ready=False, not_ready_why="containerd away"))),
        node("quiet", written(NodeReport(REV, PolicyCounts(2, 2)), age=901)),
        node("none"),
        node("strange", {"status": "True", "reason": "PolicyApplied", "message": "fine",
                         "lastHeartbeatTime": rfc3339(NOW)}),
    )
    states = {name: row.state for name, row in found.items()}
    assert states == {"applied": "applied", "old": "old revision", "kept-not": "not kept", "reload": "reload failed",
                      "unready": "not ready", "quiet": "stale", "none": "no agent", "strange": "unreadable"}
    assert found["applied"].why == "" and found["applied"].counts == PolicyCounts(3, 2, 1)
    assert found["old"].why == f"runs revision {old}; the ConfigMap has {REV}"
    assert found["kept-not"].why == "example.test/a:1: it is ignored"
    assert "config.toml:3: bad" in found["reload"].why and found["unready"].why == "containerd away"
    assert found["quiet"].why == "the agent last wrote 15m ago; is it running?"
    assert found["applied"].heartbeat_age == 30.0 and found["none"].heartbeat_age is None


def test_all_applied_needs_every_node_and_at_least_one() -> None:
    good = node("a", written(NodeReport(REV, PolicyCounts(1, 1))))
    assert judge([good], REV, NOW).all_applied
    assert not judge([good, node("b")], REV, NOW).all_applied
    assert not judge([], REV, NOW).all_applied
    assert judge([good], REV, NOW, stale_after=10).rows[0].state == "stale"


def test_the_progress_line_names_the_first_node_waited_for() -> None:
    status = judge([node("a", written(NodeReport(REV, PolicyCounts(1, 1)))), node("b"), node("c")], REV, NOW)
    assert progress_line(status, 58.2) == "1/3 nodes applied, 58 s left; waiting for b (no agent) and 1 more"


class FakeApi:
    """What fleet status asks of the API server (kubeapi.KubeApi), answered from memory."""

    where = "https://127.0.0.1:6443"

    def __init__(self, data: Optional[dict[str, str]], nodes: list[dict[str, Any]]) -> None:
        self.data, self.listed, self.closed = data, nodes, False

    def configmap_data(self, namespace: str, name: str) -> dict[str, str]:
        from pinctl.kubeapi import KubeNotFound

        if self.data is None:
            raise KubeNotFound(f"not found (configmap {namespace}/{name})")
        return self.data

    def nodes(self, selector: str = "") -> list[dict[str, Any]]:
        return self.listed

    def close(self) -> None:
        self.closed = True


def run_status(api: FakeApi, **request: Any) -> Any:
    from pinctl.commands.fleet import FleetStatusRequest, fleet_status

    return fleet_status(FleetStatusRequest(**request), lambda _status, _left: None, connect=lambda: api)  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(("api", "request_args", "error", "said"), [
    (FakeApi(None, []), {}, "PinctlError", "no configmap pinctl/pinctl-config at https://127.0.0.1:6443"),
    (FakeApi({"other.toml": ""}, []), {}, "UsageError", "has no key 'config.toml' (it has other.toml)"),
    (FakeApi({"config.toml": ""}, []), {"selector": "zone=a"}, "PinctlError", "no node matches -l zone=a"),
])
def test_what_fleet_status_cannot_judge_is_one_error(api: FakeApi, request_args: dict[str, Any], error: str,
                                                     said: str) -> None:
    """Each ends as one line (errors.py maps the class to its exit code: 1, or 2 for usage)."""
    from pinctl import errors

    with pytest.raises(getattr(errors, error)) as raised:
        run_status(api, **request_args)
    assert said in str(raised.value) and "\n" not in str(raised.value)
    assert type(raised.value).__name__ == error and api.closed


def test_fleet_status_exit_code_follows_the_nodes() -> None:
    config = 'pinned_images = ["example.test/*"]\n'
    revision = revision_of(config.encode())
    # fleet status judges against the clock of the moment: a heartbeat written just now.
    fresh = {**written(NodeReport(revision, PolicyCounts(1, 1))), "lastHeartbeatTime": rfc3339(datetime.now(timezone.utc))}
    applied = node("a", fresh)
    assert run_status(FakeApi({"config.toml": config}, [applied])).exit_code == 0
    report = run_status(FakeApi({"config.toml": config}, [applied, node("b")]))
    assert report.exit_code == 1 and report.waited is None and not report.timed_out

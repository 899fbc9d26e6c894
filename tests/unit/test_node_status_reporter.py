"""The agent's writer of its Node condition and Events (watch.report, fleet.events), on a fake
clock and a recording API: what is written, when, and what is not written at all."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from pinctl.errors import PinctlError
from pinctl.fleet import events
from pinctl.fleet.condition import NodeReport, PolicyCounts, revision_of
from pinctl.kubeapi import parse_selector
from pinctl.model import ItemResult
from pinctl.watch.report import CHANGE_JITTER_S, NodeStatusReporter

REV = revision_of(b"policy")
APPLIED = NodeReport(REV, PolicyCounts(2, 2))
NOT_KEPT = NodeReport(REV, PolicyCounts(2, 1, 0, 1), "example.test/a:1", "the runtime ignores the pin label")
HEARTBEAT = 300.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return datetime(2026, 12, 5, tzinfo=timezone.utc) + timedelta(seconds=self.now)


class Api:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []
        self.created: list[dict[str, Any]] = []
        self.counted: list[tuple[str, dict[str, Any]]] = []
        self.refuse = 0

    def patch_node_status(self, node: str, patch: dict[str, Any]) -> None:
        if self.refuse:
            self.refuse -= 1
            raise PinctlError("the API server refused (node x's status): forbidden")
        assert node == "worker-1"
        self.patches.append(patch["status"]["conditions"][0])

    def create_event(self, namespace: str, body: dict[str, Any]) -> str:
        assert namespace == "default"
        self.created.append(body)
        return body["metadata"]["name"]

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.counted.append((name, patch))


@pytest.fixture
def parts() -> tuple[NodeStatusReporter, Clock, Api, list[tuple[str, str, dict[str, Any]]]]:
    clock, api = Clock(), Api()
    logged: list[tuple[str, str, dict[str, Any]]] = []
    reporter = NodeStatusReporter("worker-1", lambda: api, HEARTBEAT, lambda level, msg, **f: logged.append((level, msg, f)),
                                  "default", clock=clock, now=clock.wall, draw=lambda: 1.0)
    return reporter, clock, api, logged


def settle(reporter: NodeStatusReporter, clock: Clock, report: NodeReport) -> None:
    """A report handed over, and the change's jitter (the longest, as drawn here) waited out."""
    reporter.update(report)
    reporter.turn()
    clock.now += CHANGE_JITTER_S
    reporter.turn()


def test_a_change_is_written_once_after_its_jitter_then_only_heartbeats(parts: Any) -> None:
    reporter, clock, api, _logged = parts
    reporter.update(APPLIED)
    reporter.turn()
    assert api.patches == []  # the change waits its jitter (at most CHANGE_JITTER_S)
    clock.now += CHANGE_JITTER_S
    reporter.turn()
    assert [p["reason"] for p in api.patches] == ["PolicyApplied"]
    for _ in range(10):  # the same report again and again: nothing to write before the heartbeat
        clock.now += 20
        reporter.update(APPLIED)
        reporter.turn()
    assert len(api.patches) == 1
    clock.now += HEARTBEAT
    reporter.turn()
    assert len(api.patches) == 2 and api.patches[1]["lastTransitionTime"] == api.patches[0]["lastTransitionTime"]
    assert api.patches[1]["lastHeartbeatTime"] > api.patches[0]["lastHeartbeatTime"]


def test_heartbeats_are_jittered_within_a_fifth_of_the_period() -> None:
    clock, api = Clock(), Api()
    reporter = NodeStatusReporter("worker-1", lambda: api, HEARTBEAT, lambda *a, **k: None, "default",
                                  clock=clock, now=clock.wall, draw=lambda: 0.0)
    reporter.update(APPLIED)
    reporter.turn()
    assert len(api.patches) == 1  # drawn 0: written at once
    clock.now += HEARTBEAT * 0.8 + 0.1
    reporter.turn()
    assert len(api.patches) == 1  # drawn 0 makes the longest period: the whole heartbeat
    clock.now += HEARTBEAT * 0.2
    reporter.turn()
    assert len(api.patches) == 2


def test_transitions_make_events_and_counts_alone_do_not(parts: Any) -> None:
    reporter, clock, api, _logged = parts
    for report in (APPLIED, NodeReport(REV, PolicyCounts(3, 3)), NOT_KEPT, APPLIED):
        settle(reporter, clock, report)
    assert [p["reason"] for p in api.patches] == ["PolicyApplied", "PolicyApplied", "ImagesNotKept", "PolicyApplied"]
    # Back to the first condition: the same event again, counted on the first one (as the kubelet's are).
    assert [(e["type"], e["reason"]) for e in api.created] == [("Normal", "PolicyApplied"), ("Warning", "ImagesNotKept")]
    assert [(name, patch["count"]) for name, patch in api.counted] == [(api.created[0]["metadata"]["name"], 2)]
    assert api.patches[2]["lastTransitionTime"] != api.patches[1]["lastTransitionTime"]
    event = api.created[0]
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "worker-1", "uid": "worker-1"}
    assert event["source"] == {"component": "pinctl", "host": "worker-1"}
    # A new revision applied is an event of its own.
    settle(reporter, clock, NodeReport(revision_of(b"edited"), PolicyCounts(2, 2)))
    assert api.created[-1]["reason"] == "PolicyApplied" and revision_of(b"edited") in api.created[-1]["message"]


def test_a_refused_write_is_logged_once_and_retried_with_back_off(parts: Any) -> None:
    reporter, clock, api, logged = parts
    api.refuse = 3
    settle(reporter, clock, APPLIED)
    reporter.turn()  # within the back-off: not even tried
    clock.now += 5
    reporter.turn()
    clock.now += 10
    reporter.turn()
    assert api.refuse == 0 and api.patches == []
    warnings = [f["error"] for level, msg, f in logged if level == "warning"]
    assert warnings == ["the API server refused (node x's status): forbidden"]
    clock.now += 20
    reporter.turn()
    assert len(api.patches) == 1 and ("info", "node status: writing again", {"node": "worker-1"}) in logged


def test_results_become_one_event_per_kind_and_repeats_are_counted(parts: Any) -> None:
    reporter, clock, api, _logged = parts
    batch = [ItemResult("k8s.io", f"example.test/a:{n}", "pinned") for n in range(5)]
    batch.append(ItemResult("k8s.io", "example.test/b:1", "failed", "containerd said no"))
    reporter.results(batch)
    reporter.turn()
    assert [(e["reason"], e["message"]) for e in api.created] == [
        ("Pinned", "pinned example.test/a:0, example.test/a:1, example.test/a:2 and 2 more"),
        ("PinFailed", "could not change the pin of example.test/b:1: containerd said no")]
    reporter.results(batch[5:])
    reporter.turn()
    assert len(api.created) == 2 and api.counted[0][0] == api.created[1]["metadata"]["name"]
    assert api.counted[0][1]["count"] == 2


def test_the_spam_filter_lets_a_burst_through_then_one_per_refill() -> None:
    clock = Clock()
    book = events.EventBook("worker-1", "default", clock)
    sent = [book.next(events.NodeEvent("Normal", "Pinned", f"pinned {n}"), clock.wall()) for n in range(events.BURST + 5)]
    assert sum(step is not None for step in sent) == events.BURST
    clock.now += events.REFILL_S
    assert book.next(events.NodeEvent("Normal", "Pinned", "later"), clock.wall()) is not None
    assert book.next(events.NodeEvent("Normal", "Pinned", "later again"), clock.wall()) is None


@pytest.mark.parametrize(("text", "wanted"), [
    ("zone=a", "zone=a"),
    ("zone==a,tier!=db", "zone=a,tier!=db"),
    ("pinctl.io/runtime in (cri-o, cri-dockerd)", "pinctl.io/runtime in (cri-dockerd,cri-o)"),
    ("zone notin (a),!pinctl.test/bare,gpu", "zone notin (a),!pinctl.test/bare,gpu"),
])
def test_label_selectors_read_as_kubectl_takes_them(text: str, wanted: str) -> None:
    from lightkube.core.selector import build_selector

    assert build_selector(parse_selector(text)) == wanted


@pytest.mark.parametrize("text", ["zone=(a", "=a", "zone in a", ",,"])
def test_a_selector_kubectl_would_refuse_is_one_usage_line(text: str) -> None:
    from pinctl.errors import UsageError

    with pytest.raises(UsageError, match="label selector"):
        parse_selector(text)


def test_an_agent_without_credentials_stops_at_start_with_one_line(tmp_path: Any) -> None:
    """No pod token and no kubeconfig: exit 2 before watching, the fix named, no traceback."""
    import os
    import subprocess
    import sys

    env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
    env.update(HOME=str(tmp_path), CONTAINERD_ADDRESS=str(tmp_path / "containerd.sock"),
               PINCTL_CONFIG=str(tmp_path / "config.toml"))
    (tmp_path / "config.toml").write_text('pinned_images = ["example.test/*"]\n')
    done = subprocess.run([sys.executable, "-m", "pinctl", "sync", "--watch", "--node-status", "worker-1"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("pinctl:")]
    assert "--node-status: no credentials" in line and "components/node-status" in line
    assert "Traceback" not in done.stderr


def test_a_status_write_the_api_refuses_is_recorded_as_an_event(parts: Any) -> None:
    from pinctl.kubeapi import KubeForbidden

    reporter, clock, api, _logged = parts

    def refuse(node: str, patch: dict[str, Any]) -> None:
        raise KubeForbidden("the API server refused (node worker-1's status): denied by pinctl-node-status")

    api.patch_node_status = refuse
    settle(reporter, clock, APPLIED)
    assert [(e["type"], e["reason"]) for e in api.created] == [("Warning", "StatusWriteRefused")]
    assert "denied by pinctl-node-status" in api.created[0]["message"]


def test_a_wanted_image_deleted_is_one_warning_naming_it_and_the_deleter_and_repeats_are_counted(parts: Any) -> None:
    reporter, _clock, api, _logged = parts
    image_id = "sha256:" + "c" * 64
    event = events.deletion_event(("example.test/a:1", "example.test/a:latest", image_id), image_id, "cri-client",
                                  "crictl")
    reporter.event(event)
    reporter.turn()
    (created,) = api.created
    assert (created["type"], created["reason"]) == ("Warning", "WantedImageDeleted")
    assert created["message"] == ("wanted image example.test/a:1, example.test/a:latest (cccccccccccc) was deleted "
                                  "by cri-client (crictl); pinctl history example.test/a:1 on the node says why")
    reporter.event(events.deletion_event(("example.test/a:1",), image_id, "kubelet", "kubelet"))
    reporter.event(event)
    reporter.turn()
    assert [e["message"].split(" was deleted by ")[1].split(";")[0] for e in api.created] == [
        "cri-client (crictl)", "kubelet"]
    assert api.counted[-1][0] == created["metadata"]["name"] and api.counted[-1][1]["count"] == 2
    restored = events.restore_event(("example.test/a:1",), True, "import /srv/images/a.tar")
    failed = events.restore_event(("example.test/a:1",), False, "pull", "over the disk\nbudget")
    assert (restored.type, restored.reason, restored.message) == (
        "Normal", "WantedImageRestored", "restored example.test/a:1 (import /srv/images/a.tar)")
    assert (failed.type, failed.reason, failed.message) == (
        "Warning", "WantedImageNotRestored", "could not restore example.test/a:1: over the disk budget")

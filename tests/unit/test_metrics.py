"""Metrics without an engine: the figures from rows and results, the watcher's health, the
exposition (parsed back with prometheus_client's own parser), the textfile write and the HTTP
endpoint on loopback. The real watcher, containerd and Prometheus are in
tests/integration/test_metrics.py."""

from __future__ import annotations

import gzip
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pinctl.backends.cri import CriImage, RuntimeVersion
from pinctl.journal import REQUEST_OUTCOMES
from pinctl.check import compare as check
from pinctl.criproxy import stats as proxystats
from pinctl.errors import EngineUnreachable, PinctlError, UsageError
from pinctl.metrics import exposition as metrics
from pinctl.metrics import serve
from pinctl.model import PIN_LABEL, ItemResult, Reason
from pinctl.node.sources import ContainerdSource, Node
from pinctl.pins.policy import Policy
from pinctl.service.monitoring import Runtime
from pinctl.watch import figures
from pinctl.watch import health as monitor

from .fakes import FakeStore
from .test_check import ID, REF, row

PIN = {PIN_LABEL: "pinned"}
PATTERN = Reason("pattern", "example.test/*", "cfg:1")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


# -- the declared metrics -------------------------------------------------------------------


def test_names_follow_prometheus_conventions() -> None:
    for spec in metrics.METRICS:
        assert re.fullmatch(r"pinctl_[a-z][a-z0-9_]*", spec.name), spec.name
        assert spec.name.endswith("_total") == (spec.kind == "counter"), spec.name
        assert spec.help and spec.help.endswith("."), spec.name
        assert not {"ref", "image", "name", "id", "digest"} & set(spec.labels), f"{spec.name}: per-image label"
        if "bytes" in spec.name or "seconds" in spec.name or "ratio" in spec.name:
            assert re.search(r"_(bytes|seconds|ratio)(_total)?$", spec.name), f"{spec.name}: unit not last"
    assert len(metrics.SPECS) == len(metrics.METRICS)


# -- figures ----------------------------------------------------------------------------------


def test_node_figures_count_images_once_and_keep_empty_namespaces() -> None:
    pinned = row("k8s.io", Reason("label", REF), PATTERN)
    pinned.pinned = True
    same_image = row("k8s.io", Reason("label", REF), PATTERN)
    same_image.ref, same_image.pinned = "example.test/app:other", True
    unlabelled = row("k8s.io", PATTERN)
    unlabelled.image_id, unlabelled.ref, unlabelled.drift = "sha256:" + "b" * 64, "example.test/b:1", "unlabelled"
    found = figures.node_figures([pinned, same_image, unlabelled], ["k8s.io", "moby"])
    assert found.images == {("k8s.io", True): 1, ("k8s.io", False): 1, ("moby", True): 0, ("moby", False): 0}
    assert found.image_bytes[("k8s.io", True)] == 10 and found.image_bytes[("k8s.io", False)] == 10
    assert found.policy_refs[("k8s.io", True)] == 2 and found.policy_refs[("k8s.io", False)] == 1
    assert found.drift[("k8s.io", "unlabelled")] == 1 and found.drift[("moby", "uncovered")] == 0


def test_a_classic_docker_image_counts_under_namespace_docker() -> None:
    found = figures.node_figures([row(None, source="docker")])
    assert found.images[("docker", False)] == 1


@pytest.mark.parametrize("rows, pinned, name, version, kind", [
    ([row("k8s.io", Reason("label", REF))], False, "containerd", "1.6.20~ds1", "labels-ignored"),
    ([row("k8s.io", Reason("label", REF))], False, "containerd", "1.7.24", "not-caught-up"),
    ([row("k8s.io"), row("moby", Reason("label", REF))], False, "containerd", "1.7.24", "wrong-namespace"),
    ([row("k8s.io", PATTERN)], False, "containerd", "1.7.24", "pattern-only"),
    ([row("k8s.io", Reason("ineffective-label", f"{REF}: x=true"))], False, "containerd", "1.7.24",
     "ineffective-label"),
    ([row(None, Reason("docker-label", "keep"), source="docker")], False, "docker", "26.1.5", "config-label-unread"),
    ([row(None, PATTERN)], False, "cri-o", "1.34.0", "pattern-only"),
    ([row(None, Reason("label", REF))], False, "cri-o", "1.34.0", "labels-ignored"),
    ([row(None, Reason("crio-config", "x*", "f:1"))], False, "cri-o", "1.34.0", "not-reloaded"),
    ([row(None)], True, "cri-o", "1.34.0", "not-reloaded"),
    ([row("k8s.io")], True, "containerd", "1.7.24", "unexplained-pin"),
    ([row("k8s.io", Reason("label", REF))], True, "containerd", "1.7.24", None),
])
def test_mismatches_are_counted_by_a_closed_set_of_causes(rows: list[Any], pinned: bool, name: str, version: str,
                                                          kind: str | None) -> None:
    result = check.check(rows, [CriImage(ID, (REF,), (), 10, pinned)], RuntimeVersion(name, version, "v1"), "unix:///x")
    counted = figures.check_figures(result)
    assert set(counted.mismatches) == set(check.MISMATCHES)
    assert {cause for cause, n in counted.mismatches.items() if n} == ({kind} if kind else set())
    assert counted.images == 1


# -- the watcher's state ----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_ready_only_while_connected_since_a_full_sync_and_the_loop_turns() -> None:
    clock = Clock()
    state = monitor.WatchState("/run/c.sock", clock=clock, wall=clock)
    assert not state.readiness().ok and "has not finished" in state.readiness().reason
    state.synced(["k8s.io"])
    assert state.readiness().ok and state.liveness().ok
    state.lost(EngineUnreachable("no socket at /run/c.sock\n(is it running?)"), monitor.SYNC_UNREACHABLE)
    verdict = state.readiness()
    assert not verdict.ok and verdict.reason == "not connected to containerd at /run/c.sock: no socket at " \
                                               "/run/c.sock (is it running?)"
    assert state.liveness().ok
    state.synced(["k8s.io"])
    assert state.readiness().ok and state.reconnects == 1 and state.full_syncs == 2
    clock.now += monitor.LIVENESS_SECONDS + 1
    assert not state.liveness().ok and not state.readiness().ok
    assert "has not turned for 61 s" in state.liveness().reason


def test_results_and_errors_are_counted_by_kind() -> None:
    state = monitor.WatchState("/x")
    state.synced(["k8s.io", "moby"])
    state.counted([ItemResult("k8s.io", "a", "pinned"), ItemResult("k8s.io", "b", "pinned"),
                   ItemResult("moby", "c", "pruned"), ItemResult("k8s.io", "d", "failed", "refused"),
                   ItemResult("k8s.io", "e", "changed-under-us"), ItemResult("k8s.io", "f", "already-pinned")])
    state.reloaded(ok=False)
    text = metrics.text_of(metrics.watch_families(state))
    got = samples(text)
    assert got[("pinctl_labels_written_total", (("namespace", "k8s.io"),))] == 2
    assert got[("pinctl_labels_written_total", (("namespace", "moby"),))] == 0
    assert got[("pinctl_labels_removed_total", (("namespace", "moby"),))] == 1
    errors = {labels[0][1]: value for (name, labels), value in got.items() if name == "pinctl_sync_errors_total"}
    assert errors == {"unreachable": 0, "engine": 0, "stream-ended": 0, "write-failed": 1, "changed-under-us": 1,
                      "config-reload": 1}
    assert got[("pinctl_config_reloads_total", (("result", "failed"),))] == 1
    assert got[("pinctl_config_reloads_total", (("result", "ok"),))] == 0
    assert got[("pinctl_config_last_reload_successful", ())] == 0
    state.reloaded(ok=True)
    assert samples(metrics.text_of(metrics.watch_families(state)))[("pinctl_config_last_reload_successful", ())] == 1
    assert got[("pinctl_ready", ())] == 1 and got[("pinctl_event_stream_connected", ())] == 1


# -- the periodic check -----------------------------------------------------------------------


class Sources:
    def __init__(self, node: Node | Exception, runtime: Exception) -> None:
        self.node, self.runtime = node, runtime
        self.policy = Policy()
        self.label_rules: list[str] = []

    def open_node(self) -> Node:
        if isinstance(self.node, Exception):
            raise self.node
        return self.node

    def open_runtime(self) -> Any:
        raise self.runtime

    def gc_settings(self) -> Any:
        raise AssertionError("not reached without a runtime")


def test_a_part_that_cannot_be_read_is_left_out_and_counted() -> None:
    store = FakeStore()
    store.add("k8s.io", "example.test/app:1", "a", PIN)
    logged: list[tuple[str, str]] = []
    sources = Sources(Node([ContainerdSource(store, ["k8s.io"])]), EngineUnreachable("no CRI runtime answers"))
    checker = monitor.Checker(lambda: sources, 60, lambda level, msg, **_: logged.append((level, msg)))
    found = checker.round()
    assert found.node is not None and found.node.images[("k8s.io", True)] == 1
    assert found.check is None and found.gc is None and found.runtime is None
    assert checker.errors["cri-unreachable"] == 1 and store.closed == 1
    checker.latest = found
    checker.round()
    assert checker.errors["cri-unreachable"] == 2 and len(logged) == 1, "the same error is logged once"
    sources.node = EngineUnreachable("containerd is gone")
    assert checker.round().node is None and checker.errors["containerd"] == 1
    text = metrics.text_of(metrics.figure_families(found))
    assert "pinctl_images{" in text and "pinctl_cri_mismatches" not in text and "pinctl_gc_at_risk" not in text


class CountingChecker(monitor.Checker):
    """A Checker whose rounds only count: when they run is what is tested."""

    def __init__(self, interval: float) -> None:
        super().__init__(lambda: Sources(Node([]), EngineUnreachable("unused")), interval)
        self.began: list[float] = []
        self.ran = threading.Condition()

    def round(self) -> figures.Figures:
        with self.ran:
            self.began.append(time.monotonic())
            self.ran.notify_all()
        return figures.Figures()

    def wait_rounds(self, count: int, timeout: float = 30.0) -> bool:
        with self.ran:
            return self.ran.wait_for(lambda: len(self.began) >= count, timeout)


def test_a_change_brings_the_next_check_forward_but_not_too_often(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor, "SETTLE_S", 0.05)
    monkeypatch.setattr(monitor, "EARLIEST_FRACTION", 0.0)
    checker = CountingChecker(interval=3600)
    state = monitor.WatchState("/run/c.sock")
    state.on_change = checker.soon
    checker.start()
    try:
        assert checker.wait_rounds(1), "the first round runs at start"
        # Nothing written: no early round asked for.
        state.counted([ItemResult("k8s.io", "a", "already-pinned")])
        assert checker._early_due is None
        state.counted([ItemResult("k8s.io", "b", "pinned")])
        assert checker.wait_rounds(2), "a pin brings the next round forward from an hour away"
        state.reloaded(True)
        assert checker.wait_rounds(3), "so does a reload, later"
        # A quarter of the interval after the last round at the earliest: not within the hour's quarter.
        monkeypatch.setattr(monitor, "EARLIEST_FRACTION", 0.25)
        state.counted([ItemResult("k8s.io", "c", "pruned")])
        assert checker._early_due is not None and checker._early_due >= checker.began[-1] + 900 - 1
        assert not checker.wait_rounds(4, timeout=0.5)
    finally:
        checker.stop()


def test_stop_ends_the_wait_for_the_next_check() -> None:
    checker = CountingChecker(interval=3600)
    checker.start()
    assert checker.wait_rounds(1)
    checker.stop()
    assert checker._thread is not None
    checker._thread.join(10)
    assert not checker._thread.is_alive()


# -- addresses, the HTTP endpoint, textfiles -----------------------------------------------------


@pytest.mark.parametrize("text, parsed", [
    ("127.0.0.1:9736", ("127.0.0.1", 9736)), (":9736", ("", 9736)), ("[::1]:80", ("::1", 80)),
    ("localhost:65535", ("localhost", 65535)),
])
def test_addresses(text: str, parsed: tuple[str, int]) -> None:
    assert serve.parse_address(text) == parsed


@pytest.mark.parametrize("text, why", [
    ("127.0.0.1", "no port"), ("127.0.0.1:0", "'0' is not a port"), ("127.0.0.1:99999", "'99999' is not a port"),
    ("::1:80", "IPv6 address goes in brackets"), ("[]:80", "brackets are for an IPv6"), ("a b:1", "is not a host"),
    ("127.0.0.1:http", "'http' is not a port"),
])
def test_malformed_addresses(text: str, why: str) -> None:
    with pytest.raises(UsageError) as info:
        serve.parse_address(text, "/etc/pinctl/config.toml:3")
    message = str(info.value)
    assert why in message and "/etc/pinctl/config.toml:3" in message and "\n" not in message
    assert info.value.exit_code == 2


@pytest.fixture
def server() -> Iterator[tuple[serve.MetricsServer, monitor.WatchState]]:
    state = monitor.WatchState("/run/c.sock")
    served = serve.MetricsServer(f"127.0.0.1:{free_port()}", "flag",
                                   metrics.watcher_registry(state, None), state.liveness, state.readiness)
    served.start()
    yield served, state
    served.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_health_endpoints_answer_with_one_line(server: tuple[serve.MetricsServer, monitor.WatchState]) -> None:
    served, state = server
    code, body = get(served.port, "/readyz")
    assert code == 503 and body.count("\n") == 1 and body.startswith("not ok: the first full sync")
    state.synced(["k8s.io"])
    assert get(served.port, "/readyz")[0] == 200 and get(served.port, "/healthz")[0] == 200
    code, text = get(served.port, "/metrics")
    assert code == 200 and samples(text)[("pinctl_ready", ())] == 1
    assert get(served.port, "/nothing")[0] == 404


def test_metrics_are_gzipped_only_for_a_client_that_asks(server: tuple[serve.MetricsServer, monitor.WatchState]) -> None:
    served, state = server
    state.synced(["k8s.io"])
    url = f"http://127.0.0.1:{served.port}/metrics"
    asked = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(asked, timeout=5) as reply:
        assert reply.headers["Content-Encoding"] == "gzip"
        wire = reply.read()
        assert int(reply.headers["Content-Length"]) == len(wire)
    plain = get(served.port, "/metrics")[1]
    # The same series (an age moves between two scrapes; the names and labels do not).
    assert samples(gzip.decompress(wire).decode()).keys() == samples(plain).keys()
    assert len(wire) < len(plain.encode()) / 2
    with urllib.request.urlopen(url, timeout=5) as reply:
        assert reply.headers["Content-Encoding"] is None


def test_an_address_in_use_is_a_usage_error(server: tuple[serve.MetricsServer, monitor.WatchState]) -> None:
    served, state = server
    with pytest.raises(UsageError) as info:
        serve.MetricsServer(f"127.0.0.1:{served.port}", "flag", metrics.watcher_registry(state, None),
                              state.liveness, state.readiness)
    assert "already in use" in str(info.value)


def test_stop_does_not_wait_for_a_client_still_sending(server: tuple[serve.MetricsServer, monitor.WatchState]) -> None:
    """A request whose headers never end keeps a handler thread reading (each byte starts its
    10 s timeout again): stop() returns while that client still sends, so SIGTERM is not held."""
    served, _state = server
    client = socket.create_connection(("127.0.0.1", served.port), timeout=30)
    client.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
    sending = threading.Event()
    sending.set()

    def drip() -> None:
        while sending.is_set():
            try:
                client.sendall(b"a")
            except OSError:
                return
            time.sleep(0.05)

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    deadline = time.monotonic() + 60
    while not any("process_request" in thread.name for thread in threading.enumerate()):
        assert time.monotonic() < deadline, "the server never took the connection"
        time.sleep(0.01)
    stopper = threading.Thread(target=served.stop, daemon=True)
    try:
        stopper.start()
        stopper.join(60)
        assert not stopper.is_alive(), "stop() waited for the client"
    finally:
        sending.clear()
        dripper.join(30)
        client.close()


def test_textfile_is_replaced_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "pinctl.prom"
    path.write_text("old\n")
    before = path.stat().st_ino
    metrics.check_textfile_target(str(path))
    metrics.write_textfile(str(path), metrics.info_families(Runtime("containerd", "1.7.24")))
    assert path.stat().st_ino != before, "renamed over, not written in place"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pinctl.prom"]
    assert samples(path.read_text())[("pinctl_info", (("runtime", "containerd"), ("runtime_version", "1.7.24"),
                                                      ("version", metrics.__version__)))] == 1
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_textfile_target_must_be_a_writable_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        metrics.check_textfile_target(str(tmp_path / "missing" / "pinctl.prom"))
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        with pytest.raises(UsageError, match="cannot write in"):
            metrics.check_textfile_target(str(locked / "pinctl.prom"))


def test_a_failed_textfile_write_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "gone" / "pinctl.prom"
    with pytest.raises(PinctlError):
        metrics.write_textfile(str(path), [])


# -- docs/monitoring.md against the code and the rules --------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def doc_table(first_header: str) -> dict[str, list[str]]:
    """A table of docs/monitoring.md by its first column (backquotes dropped)."""
    section = (ROOT / "docs" / "monitoring.md").read_text()
    rows: dict[str, list[str]] = {}
    inside = False
    for line in section.splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if cells[:1] == [first_header]:
            inside = True
        elif inside and cells and not cells[0].startswith("---"):
            rows[cells[0].strip("`")] = cells[1:]
        elif inside and not cells:
            break
    return rows


def test_the_doc_lists_every_metric_with_its_type_and_labels() -> None:
    rows = doc_table("metric")
    assert list(rows) == [spec.name for spec in metrics.METRICS]
    for spec in metrics.METRICS:
        kind, labels = rows[spec.name][0], rows[spec.name][1]
        assert kind == ("gauge" if spec.kind == "info" else spec.kind), spec.name
        names = re.sub(r":( `[a-z-]+`,?)+", "", labels)  # "`kind`: `a`, `b`" lists kind's values
        assert re.findall(r"`([a-z_]+)`", names) == list(spec.labels), (spec.name, labels)


def test_the_doc_lists_the_label_values_the_code_has() -> None:
    rows = doc_table("metric")
    values = {"pinctl_sync_errors_total": monitor.SYNC_ERRORS, "pinctl_check_errors_total": monitor.CHECK_ERRORS,
              "pinctl_cri_mismatches": check.MISMATCHES, "pinctl_drift_references": figures.DRIFTS,
              "pinctl_cri_proxy_pin_reads_total": proxystats.READ_RESULTS,
              "pinctl_cri_proxy_passed_through_total": proxystats.PASSED_THROUGH,
              "pinctl_cri_proxy_pinned_keys": proxystats.KEY_KINDS,
              "pinctl_cri_proxy_remove_requests_total": REQUEST_OUTCOMES}
    for name, wanted in values.items():
        listed = re.findall(r"`([a-z-]+)`", rows[name][1].split(":", 1)[1])
        assert listed == list(wanted), name


def test_deletions_are_counted_by_wanted_pinned_and_deleter_and_the_doc_lists_the_deleters() -> None:
    from pinctl.journal import DELETERS

    state = monitor.WatchState("/x")
    state.deleted(("pattern example.test/*",), ("label",), "kubelet")
    state.deleted(("pattern example.test/*",), ("label",), "kubelet")
    state.deleted((), (), "outside-cri")
    got = samples(metrics.text_of(metrics.watch_families(state)))
    name = "pinctl_image_deletions_total"
    assert got[(name, (("deleter", "kubelet"), ("pinned", "true"), ("wanted", "true")))] == 2
    assert got[(name, (("deleter", "outside-cri"), ("pinned", "false"), ("wanted", "false")))] == 1
    assert len([key for key in got if key[0] == name]) == 2
    listed = doc_table("metric")[name][1]
    assert re.findall(r"`([a-z-]+)`", listed.split("`deleter`:", 1)[1]) == list(DELETERS)


def test_the_doc_lists_the_alerts_as_the_rules_have_them() -> None:
    import yaml

    rule = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "monitoring" / "prometheusrule.yaml").read_text())
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r}
    rows = doc_table("alert")
    assert set(rows) == set(alerts)
    for name, (expr, duration, severity) in rows.items():
        assert expr.strip("`").replace("\\|", "|") == alerts[name]["expr"].strip(), name
        assert (duration, severity) == (alerts[name]["for"], alerts[name]["labels"]["severity"]), name


def test_policy_images_count_each_patterns_images_by_state_and_say_absent() -> None:
    from pinctl.pins import patterns

    glob, exact, missing = (patterns.parse_pattern(text, "pinctl", "cfg:1")
                            for text in ("example.test/*", "example.test/app:1", "example.test/missing:1"))
    covered = [Reason("pattern", glob.text, "cfg:1"), Reason("pattern", exact.text, "cfg:1")]
    pinned = row("k8s.io", Reason("label", REF), *covered)
    pinned.ref, pinned.pinned = "example.test/app:1", True
    digest_ref = row("k8s.io", Reason("label", REF), covered[0])  # the same image by another reference
    digest_ref.ref, digest_ref.pinned = "sha256:" + "a" * 64, False
    unpinned = row("k8s.io", covered[0])
    unpinned.image_id, unpinned.ref = "sha256:" + "b" * 64, "example.test/b:1"
    ignored = row("moby", Reason("label", "example.test/c:1"), covered[0])
    ignored.image_id, ignored.ref = "sha256:" + "c" * 64, "example.test/c:1"
    found = figures.node_figures([pinned, digest_ref, unpinned, ignored], ["k8s.io"], [glob, exact, missing])
    assert {(text, state): n for (text, _kind, state), n in found.patterns.items() if n} == {
        (glob.text, "pinned"): 1, (glob.text, "unpinned"): 1, (glob.text, "ignored"): 1,
        (exact.text, "pinned"): 1, (missing.text, "absent"): 1}
    assert len(found.patterns) == 3 * len(figures.PATTERN_STATES)
    exposed = samples(metrics.text_of(metrics.node_families(found, None)))
    key = ("pinctl_policy_images", (("kind", "exact"), ("pattern", missing.text), ("state", "absent")))
    assert exposed[key] == 1.0


def covered_row(*reasons: Reason, namespace: str | None = "k8s.io") -> Any:
    """The test image as pinctl's rows see it: a policy pattern covers it and pinctl's model calls it pinned."""
    found = row(namespace, *reasons, PATTERN)
    found.pinned = True
    return found


def cri_says(rows: list[Any], pinned: bool, name: str, version: str) -> check.CheckResult:
    return check.check(rows, [CriImage(ID, (REF,), (), 10, pinned)], RuntimeVersion(name, version, "v1"), "unix:///x")


def test_the_policys_counts_take_the_cris_word_on_what_is_kept() -> None:
    """CRI-O's files (pinctl's drop-in) pin the image, its CRI does not: not kept, whatever the rows say."""
    rows = [covered_row(Reason("crio-pin", REF), namespace=None)]
    found = figures.node_figures(rows, [], [])
    assert (found.policy["pinned"], found.first_not_kept) == (1, ("", ""))

    judged = figures.with_cri_verdict(found, rows, cri_says(rows, False, "cri-o", "1.34.0"))
    assert (judged.policy["pinned"], judged.policy["ignored"], judged.first_not_kept) == (0, 1, (REF, "ignored"))
    # The CRI agreeing changes nothing, and an image pinctl does not want pinned is not looked at.
    assert figures.with_cri_verdict(found, rows, cri_says(rows, True, "cri-o", "1.34.0")) == found
    other = CriImage("sha256:" + "e" * 64, ("example.test/other:1",), (), 10, False)
    listed = check.check(rows, [CriImage(ID, (REF,), (), 10, True), other], RuntimeVersion("cri-o", "1.34.0", "v1"),
                         "unix:///x")
    assert figures.with_cri_verdict(found, rows, listed) is found


def test_an_image_the_cri_has_not_caught_up_with_is_not_kept_only_from_its_second_round() -> None:
    rows = [covered_row(Reason("label", REF))]
    found = figures.node_figures(rows, ["k8s.io"], [])
    lagging = cri_says(rows, False, "containerd", "1.7.24")
    assert lagging.items[0].mismatch == check.MISMATCH_NOT_CAUGHT_UP

    first = figures.with_cri_verdict(found, rows, lagging, None)
    assert first.policy["pinned"] == 1
    second = figures.with_cri_verdict(found, rows, lagging, figures.check_figures(lagging))
    assert (second.policy["pinned"], second.first_not_kept) == (0, (REF, "ignored"))
    # Caught up by the next round: kept again, though the round before had lagged.
    caught_up = cri_says(rows, True, "containerd", "1.7.24")
    assert figures.with_cri_verdict(found, rows, caught_up, figures.check_figures(lagging)).policy["pinned"] == 1


def test_the_node_condition_counts_an_image_the_cri_still_calls_unpinned_as_not_kept() -> None:
    """What the agent writes on its Node (watch.report.report_of), from the second lagging round."""
    from pinctl.watch.report import report_of

    rows = [covered_row(Reason("label", REF))]
    lagging = cri_says(rows, False, "containerd", "1.7.24")
    before = figures.check_figures(lagging)
    node = figures.with_cri_verdict(figures.node_figures(rows, ["k8s.io"], []), rows, lagging, before)
    report = report_of(figures.Figures(node=node, check=before), monitor.WatchState("/x"), "0123456789ab", "")
    assert (report.counts.pinned, report.counts.not_kept, report.first_not_kept) == (0, 1, REF)
    assert report.why_not_kept == "labelled, but the runtime's CRI does not report it pinned"

"""cri-proxy's metrics without an engine: which method names are counted as themselves, what the
forwarder counts, the proxy's health, and the exposition of its figures (parsed back with
prometheus_client's parser). The real proxy, containerd 1.6.20 and Prometheus are in
tests/integration/test_criproxy_metrics.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator

import grpc
import pytest

from pinctl.criproxy import health as proxyhealth
from pinctl.criproxy import proxy as criproxy
from pinctl.criproxy import stats as proxystats
from pinctl.criproxy.feed import PinFeed
from pinctl.errors import EngineUnreachable
from pinctl.metrics import exposition as metrics
from pinctl.metrics import serve
from pinctl.model import REASON_LABEL, REASON_PATTERN, Reason
from pinctl.pins.policy import compile_policy
from pinctl.proto import cri_pb2

from .test_criproxy import FakeNode, listing, row
from .test_metrics import free_port, get, samples

PINNED_ROWS = [row("a:1", "sha256:a", "k8s.io", Reason(REASON_LABEL, "a:1")),
               row("n:1", None, "k8s.io", Reason(REASON_PATTERN, "n:*"))]


# -- the method label ---------------------------------------------------------------------------


def test_method_labels_are_the_methods_names_and_unique() -> None:
    labels = list(proxystats.METHOD_LABELS.values())
    assert len(labels) == len(set(labels)) == len(proxystats.METHOD_LABELS)
    assert proxystats.OTHER_METHOD not in labels
    for path, label in proxystats.METHOD_LABELS.items():
        assert path.startswith("/runtime.v1.") and path.endswith("/" + label), path


def test_every_method_pinctl_knows_is_labelled_by_name() -> None:
    known = [f"/{service.full_name}/{method.name}" for service in cri_pb2.DESCRIPTOR.services_by_name.values()
             for method in service.methods]
    known += [*criproxy.STREAMING, criproxy.LIST_IMAGES, criproxy.IMAGE_STATUS, criproxy.VERSION]
    assert set(known) <= set(proxystats.METHOD_LABELS), set(known) - set(proxystats.METHOD_LABELS)


def test_error_codes_are_grpcs_codes_but_ok() -> None:
    assert set(proxystats.ERROR_CODES) == {code.name for code in grpc.StatusCode} - {"OK"}


class Details:
    def __init__(self, method: str) -> None:
        self.method = method


@pytest.fixture
def forwarder() -> Iterator[criproxy.Forwarder]:
    channel = grpc.insecure_channel("unix:///nonexistent/cri.sock")  # never dialled: nothing is called
    pins = criproxy.PinnedSet(lambda: criproxy.ProxySetup(lambda: FakeNode([]), compile_policy([])),  # type: ignore[arg-type, return-value]
                              lambda: "containerd", lambda *_a, **_k: None)
    yield criproxy.Forwarder(channel, pins, lambda *_a, **_k: None)
    channel.close()


def test_a_call_counts_under_its_method_and_a_made_up_name_under_other(forwarder: criproxy.Forwarder) -> None:
    before = dict(proxystats.STATS.calls)
    for method in (criproxy.VERSION, criproxy.LIST_IMAGES, "/runtime.v1.RuntimeService/NoSuchMethodYet",
                   "/made.up/" + "x" * 300, "/runtime.v1.RuntimeService/GetContainerEvents"):
        forwarder.handler(Details(method))
    after = proxystats.STATS.calls
    grown = {label: after[label] - before[label] for label in after if after[label] != before[label]}
    assert grown == {"Version": 1, "ListImages": 1, "other": 2, "GetContainerEvents": 1}
    assert set(after) == set(before), "a caller's name never becomes a label value"


def test_calls_counted_from_eight_threads_at_once_are_all_counted(forwarder: criproxy.Forwarder) -> None:
    """The hot path counts with a plain dict increment and no lock (proxystats' docstring says
    why that loses nothing under CPython's GIL); this fails where it would."""
    per_thread = 20_000
    before = proxystats.STATS.calls["Version"]
    details = Details(criproxy.VERSION)
    start = threading.Barrier(8)

    def hammer() -> None:
        start.wait()
        for _ in range(per_thread):
            forwarder.handler(details)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # ask for a thread switch as often as the interpreter allows
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert proxystats.STATS.calls["Version"] - before == 8 * per_thread


def test_image_answers_passed_through_are_counted_by_reason(forwarder: criproxy.Forwarder) -> None:
    stats = proxystats.STATS
    before, marked = dict(stats.passed_through), stats.images_marked
    node = FakeNode(PINNED_ROWS)
    forwarder.pins = criproxy.PinnedSet(
        lambda: criproxy.ProxySetup(lambda: node, compile_policy([])),  # type: ignore[arg-type, return-value]
        lambda: "containerd", lambda *_a, **_k: None)
    reply = listing(("sha256:a", ["a:1"], False), ("sha256:b", ["b:1"], False), ("sha256:c", ["n:1"], False))
    forwarder.pins.refresh()
    forwarder._with_pins(criproxy.LIST_IMAGES, reply)
    assert stats.images_marked - marked == 2, "sha256:a by its ID, sha256:c by its name"
    assert forwarder._with_pins(criproxy.LIST_IMAGES, b"\xff\xff") == b"\xff\xff"
    node.fail = True
    forwarder.pins.refresh()  # the set read last stays in use
    assert forwarder._with_pins(criproxy.LIST_IMAGES, reply) is not reply
    forwarder.pins = criproxy.PinnedSet(  # one that never read them: answers pass through
        lambda: criproxy.ProxySetup(lambda: node, compile_policy([])),  # type: ignore[arg-type, return-value]
        lambda: "containerd", lambda *_a, **_k: None)
    forwarder.pins.refresh()
    assert forwarder._with_pins(criproxy.LIST_IMAGES, reply) is reply
    node.fail, node.listed = False, []
    forwarder.pins.refresh()
    assert forwarder._with_pins(criproxy.LIST_IMAGES, reply) is reply  # nothing to pin: not passed through
    assert {why: stats.passed_through[why] - before[why] for why in before} == {"pins-unreadable": 1,
                                                                               "answer-unreadable": 1}
    assert stats.images_marked - marked == 4


# -- health and figures of a real (engine-less) proxy ---------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def proxy() -> Iterator[tuple[criproxy.Proxy, FakeNode, Clock]]:
    """A proxy serving a socket of its own in front of a runtime that is not there; its pins
    come from a fake node on a fake clock."""
    directory = tempfile.mkdtemp(prefix="pxs", dir="/tmp")  # a unix socket path must stay short
    node = FakeNode(PINNED_ROWS)
    clock = Clock()

    def load() -> criproxy.ProxySetup:
        return criproxy.ProxySetup(lambda: node, compile_policy([]))  # type: ignore[arg-type, return-value]

    served = criproxy.Proxy(os.path.join(directory, "cri.sock"), "/nonexistent/cri.sock", load,
                            lambda *_a, **_k: None)
    served.pins = criproxy.PinnedSet(load, lambda: "containerd", lambda *_a, **_k: None, clock=clock)
    # The feed's threads are not started (run() starts them): reads here are the test's own.
    served.feed = PinFeed(served.pins, served._publish, lambda *_a, **_k: None, 2.0, clock=clock)
    yield served, node, clock
    served.stop()
    shutil.rmtree(directory, ignore_errors=True)


def test_health_follows_the_server_the_socket_and_the_pins(proxy: tuple[criproxy.Proxy, FakeNode, Clock]) -> None:
    served, node, clock = proxy
    assert not proxyhealth.liveness(served).ok and not proxyhealth.readiness(served).ok
    served.start()  # the pins are read before the socket is served
    assert proxyhealth.liveness(served).ok and node.reads == 1
    clock.now += 7
    ready = proxyhealth.readiness(served)
    assert ready.ok and ready.reason.endswith("pins read 7 s ago, starting"), ready.reason
    node.fail = True
    served.pins.refresh()
    verdict = proxyhealth.readiness(served)
    assert not verdict.ok and verdict.reason == "cannot read the pins, image answers keep those read 7 s ago: " \
                                                "containerd is down"
    assert proxyhealth.liveness(served).ok
    node.fail = False
    served.pins.refresh()
    assert proxyhealth.readiness(served).ok
    os.unlink(served.listen)
    verdict = proxyhealth.readiness(served)
    assert not verdict.ok and "removed or replaced" in verdict.reason


def test_an_error_over_several_lines_is_one_line_in_the_reason(proxy: tuple[criproxy.Proxy, FakeNode, Clock]) -> None:
    served, _node, _clock = proxy
    served.start()
    served.pins._failed(EngineUnreachable("no socket at /run/c.sock\n(is it running?)\x1b[2J"))
    reason = proxyhealth.readiness(served).reason
    assert "\n" not in reason and "\x1b" not in reason and "/run/c.sock (is it running?)" in reason


def test_figures_and_their_exposition(proxy: tuple[criproxy.Proxy, FakeNode, Clock]) -> None:
    served, node, clock = proxy
    before = proxyhealth.proxy_figures(served, proxystats.ProxyStats())
    assert not before.ready and before.pinned_keys is None and before.pins_age is None and before.runtime is None
    served.start()  # reads the pins once
    stats = proxystats.ProxyStats()
    stats.calls["ListImages"] += 3
    stats.upstream_errors["UNAVAILABLE"] += 2
    stats.images_marked = 5
    served.guard.outcomes["refused"] += 2
    assert proxyhealth.proxy_figures(served, stats).ready
    clock.now += 3
    served.runtime = ("containerd", "1.6.20~ds1")
    node.fail = True  # not read again: a scrape reads nothing
    got = samples(metrics.text_of(metrics.info_families(proxyhealth.proxy_figures(served, stats).runtime)
                                  + metrics.proxy_families(proxyhealth.proxy_figures(served, stats))))
    assert node.reads == 1
    assert got[("pinctl_cri_proxy_calls_total", (("method", "ListImages"),))] == 3
    assert got[("pinctl_cri_proxy_calls_total", (("method", "other"),))] == 0
    assert got[("pinctl_cri_proxy_upstream_errors_total", (("code", "UNAVAILABLE"),))] == 2
    assert got[("pinctl_cri_proxy_pin_reads_total", (("result", "ok"),))] == 1
    assert got[("pinctl_cri_proxy_pin_reads_total", (("result", "failed"),))] == 0
    assert got[("pinctl_cri_proxy_passed_through_total", (("reason", "pins-unreadable"),))] == 0
    assert got[("pinctl_cri_proxy_images_marked_total", ())] == 5
    assert got[("pinctl_cri_proxy_remove_requests_total", (("outcome", "refused"),))] == 2
    assert got[("pinctl_cri_proxy_remove_requests_total", (("outcome", "forwarded"),))] == 0
    assert got[("pinctl_cri_proxy_pinned_keys", (("kind", "id"),))] == 1
    # The wanted images' references and digests: a:1 and n:1, and sha256:m-a:1 and sha256:m-n:1.
    assert got[("pinctl_cri_proxy_pinned_keys", (("kind", "name"),))] == 4
    assert got[("pinctl_cri_proxy_pins_age_seconds", ())] == 3
    assert got[("pinctl_cri_proxy_ready", ())] == 1
    assert got[("pinctl_info", (("runtime", "containerd"), ("runtime_version", "1.6.20~ds1"),
                                ("version", metrics.__version__)))] == 1
    assert got[("pinctl_config_reloads_total", (("result", "ok"),))] == 0
    assert got[("pinctl_config_last_reload_successful", ())] == 1
    declared = {spec.name for spec in metrics.METRICS if spec.group in ("proxy", "config")}
    exposed = {name.removesuffix("_total") for name, _labels in got}
    assert {name.removesuffix("_total") for name in declared} <= exposed


def test_unreadable_pins_keep_the_set_read_last_and_a_reload_drops_it(
        proxy: tuple[criproxy.Proxy, FakeNode, Clock]) -> None:
    served, node, clock = proxy
    served.start()
    node.fail = True
    served.pins.refresh()
    found = proxyhealth.proxy_figures(served)
    assert not found.ready and found.pinned_keys is not None and found.pin_reads == {"ok": 1, "failed": 1}
    served.pins.reload()  # the set held is the old config's now: a failed read drops it
    served.pins.refresh()
    found = proxyhealth.proxy_figures(served)
    assert not found.ready and found.pinned_keys is None and found.pin_reads == {"ok": 1, "failed": 2}
    text = metrics.text_of(metrics.proxy_families(found))
    assert "pinctl_cri_proxy_pinned_keys" not in text and "pinctl_cri_proxy_pins_age_seconds " in text


def test_the_endpoint_serves_the_proxys_health(proxy: tuple[criproxy.Proxy, FakeNode, Clock]) -> None:
    served, node, clock = proxy
    served.start()
    port = free_port()
    with serve.proxy_metrics(f"127.0.0.1:{port}", "flag", served, lambda *_a, **_k: None):
        assert get(port, "/readyz")[0] == 200 and get(port, "/healthz")[0] == 200
        assert get(port, "/")[1] == "pinctl cri-proxy: /metrics /healthz /readyz\n"
        node.fail = True
        served.pins.refresh()
        code, body = get(port, "/readyz")
        assert code == 503 and body.startswith("not ok: cannot read the pins") and body.count("\n") == 1
        code, text = get(port, "/metrics")
        assert code == 200 and samples(text)[("pinctl_cri_proxy_ready", ())] == 0


def test_the_proxy_and_the_cli_do_not_import_prometheus_client() -> None:
    """pinctl --help stays instant: the exposition library is imported only when metrics are served."""
    code = ("import sys, pinctl.cli; from pinctl.criproxy import health, proxy, stats; "
            "print('prometheus_client' in sys.modules)")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert found.stdout.strip() == "False", found.stderr
    assert "prometheus_client" not in subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pinctl", "cri-proxy", "--help"], capture_output=True, text=True,
        timeout=60).stderr

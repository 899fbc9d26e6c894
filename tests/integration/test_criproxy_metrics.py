"""cri-proxy's metrics for real: `pinctl cri-proxy --metrics-address` in front of containerd 1.6.20
(whose CRI ignores the pin label), Debian's Prometheus on loopback scraping it, and the values read
back through Prometheus' HTTP API as CRI calls go through the proxy, a broken config is reloaded
(and the one in use kept), the pins become unreadable (a Docker that does not answer) and readable
again. promtool lints a scrape.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import cri
from tests.harness.containerd import ContainerdDaemon
from tests.integration.pinctl_runner import assert_one_line_error
from tests.integration.test_criproxy import (  # noqa: F401 - ctd16, forwarding, proxies are fixtures
    EVENTS,
    LABELLED,
    POLICY_ONLY,
    VERSION,
    ProxyProcess,
    call_code,
    ctd16,
    forwarding,
    proxies,
    status_pinned,
)
from tests.integration.test_metrics import WAIT, Prometheus, free_port, http_get, series, tool

pytestmark = pytest.mark.integration

JOB = "cri-proxy"
PORT = free_port()
UNKNOWN_METHOD = "/runtime.v1.RuntimeService/NoSuchMethodYet"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    server = Prometheus(tmp_path_factory.mktemp("prometheus"), {JOB: PORT})
    yield server
    server.stop()


def metric(name: str, **labels: str) -> str:
    return series(name, JOB, **labels)


def pinned_ids(address: str) -> set[str]:
    return {image.id for image in cri.list_images(address) if image.pinned}


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    code, text = http_get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200, text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def wait_logged(proxy: ProxyProcess, text: str, count: int) -> None:
    deadline = time.monotonic() + WAIT
    while proxy.log.read_text().count(text) < count:
        assert time.monotonic() < deadline, proxy.log.read_text()
        time.sleep(0.05)


def test_prometheus_sees_calls_pins_and_readiness_follow_the_config(
    ctd16: ContainerdDaemon, proxies: Callable[..., ProxyProcess], prometheus: Prometheus, tmp_path: Path,
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'pinned_images = ["{POLICY_ONLY}"]\n')
    proxy = proxies(ctd16, "--config", str(config), "--metrics-address", f"127.0.0.1:{PORT}")
    base = f"http://127.0.0.1:{PORT}"
    code, body = http_get(f"{base}/readyz")
    assert code == 200 and "pins read" in body, body
    prometheus.wait(metric("pinctl_cri_proxy_ready"), lambda v: v == 1)

    # Values move with calls through the proxy, and only with those.
    marked = pinned_ids(proxy.path) - pinned_ids(ctd16.address)
    assert len(marked) >= 2, "the labelled image and the policy's, which 1.6.20 reports unpinned"
    pinned_ids(proxy.path)
    pinned_ids(ctd16.address)
    assert status_pinned(proxy.path, LABELLED) is True
    for _ in range(5):
        assert call_code(proxy.path, VERSION) == grpc.StatusCode.OK
    assert call_code(proxy.path, UNKNOWN_METHOD) == grpc.StatusCode.UNIMPLEMENTED
    calls = "pinctl_cri_proxy_calls_total"
    prometheus.wait(metric(calls, method="ListImages"), lambda v: v == 2)
    prometheus.wait(metric(calls, method="ImageStatus"), lambda v: v == 1)
    prometheus.wait(metric(calls, method="Version"), lambda v: v == 5)
    prometheus.wait(metric(calls, method="other"), lambda v: v == 1)
    assert prometheus.value(metric(calls, method="PullImage")) == 0
    prometheus.wait(metric("pinctl_cri_proxy_upstream_errors_total", code="UNIMPLEMENTED"), lambda v: v == 1)
    prometheus.wait(metric("pinctl_cri_proxy_images_marked_total"), lambda v: v == 2 * len(marked) + 1)
    assert prometheus.value(metric("pinctl_cri_proxy_pinned_keys", kind="id")) == len(marked)
    ok_reads = prometheus.value(metric("pinctl_cri_proxy_pin_reads_total", result="ok")) or 0
    assert ok_reads >= 1
    assert prometheus.value(metric("pinctl_cri_proxy_pin_reads_total", result="failed")) == 0
    assert (prometheus.value(metric("pinctl_cri_proxy_pins_age_seconds")) or -1) >= 0
    info = prometheus.query(metric("pinctl_info", runtime="containerd"))
    assert [dict(labels)["runtime_version"][:4] for labels in info] == ["1.6."], info
    lint(PORT)

    # A broken config, reloaded: logged, counted, and the policy in use stays.
    config.write_text("pinned_images = [\n")
    proxy.proc.send_signal(signal.SIGHUP)
    wait_logged(proxy, "config reload failed, keeping the previous one", 1)
    assert pinned_ids(proxy.path) - pinned_ids(ctd16.address) == marked
    assert http_get(f"{base}/readyz")[0] == 200
    prometheus.wait(metric("pinctl_config_reloads_total", result="failed"), lambda v: v == 1)
    prometheus.wait(metric("pinctl_config_last_reload_successful"), lambda v: v == 0)
    assert prometheus.value(metric("pinctl_config_reloads_total", result="ok")) == 0

    # A config that reads, naming a Docker that does not answer: the next image call cannot read
    # the pins and passes answers through.
    config.write_text(f'pinned_images = ["{POLICY_ONLY}"]\ndocker_host = "unix:///nonexistent/docker.sock"\n')
    proxy.proc.send_signal(signal.SIGHUP)
    wait_logged(proxy, "config reloaded", 1)
    assert pinned_ids(proxy.path) == pinned_ids(ctd16.address), "answers pass through as the runtime gave them"
    assert status_pinned(proxy.path, LABELLED) is False
    code, body = http_get(f"{base}/readyz")
    assert code == 503 and body.count("\n") == 1, body
    assert body.startswith("not ok: cannot read the pins, image answers pass through unchanged: ") and \
        "/nonexistent/docker.sock" in body, body
    assert http_get(f"{base}/healthz")[0] == 200
    prometheus.wait(metric("pinctl_cri_proxy_ready"), lambda v: v == 0)
    prometheus.wait(metric("pinctl_config_last_reload_successful"), lambda v: v == 1)
    prometheus.wait(metric("pinctl_cri_proxy_pin_reads_total", result="failed"), lambda v: (v or 0) >= 1)
    prometheus.wait(metric("pinctl_cri_proxy_passed_through_total", reason="pins-unreadable"),
                    lambda v: (v or 0) >= 1)
    prometheus.wait(metric("pinctl_cri_proxy_pinned_keys", kind="id"), lambda v: v is None)
    assert prometheus.value(metric("pinctl_cri_proxy_passed_through_total", reason="answer-unreadable")) == 0
    lint(PORT)

    # Fixed and reloaded: the next image call reads the pins, and the proxy is ready again.
    config.write_text(f'pinned_images = ["{POLICY_ONLY}"]\n')
    proxy.proc.send_signal(signal.SIGHUP)
    wait_logged(proxy, "config reloaded", 2)
    assert pinned_ids(proxy.path) - pinned_ids(ctd16.address) == marked
    code, body = http_get(f"{base}/readyz")
    assert code == 200 and "; pins read " in body, body
    prometheus.wait(metric("pinctl_cri_proxy_ready"), lambda v: v == 1)
    prometheus.wait(metric("pinctl_cri_proxy_pin_reads_total", result="ok"), lambda v: (v or 0) > ok_reads)
    prometheus.wait(metric("pinctl_cri_proxy_pinned_keys", kind="id"), lambda v: v == len(marked))

    assert proxy.stop() == 0
    assert http_get(f"{base}/healthz", 1)[0] == 0, "nothing answers once it stopped"


def lint(port: int) -> None:
    code, text = http_get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200
    found = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                           timeout=30)
    assert found.returncode == 0 and not found.stdout.strip() and not found.stderr.strip(), found.stdout + found.stderr


def test_a_follower_that_goes_away_is_not_a_runtime_error(containerd17: ContainerdDaemon,
                                                           proxies: Callable[..., ProxyProcess]) -> None:
    """GetContainerEvents (containerd 1.7) followed, then cancelled by the caller: one call, and
    no CANCELLED counted against the runtime."""
    port = free_port()
    proxy = proxies(containerd17, "--metrics-address", f"127.0.0.1:{port}")
    with grpc.insecure_channel(f"unix://{proxy.path}") as channel:
        follower = channel.unary_stream(EVENTS)(b"")
        time.sleep(0.5)  # following: the call is open upstream
        follower.cancel()
    key = ("pinctl_cri_proxy_calls_total", (("method", "GetContainerEvents"),))
    deadline = time.monotonic() + WAIT
    while scrape(port).get(key) != 1:
        assert time.monotonic() < deadline, scrape(port).get(key)
        time.sleep(0.1)
    errors = {labels: value for (name, labels), value in scrape(port).items()
              if name == "pinctl_cri_proxy_upstream_errors_total" and value}
    assert errors == {}, errors


def test_a_runtime_that_stops_is_counted_as_unavailable(ctd16: ContainerdDaemon,
                                                       proxies: Callable[..., ProxyProcess]) -> None:
    port = free_port()
    proxy = proxies(ctd16, "--metrics-address", f"127.0.0.1:{port}")
    unavailable = ("pinctl_cri_proxy_upstream_errors_total", (("code", "UNAVAILABLE"),))
    assert scrape(port)[unavailable] == 0
    ctd16.stop()
    try:
        assert call_code(proxy.path, VERSION) == grpc.StatusCode.UNAVAILABLE
        assert call_code(proxy.path, cri.LIST_IMAGES) == grpc.StatusCode.UNAVAILABLE
        found = scrape(port)
        assert found[unavailable] == 2
        assert found[("pinctl_cri_proxy_passed_through_total", (("reason", "pins-unreadable"),))] == 0, \
            "an image call the runtime failed never got to the pins"
        assert http_get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    finally:
        ctd16.start()
    deadline = time.monotonic() + WAIT
    while call_code(proxy.path, VERSION) != grpc.StatusCode.OK:
        assert time.monotonic() < deadline, "the proxy did not reconnect"
        time.sleep(0.1)
    assert scrape(port)[("pinctl_cri_proxy_calls_total", (("method", "Version"),))] >= 2


# -- bad input: one line, exit 2, and no socket made -------------------------------------------


def proxy_once(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], str]:
    """cri-proxy that must refuse to start; (its result, the --listen path it was given)."""
    directory = tempfile.mkdtemp(prefix="pxm", dir="/tmp")
    listen = os.path.join(directory, "cri.sock")
    full = {**os.environ, "CONTAINERD_ADDRESS": "/nonexistent/containerd.sock", **(env or {})}
    try:
        result = subprocess.run([sys.executable, "-m", "pinctl", "cri-proxy", "--listen", listen, "-r",
                                 "unix:///nonexistent/cri.sock", *args], capture_output=True, text=True, env=full,
                                timeout=30)
        assert not os.path.exists(listen), "the socket was made before the metrics address was checked"
    finally:
        os.rmdir(directory)
    return result, listen


def test_an_address_in_use_is_one_line_and_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        result, _ = proxy_once("--metrics-address", address)
        assert_one_line_error(result, 2, address, "already in use", "--metrics-address")


@pytest.mark.parametrize("address, why", [
    ("127.0.0.1", "no port"), ("127.0.0.1:0", "not a port"), ("::1:9737", "in brackets"),
    ("no such host.invalid:9737", "is not a host"),
])
def test_a_malformed_address_is_one_line_and_exit_2(address: str, why: str) -> None:
    result, _ = proxy_once("--metrics-address", address)
    assert_one_line_error(result, 2, why, "HOST:PORT")


def test_a_malformed_address_from_the_environment_names_it() -> None:
    result, _ = proxy_once(env={"PINCTL_METRICS_ADDRESS": "localhost"})
    assert_one_line_error(result, 2, "PINCTL_METRICS_ADDRESS", "no port")

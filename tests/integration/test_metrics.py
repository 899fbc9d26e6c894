"""Metrics for real: Debian's Prometheus on loopback scrapes `pinctl sync --watch --metrics-address`
against real containerd daemons, and the test reads what Prometheus stored through its HTTP API.
promtool lints a scrape and the textfiles of check and gc plan; /readyz follows containerd going
away and coming back; a scrape is answered during a burst of 1,000 image events.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import engine_unavailable
from tests.harness import images
from tests.harness.containerd import ContainerdDaemon
from tests.integration.conftest import one_engine
from tests.integration.pinctl_runner import assert_one_line_error, pinctl
from tests.integration.test_watch import WatchProcess, labelled_within, load, watchers

POLICY = 'pinned_images = ["example.test/keep/*", "example.test/bench-*"]\n'
SCRAPE_SECONDS = 1
CHECK_SECONDS = "1"
WAIT = 60.0  # Prometheus sees a change within a scrape or two; this only ends a hung test


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        engine_unavailable(f"{name} is not installed (apt-get install prometheus; see scripts/test-packages.txt)")
    return found


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body); status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except (urllib.error.URLError, OSError) as err:
        return 0, str(err)


class Prometheus:
    """Debian's prometheus, on loopback, with a private data directory, scraping the watchers'
    ports every second."""

    def __init__(self, work: Path, targets: dict[str, int]) -> None:
        self.port = free_port()
        scrape = [{"job_name": job, "scrape_interval": f"{SCRAPE_SECONDS}s", "scrape_timeout": f"{SCRAPE_SECONDS}s",
                   "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]} for job, port in targets.items()]
        config = work / "prometheus.yml"
        config.write_text(json.dumps({"global": {"evaluation_interval": "1s"}, "scrape_configs": scrape}))
        self.log = work / "prometheus.log"
        self.proc = subprocess.Popen(
            [tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.monotonic() + 30
        while http_get(f"http://127.0.0.1:{self.port}/-/ready", 1)[0] != 200:
            assert self.proc.poll() is None, f"prometheus exited: {self.log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, self.log.read_text()[-2000:]
            time.sleep(0.2)

    def query(self, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
        """The instant vector an expression gives now: labels -> value."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        code, body = http_get(url)
        assert code == 200, body
        result = json.loads(body)["data"]["result"]
        return {tuple(sorted(item["metric"].items())): float(item["value"][1]) for item in result}

    def value(self, expr: str) -> float | None:
        found = self.query(expr)
        assert len(found) <= 1, f"{expr} gives {len(found)} series"
        return next(iter(found.values()), None)

    def wait(self, expr: str, wanted: Callable[[float | None], bool], timeout: float = WAIT) -> float | None:
        deadline = time.monotonic() + timeout
        while True:
            seen = self.value(expr)
            if wanted(seen):
                return seen
            assert time.monotonic() < deadline, f"{expr} is {seen} after {timeout}s"
            time.sleep(0.25)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


PORTS = {"ctd17": free_port(), "ctd16": free_port()}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    server = Prometheus(tmp_path_factory.mktemp("prometheus"), PORTS)
    yield server
    server.stop()


@pytest.fixture
def watcher(tmp_path: Path) -> Iterator[Callable[[ContainerdDaemon, str], WatchProcess]]:
    for start in watchers(tmp_path):
        yield lambda daemon, job: start(daemon, POLICY, "--metrics-address", f"127.0.0.1:{PORTS[job]}",
                                        "--check-interval", CHECK_SECONDS, patient=True)


def series(name: str, job: str, **labels: str) -> str:
    return f'{name}{{{",".join([f"job={job!r}", *(f"{k}={v!r}" for k, v in labels.items())])}}}'.replace("'", '"')


def images_in(job: str, pinned: bool) -> str:
    return series("pinctl_images", job, namespace="k8s.io", pinned="true" if pinned else "false")


@one_engine  # the watcher on 2.1, restarts included, is test_watch's; the metrics are pinctl's
def test_prometheus_sees_pins_come_and_go_and_readiness_follow_containerd(
    daemon: ContainerdDaemon, prometheus: Prometheus, watcher: Callable[[ContainerdDaemon, str], WatchProcess],
    tmp_path: Path,
) -> None:
    job, port = "ctd17", PORTS["ctd17"]
    proc = watcher(daemon, job)
    prometheus.wait(series("pinctl_ready", job), lambda v: v == 1)
    pinned = prometheus.wait(images_in(job, True), lambda v: v is not None)
    assert pinned is not None and prometheus.value(images_in(job, False)) == 0
    assert prometheus.value(series("pinctl_info", job, runtime="containerd")) == 1

    load(daemon, tmp_path, images.recipe("example.test/keep/a:1", seed="m1"), images.recipe("example.test/free:1", seed="m2"))
    labelled_within(daemon, "example.test/keep/a:1")
    prometheus.wait(series("pinctl_labels_written_total", job, namespace="k8s.io"), lambda v: v == 1)
    prometheus.wait(images_in(job, True), lambda v: v == pinned + 1)
    prometheus.wait(images_in(job, False), lambda v: v == 1)
    uncovered = series("pinctl_drift_references", job, namespace="k8s.io", drift="uncovered")
    drift = prometheus.value(uncovered) or 0
    assert pinctl(daemon, "pin", "example.test/free:1").returncode == 0
    prometheus.wait(images_in(job, True), lambda v: v == pinned + 2)
    prometheus.wait(uncovered, lambda v: (v or 0) > drift)  # pinned by hand: labelled, no pattern covers it
    assert pinctl(daemon, "unpin", "example.test/free:1").returncode == 0
    prometheus.wait(images_in(job, True), lambda v: v == pinned + 1)
    prometheus.wait(images_in(job, False), lambda v: v == 1)

    check_lint(port, tmp_path)
    burst_is_scraped(daemon, prometheus, port, tmp_path)
    readiness_follows_containerd(daemon, proc, prometheus, port)
    # The endpoint must not hold up SIGTERM: a client keeps one of its threads reading a request
    # that never ends, and the watcher exits while that client still writes (the order proves it;
    # terminate's deadline only ends a hang). The check thread's wait: tests/unit/test_metrics.py.
    with SlowClient(port) as client:
        code, _ = proc.terminate()
        assert code == 0 and client.writing_when_stopped(), "the endpoint held up SIGTERM"
    assert http_get(f"http://127.0.0.1:{port}/healthz", 1)[0] == 0, "nothing answers once it stopped"


class SlowClient:
    """A request to /metrics whose header line never ends: a byte now and then, so the server's
    handler thread stays inside it (its 10 s read timeout starts again with each byte)."""

    def __init__(self, port: int) -> None:
        self.conn = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        self.stop = threading.Event()
        self.failed_at: list[BaseException] = []
        self.thread = threading.Thread(target=self._drip, daemon=True)
        self.thread.start()

    def _drip(self) -> None:
        try:
            while not self.stop.wait(0.2):
                self.conn.sendall(b"a")
        except OSError as err:  # the server went away
            self.failed_at.append(err)

    def writing_when_stopped(self) -> bool:
        """Whether the client was still dripping (not given up) when the watcher had exited."""
        return self.thread.is_alive() or bool(self.failed_at)

    def __enter__(self) -> SlowClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(30)
        self.conn.close()


def check_lint(port: int, tmp_path: Path) -> None:
    code, text = http_get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200
    lint = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=30)
    assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), lint.stdout + lint.stderr


def counted(body: str, name: str) -> float:
    """A counter in a scrape's body, summed over its series."""
    return sum(sample.value for family in text_string_to_metric_families(body)
               for sample in family.samples if sample.name == name)


def burst_is_scraped(daemon: ContainerdDaemon, prometheus: Prometheus, port: int, tmp_path: Path) -> None:
    """1,000 image creations while /metrics is asked every 0.2 s: every scrape is answered, and
    some while the burst's events still arrive (by what they count, not how long they took)."""
    answers: list[tuple[int, float]] = []
    done = threading.Event()

    def scrape() -> None:
        while not done.is_set():
            code, body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=60)
            if code != 200:
                answers.append((code, False))
            else:  # the burst's events had begun, its pins were not all written
                labels = counted(body, "pinctl_labels_written_total")
                answers.append((code, counted(body, "pinctl_image_events_total") > events_before and labels < 1001))
            time.sleep(0.2)

    code, body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=60)
    assert code == 200, body
    events_before = counted(body, "pinctl_image_events_total")
    archive = tmp_path / "burst.tar"
    images.build_archive(archive, images.numbered_recipes(1000))
    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        # A deadline that ends a hang only: with both cores busy, this import took over 120 s here.
        daemon.ctr("images", "import", "--no-unpack", "--all-platforms", str(archive), timeout=900)
        prometheus.wait(series("pinctl_labels_written_total", "ctd17", namespace="k8s.io"), lambda v: v == 1001,
                        timeout=300)
    finally:
        done.set()
        scraper.join()
    assert len(answers) >= 3 and all(code == 200 for code, _ in answers), answers
    assert any(mid_burst for _, mid_burst in answers), "no scrape answered while the burst's events came in"
    assert (prometheus.value(series("pinctl_image_events_total", "ctd17")) or 0) - events_before >= 1000


def readiness_follows_containerd(daemon: ContainerdDaemon, proc: WatchProcess, prometheus: Prometheus,
                                 port: int) -> None:
    base = f"http://127.0.0.1:{port}"
    assert http_get(f"{base}/readyz")[0] == 200
    daemon.stop()
    deadline = time.monotonic() + WAIT
    while (ready := http_get(f"{base}/readyz"))[0] != 503:
        assert time.monotonic() < deadline, ready
        time.sleep(0.1)
    code, body = ready
    assert body.count("\n") == 1 and body.startswith("not ok: ") and "containerd" in body, body
    assert http_get(f"{base}/healthz")[0] == 200
    prometheus.wait(series("pinctl_ready", "ctd17"), lambda v: v == 0)
    prometheus.wait(series("pinctl_sync_errors_total", "ctd17", kind="unreachable"), lambda v: (v or 0) >= 1)
    assert http_get(f"{base}/healthz")[0] == 200
    daemon.start()
    deadline = time.monotonic() + WAIT
    while http_get(f"{base}/readyz")[0] != 200:
        assert time.monotonic() < deadline and proc.proc.poll() is None, proc.log_path.read_text()[-2000:]
        time.sleep(0.1)
    prometheus.wait(series("pinctl_reconnects_total", "ctd17"), lambda v: v == 1)


def test_a_label_the_runtime_ignores_shows_as_a_mismatch_and_a_risk(
    containerd16: ContainerdDaemon, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
    prometheus: Prometheus, watcher: Callable[[ContainerdDaemon, str], WatchProcess], tmp_path: Path,
) -> None:
    """containerd 1.6.20's CRI reports no pins: a pinned label there is a mismatch, and the image
    is at risk of GC."""
    daemon = clean_k8s_io(containerd16)
    job = "ctd16"
    mismatch = series("pinctl_cri_mismatches", job, cause="labels-ignored")
    watcher(daemon, job)
    prometheus.wait(mismatch, lambda v: v is not None)
    before = prometheus.value(mismatch) or 0
    at_risk = prometheus.value(series("pinctl_gc_at_risk_images", job)) or 0
    load(daemon, tmp_path, images.recipe("example.test/keep/sixteen:1", seed="m16"))
    labelled_within(daemon, "example.test/keep/sixteen:1")
    prometheus.wait(mismatch, lambda v: v == before + 1)
    prometheus.wait(series("pinctl_gc_at_risk_images", job), lambda v: v == at_risk + 1)
    info = prometheus.query(series("pinctl_info", job))
    assert any(dict(labels)["runtime_version"].startswith("1.6.") for labels in info), info
    assert (prometheus.value(series("pinctl_image_fs_capacity_bytes", job)) or 0) > 0


# -- textfiles -------------------------------------------------------------------------------


def families_of(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    return {family.name: {tuple(sorted(s.labels.items())): s.value for s in family.samples}
            for family in text_string_to_metric_families(text)}


def test_textfiles_are_written_whole_and_lint_clean(
    containerd16: ContainerdDaemon, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon], tmp_path: Path,
) -> None:
    daemon = clean_k8s_io(containerd16)
    load(daemon, tmp_path, images.recipe("example.test/keep/text:1", seed="t16"))
    daemon.label_image("example.test/keep/text:1", {"io.cri-containerd.pinned": "pinned"})
    collector = tmp_path / "textfile"
    collector.mkdir()
    check_file, gc_file = collector / "pinctl-check.prom", collector / "pinctl-gc.prom"
    check_file.write_text("# an older run\n")
    reads: list[str] = []
    done = threading.Event()

    def read_while_written() -> None:
        while not done.is_set():
            reads.append(check_file.read_text())

    reader = threading.Thread(target=read_while_written)
    reader.start()
    try:
        for _ in range(3):
            result = pinctl(daemon, "check", "--textfile", str(check_file))
            assert result.returncode == 1, result.stderr  # the runtime disagrees: check's own verdict
    finally:
        done.set()
        reader.join()
    new = [text for text in reads if text != "# an older run\n"]
    assert new and all(text.endswith("\n") and "pinctl_cri_mismatches{" in text for text in new), "a half file was read"
    check = families_of(check_file.read_text())
    # Both wanted images go unpinned on 1.6.20: the labelled one and the sandbox image.
    assert check["pinctl_cri_mismatches"][(("cause", "labels-ignored"),)] == 2
    assert check["pinctl_images"][(("namespace", "k8s.io"), ("pinned", "false"))] == 2
    assert check["pinctl_cri_images"][()] == 2

    result = pinctl(daemon, "gc", "plan", "--textfile", str(gc_file))
    gc = families_of(gc_file.read_text())
    assert gc["pinctl_gc_at_risk_images"][()] == 2 and gc["pinctl_image_fs_capacity_bytes"][()] > 0
    # gc plan's own verdict (exit 1: a wanted image goes at the next run) agrees with the figure.
    assert result.returncode == (1 if gc["pinctl_gc_at_risk_deleted_images"][()] else 0), result.stderr
    assert not set(check) & set(gc), "node_exporter refuses a series two files give"
    assert sorted(p.name for p in collector.iterdir()) == ["pinctl-check.prom", "pinctl-gc.prom"]
    for path in (check_file, gc_file):
        lint = subprocess.run([tool("promtool"), "check", "metrics"], stdin=path.open(), capture_output=True,
                              text=True, timeout=30)
        assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr


# -- bad input: one line, exit 2 -----------------------------------------------------------------


def watch_once(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """sync --watch that must refuse to start (the address is bound before containerd is asked)."""
    full = {**os.environ, "CONTAINERD_ADDRESS": "/nonexistent/containerd.sock", **(env or {})}
    full.pop("CONTAINERD_NAMESPACE", None)
    return subprocess.run([sys.executable, "-m", "pinctl", "sync", "--watch", *args], capture_output=True, text=True,
                          env=full, timeout=30)


def test_an_address_in_use_is_one_line_and_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        assert_one_line_error(watch_once("--metrics-address", address), 2, address, "already in use")


@pytest.mark.parametrize("address, why", [
    ("127.0.0.1", "no port"), ("127.0.0.1:99999", "not a port"), ("::1:9736", "in brackets"),
    ("no such host.invalid:9736", "is not a host"),
])
def test_a_malformed_address_is_one_line_and_exit_2(address: str, why: str) -> None:
    assert_one_line_error(watch_once("--metrics-address", address), 2, why, "HOST:PORT")


def test_a_malformed_address_from_the_environment_names_it() -> None:
    result = watch_once(env={"PINCTL_METRICS_ADDRESS": "localhost"})
    assert_one_line_error(result, 2, "PINCTL_METRICS_ADDRESS", "no port")


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory no one may write in, root included: a read-only tmpfs."""
    path = tmp_path / "read-only"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {mounted.stderr.strip()}")
    yield path
    subprocess.run(["umount", str(path)], check=True)


@pytest.mark.parametrize("command", [["check"], ["gc", "plan"]])
def test_a_textfile_directory_that_is_missing_or_read_only_is_one_line_and_exit_2(
    command: list[str], read_only_dir: Path, tmp_path: Path,
) -> None:
    # No runtime is needed: the directory is checked first.
    env = {"CONTAINER_RUNTIME_ENDPOINT": "unix:///nonexistent/cri.sock", "CONTAINERD_ADDRESS": "/nonexistent/c.sock"}
    missing = subprocess.run([sys.executable, "-m", "pinctl", *command, "--textfile", str(tmp_path / "no" / "x.prom")],
                             capture_output=True, text=True, env={**os.environ, **env}, timeout=30)
    assert_one_line_error(missing, 2, "does not exist", "--textfile")
    read_only = subprocess.run([sys.executable, "-m", "pinctl", *command, "--textfile", str(read_only_dir / "x.prom")],
                               capture_output=True, text=True, env={**os.environ, **env}, timeout=30)
    assert_one_line_error(read_only, 2, "cannot write in", "Read-only file system")


def test_a_kubelet_config_that_cannot_be_read_is_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "kubelet.yaml"
    result = watch_once("--metrics-address", f"127.0.0.1:{free_port()}", "--kubelet-config", str(missing))
    assert_one_line_error(result, 2, str(missing))

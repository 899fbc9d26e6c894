"""cri-proxy's pins kept current in the background (criproxy/feed.py): on containerd 1.6.20 a pin
made by `pinctl pin` shows through the proxy with no read on the call path and no periodic read
to bring it, and a killed watcher thread is noticed by /readyz; on Docker's classic store Docker's
own events do the same; on CRI-O, which sends none, the pins are polled."""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pinctl.commands.criproxy import ProxyRequest
from pinctl.config.loader import load as load_config
from pinctl.criproxy import feed as pin_feed
from pinctl.criproxy import health as proxyhealth
from pinctl.criproxy.pins import ProxySetup
from pinctl.criproxy.proxy import Proxy
from pinctl.node.sources import open_node
from pinctl.pins.policy import compile_policy
from tests.harness import cri, docker, engines, images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.cri_dockerd import CriDockerd
from tests.harness.crio import CrioDaemon
from tests.harness.criproxy_process import ProxyProcess
from tests.harness.docker import DockerDaemon
from tests.harness.engine_fixtures import go_binary
from tests.integration.pinctl_runner import pinctl
from tests.integration.test_criproxy import (PLAIN, ctd16, forwarding, pinned_by_tag, proxies,  # noqa: F401 - fixtures
                                             status_pinned, wait_for)
from tests.unit.test_metrics import free_port, get, samples

pytestmark = pytest.mark.integration

# Neither a poll nor a resync comes within a test: only an event can bring a change.
NO_PERIODIC_READS = ("--refresh", "3600", "--resync", "86400")


def test_a_pin_shows_through_the_proxy_by_its_event(ctd16: ContainerdDaemon,
                                                    proxies: Callable[..., ProxyProcess]) -> None:
    proxy = proxies(ctd16, *NO_PERIODIC_READS)
    assert pinned_by_tag(proxy.path)[PLAIN] is False
    done = pinctl(ctd16, "pin", PLAIN)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: pinned_by_tag(proxy.path)[PLAIN], "pinned by the label's event", proxy)
    assert status_pinned(proxy.path, PLAIN)
    done = pinctl(ctd16, "unpin", PLAIN)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: not status_pinned(proxy.path, PLAIN), "unpinned by the label's event", proxy)
    assert pinned_by_tag(proxy.path)[PLAIN] is False
    assert "cannot follow" not in proxy.log.read_text()


class Killed(BaseException):
    """Raised in the watcher thread from outside: nothing in it catches a BaseException."""


def kill_thread(thread: threading.Thread) -> None:
    """End a running thread the way an unexpected error in it would: an exception raised in it
    (CPython's PyThreadState_SetAsyncExc; it lands at the thread's next Python step)."""
    assert thread.ident is not None
    hit = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(Killed))
    assert hit == 1, f"no thread {thread.ident}"
    thread.join(60)
    assert not thread.is_alive(), "the thread outlived the exception raised in it"


@pytest.fixture
def served(ctd16: ContainerdDaemon, forwarding: str) -> Iterator[Proxy]:  # noqa: F811 - the fixture above
    """The proxy in this process, so that its threads can be reached; as `pinctl cri-proxy` runs it,
    with a poll every second once the events cannot bring changes."""
    directory = tempfile.mkdtemp(prefix="pxf", dir="/tmp")  # a unix socket path must stay short
    env = {"CONTAINERD_ADDRESS": ctd16.address, "PINCTL_CONTAINERD_CONFIG": str(ctd16.config_path)}
    logged: list[str] = []

    def setup() -> ProxySetup:
        cfg = load_config(environ=env)
        return ProxySetup(lambda: open_node(cfg, lambda _: None, absent_ok=True), compile_policy(cfg.patterns))

    request = ProxyRequest(os.path.join(directory, "cri.sock"), None if forwarding == "python" else forwarding,
                           refresh_seconds=1.0, resync_seconds=86400)
    proxy = Proxy(request.listen, ctd16.address, setup, lambda level, message, **_: logged.append(message),
                  relay=request.relay, refresh_seconds=request.refresh_seconds, resync_seconds=request.resync_seconds)
    # What run() does, but for the signal handlers (a thread cannot install them).
    proxy.start()
    proxy.pins.prepare()
    proxy.feed.start()
    runner = threading.Thread(target=proxy.wait, daemon=True)
    runner.start()
    try:
        yield proxy
    finally:
        proxy.stop()
        runner.join(60)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_killed_watcher_thread_is_noticed_by_readiness_and_the_pins_are_polled(
        ctd16: ContainerdDaemon, served: Proxy) -> None:
    deadline = time.monotonic() + 60
    while served.feed.state != pin_feed.FOLLOWING or not os.path.exists(served.listen):
        assert time.monotonic() < deadline, f"never followed containerd's events: {served.feed.last_error}"
        time.sleep(0.1)
    assert proxyhealth.readiness(served).ok
    watcher = next(thread for thread in threading.enumerate() if thread.name == "pin-watcher")
    kill_thread(watcher)
    verdict = proxyhealth.readiness(served)
    assert not verdict.ok and "the pin watcher thread stopped" in verdict.reason
    # Meanwhile the reader polls (every --refresh second): a pin still shows, without its event.
    done = pinctl(ctd16, "pin", PLAIN)
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 60
    while not cri.by_tag(cri.list_images(served.listen))[PLAIN].pinned:
        assert time.monotonic() < deadline, "not pinned by the poll"
        time.sleep(0.1)
    assert not proxyhealth.readiness(served).ok, "still not ready: the watcher is still gone"


# -- Docker's classic store: Docker's own events ------------------------------------------------

EARLY = "example.test/fresh-docker-early:1"
LATE = "example.test/fresh-docker-late:1"


@pytest.fixture
def classic_cri_dockerd(dockerd_classic: DockerDaemon, tmp_path: Path) -> Iterator[CriDockerd]:
    """cri-dockerd v0.4.3 before the session's classic-store dockerd, with one image in it."""
    docker.load_images_docker(dockerd_classic, tmp_path / "archives", [images.recipe(EARLY, seed=EARLY)])
    go_binary(engines.CRI_DOCKERD_OLD)
    daemon = CriDockerd(engines.CRI_DOCKERD_OLD, dockerd_classic, tmp_path / "cdd").start()
    try:
        yield daemon
    finally:
        daemon.stop()
        dockerd_classic.docker("image", "rm", "--force", EARLY, LATE, check=False)


def test_on_dockers_classic_store_a_new_tag_shows_pinned_by_dockers_event(
        classic_cri_dockerd: CriDockerd, dockerd_classic: DockerDaemon,
        proxies: Callable[..., ProxyProcess]) -> None:  # noqa: F811 - the fixture imported above
    """The policy names a tag that does not exist yet; `docker tag` makes it. With no poll and no
    resync, only Docker's image event can bring the read that pins it."""
    proxy = proxies(None, "--pinned-image", LATE, *NO_PERIODIC_READS, upstream=classic_cri_dockerd.address,
                    env={"DOCKER_HOST": dockerd_classic.host})
    assert LATE not in pinned_by_tag(proxy.path) and pinned_by_tag(proxy.path)[EARLY] is False
    dockerd_classic.docker("tag", EARLY, LATE)
    wait_for(lambda: status_pinned(proxy.path, LATE), "pinned by Docker's tag event", proxy)
    assert "not following" not in proxy.log.read_text() and "cannot follow" not in proxy.log.read_text()


# -- CRI-O: no events, a bounded poll --------------------------------------------------------------

def test_on_crio_the_pins_are_polled_every_refresh(crio: CrioDaemon, proxies: Callable[..., ProxyProcess]) -> None:  # noqa: F811
    """CRI-O sends no image events: the proxy says so and reads the pins every --refresh seconds,
    whether calls come or not (its reads are counted; this test makes no call)."""
    port = free_port()
    proxy = proxies(None, "--refresh", "1", "--metrics-address", f"127.0.0.1:{port}", upstream=crio.address)
    wait_for(lambda: "the runtime sends no image events; reading the pins every 1 s" in proxy.log.read_text(),
             "polling", proxy)

    def reads() -> float:
        return samples(get(port, "/metrics")[1]).get(("pinctl_cri_proxy_pin_reads_total", (("result", "ok"),)), 0)

    first = reads()
    wait_for(lambda: reads() >= first + 2, "two more reads with no call", proxy)
    code, body = get(port, "/readyz")
    assert code == 200 and body.rstrip().endswith("polling"), body

"""pinctl cri-proxy between CRI clients and real runtimes: containerd 1.6.20 (whose CRI ignores the
pin label) for the pins, 2.1 for the pins of a runtime that honours labels but knows no policy,
containerd 1.7 and 2.1 running real pods for everything else passing through."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from pinctl.criproxy.relay import RELAY_NAME, find_relay
from tests.conftest import engine_unavailable
from tests.harness import cri, cri_pods, images, runnable
from tests.harness.containerd import ContainerdDaemon
from tests.harness.criproxy_process import ProxyProcess
from tests.harness.pod_fixtures import PodNode
from tests.integration.pinctl_runner import assert_one_line_error, pinctl

pytestmark = pytest.mark.integration

PIN = "io.cri-containerd.pinned"
LABELLED = "example.test/px-labelled:1"
POLICY_ONLY = "example.test/px-policy:1"
PLAIN = "example.test/px-plain:1"
VERSION = "/runtime.v1.RuntimeService/Version"
EVENTS = "/runtime.v1.RuntimeService/GetContainerEvents"
LoadImages = Callable[..., list[images.ImageInfo]]


def built_relay() -> str:
    found = find_relay("auto")
    if found is None:
        engine_unavailable(f"{RELAY_NAME} is not built: run scripts/build-relay (needs Go 1.26+, /usr/local/go)")
    return found


@pytest.fixture(params=["relay", "python"])
def forwarding(request: pytest.FixtureRequest) -> str:
    """What forwards the calls: every test here runs with the compiled relay and with Python's gRPC."""
    return built_relay() if request.param == "relay" else "python"


@pytest.fixture
def proxies(forwarding: str) -> Iterator[Callable[..., ProxyProcess]]:
    yield from proxy_factory(forwarding)


@pytest.fixture
def relay_proxies() -> Iterator[Callable[..., ProxyProcess]]:
    """Proxies with the compiled relay only, for what concerns its process."""
    yield from proxy_factory(built_relay())


def proxy_factory(forwarding: str) -> Iterator[Callable[..., ProxyProcess]]:
    started: list[ProxyProcess] = []

    def start(daemon: ContainerdDaemon | None, *extra: str, upstream: str | None = None, **kwargs: object) -> ProxyProcess:
        target = upstream if upstream is not None else daemon.address if daemon is not None else ""
        proxy = ProxyProcess(daemon, target, "--relay", forwarding, *extra,
                             **kwargs)  # type: ignore[arg-type]
        started.append(proxy)
        proxy.wait_serving()
        assert f"forwarding={forwarding}" in proxy.log.read_text(), proxy.log.read_text()
        return proxy

    yield start
    for proxy in started:
        proxy.stop()


@pytest.fixture
def ctd16(containerd16: ContainerdDaemon, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
          load_images: LoadImages) -> ContainerdDaemon:
    daemon = clean_k8s_io(containerd16)
    load_images(daemon, [images.recipe(ref, seed=ref) for ref in (LABELLED, POLICY_ONLY, PLAIN)])
    daemon.label_image(LABELLED, {PIN: "pinned"})
    return daemon


def pinned_by_tag(address: str) -> dict[str, bool]:
    return {tag: image.pinned for tag, image in cri.by_tag(cri.list_images(address)).items()}


def status_pinned(address: str, ref: str) -> bool:
    found = cri_pods.image_status(address, ref)
    assert found is not None, ref
    return found.pinned


def wait_for(condition: Callable[[], bool], what: str, proxy: ProxyProcess, timeout: float = 60.0) -> None:
    """Until condition holds; the deadline only ends a test that would hang (both cores busy)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not {what} after {timeout:.0f} s: {proxy.log.read_text()}"
        time.sleep(0.1)


def call_code(address: str, method: str, request: bytes = b"") -> grpc.StatusCode:
    with grpc.insecure_channel(f"unix://{address}") as channel:
        try:
            channel.unary_unary(method)(request, timeout=10)
        except grpc.RpcError as err:
            return err.code()
    return grpc.StatusCode.OK


def test_labelled_and_policy_images_read_pinned_only_through_the_proxy(
        ctd16: ContainerdDaemon, proxies: Callable[..., ProxyProcess]) -> None:
    proxy = proxies(ctd16, "--pinned-image", POLICY_ONLY)
    direct = pinned_by_tag(ctd16.address)
    assert (direct[LABELLED], direct[POLICY_ONLY], direct[PLAIN]) == (False, False, False)
    through = pinned_by_tag(proxy.path)
    assert (through[LABELLED], through[POLICY_ONLY], through[PLAIN]) == (True, True, False)
    for ref in (LABELLED, POLICY_ONLY):
        assert status_pinned(ctd16.address, ref) is False
        assert status_pinned(proxy.path, ref) is True
    assert status_pinned(proxy.path, PLAIN) is False
    # Every other field is the runtime's own.
    strip = {image.id: (image.repo_tags, image.repo_digests, image.size) for image in cri.list_images(proxy.path)}
    assert strip == {image.id: (image.repo_tags, image.repo_digests, image.size)
                     for image in cri.list_images(ctd16.address)}


def test_on_containerd21_a_policy_only_image_reads_pinned_through_the_proxy(
        containerd21: ContainerdDaemon, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
        load_images: LoadImages, proxies: Callable[..., ProxyProcess]) -> None:
    """2.1 honours the label itself: the proxy adds only what no runtime reads, the policy."""
    daemon = clean_k8s_io(containerd21)
    load_images(daemon, [images.recipe(ref, seed=ref) for ref in (LABELLED, POLICY_ONLY, PLAIN)])
    daemon.label_image(LABELLED, {PIN: "pinned"})
    cri.wait_for(daemon.address, lambda imgs: any(LABELLED in i.repo_tags and i.pinned for i in imgs), 60)
    proxy = proxies(daemon, "--pinned-image", POLICY_ONLY)
    direct = pinned_by_tag(daemon.address)
    assert (direct[LABELLED], direct[POLICY_ONLY], direct[PLAIN]) == (True, False, False)
    through = pinned_by_tag(proxy.path)
    assert (through[LABELLED], through[POLICY_ONLY], through[PLAIN]) == (True, True, False)
    assert status_pinned(daemon.address, POLICY_ONLY) is False and status_pinned(proxy.path, POLICY_ONLY) is True
    assert status_pinned(proxy.path, PLAIN) is False
    assert through[daemon.sandbox_image] is True


STREAM_IMAGES = "/runtime.v1.ImageService/StreamImages"


def streamed_pinned(address: str) -> dict[str, bool]:
    """StreamImages (cri-api v0.37) as the kubelet's CRIListStreaming calls it: every message a
    list of images (ListImagesResponse's shape), gathered."""
    from pinctl.proto import cri_pb2

    with grpc.insecure_channel(f"unix://{address}") as channel:
        messages = list(channel.unary_stream(STREAM_IMAGES)(b"", timeout=30))
    assert messages, "StreamImages sent no message"
    return {tag: image.pinned for message in messages for image in cri_pb2.ListImagesResponse.FromString(message).images
            for tag in image.repo_tags}


def test_on_containerd24_the_streamed_image_list_carries_the_proxys_pins(
        containerd24: ContainerdDaemon, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
        load_images: LoadImages, proxies: Callable[..., ProxyProcess]) -> None:
    """containerd 2.4 serves StreamImages: through the proxy, what the policy pins reads pinned
    there as in ListImages, or a kubelet with CRIListStreaming on would lose every such pin."""
    daemon = clean_k8s_io(containerd24)
    load_images(daemon, [images.recipe(ref, seed=ref) for ref in (POLICY_ONLY, PLAIN)])
    proxy = proxies(daemon, "--pinned-image", POLICY_ONLY)
    direct = streamed_pinned(daemon.address)
    assert (direct[POLICY_ONLY], direct[PLAIN]) == (False, False)
    through = streamed_pinned(proxy.path)
    assert (through[POLICY_ONLY], through[PLAIN]) == (True, False)
    assert through == pinned_by_tag(proxy.path)  # the same story as ListImages tells


# cri-api v0.37's other streamed lists (the kubelet's CRIListStreaming calls them all): field 1 of
# each answer is the repeated list, and field 1 of each of its items the item's id.
STREAMED_LISTS = ("StreamPodSandboxes", "StreamContainers", "StreamContainerStats", "StreamPodSandboxStats",
                  "StreamPodSandboxMetrics")


def streamed_ids(address: str, method: str) -> tuple[int, list[str]]:
    """How many messages a streamed list sent, and the ids of its items (sandboxes, containers)."""
    from tests.harness.protowire import Reader

    with grpc.insecure_channel(f"unix://{address}") as channel:
        messages = list(channel.unary_stream(f"/runtime.v1.RuntimeService/{method}")(b"", timeout=30))
    return len(messages), sorted(item.text(1) for raw in messages for item in Reader(raw).messages(1))


def test_on_containerd24_every_streamed_list_passes_through_as_a_stream(
        containerd24_pods: PodNode, proxies: Callable[..., ProxyProcess]) -> None:
    """containerd 2.4.2 streams pods and containers in batches, and an empty list as no message at
    all: forwarded as a unary call that was an error ("no message"), and the kubelet, which falls
    back to the unary lists only on UNIMPLEMENTED, lost its runtime. Through the proxy each comes
    as containerd sends it: none with no pods, then the pod's sandbox and container."""
    node = containerd24_pods.reset()
    (info,) = node.load_runnable([runnable.runnable_recipe("example.test/px-stream:1")])
    proxy = proxies(node.daemon)
    try:
        for method in STREAMED_LISTS:
            assert streamed_ids(node.address, method) == (0, []), method
            assert streamed_ids(proxy.path, method) == (0, []), method
        container = node.pods().container(info.refs[0], "running")
        for method, wanted in (("StreamPodSandboxes", container.pod.id), ("StreamContainers", container.id)):
            assert streamed_ids(proxy.path, method) == streamed_ids(node.address, method) == (1, [wanted]), method
    finally:
        node.pods().cleanup()


def test_check_through_the_proxy_agrees_with_pinctl(ctd16: ContainerdDaemon,
                                                     proxies: Callable[..., ProxyProcess]) -> None:
    proxy = proxies(ctd16, "--pinned-image", POLICY_ONLY)
    direct = pinctl(ctd16, "check", "-r", f"unix://{ctd16.address}", "--pinned-image", POLICY_ONLY, "-o", "json")
    assert direct.returncode == 1, direct.stderr
    through = pinctl(ctd16, "check", "-r", f"unix://{proxy.path}", "--pinned-image", POLICY_ONLY, "-o", "json")
    assert through.returncode == 0, through.stdout
    assert json.loads(through.stdout)["agree"] is True


def test_sighup_reloads_the_policy(ctd16: ContainerdDaemon, proxies: Callable[..., ProxyProcess],
                                   tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'pinned_images = ["{POLICY_ONLY}"]\n')
    # An hour's refresh: only a reload can make PLAIN pinned before the deadline.
    proxy = proxies(ctd16, "--config", str(config), "--refresh", "3600")
    assert pinned_by_tag(proxy.path)[PLAIN] is False
    # SIGHUP with the files unchanged: the config poll sees nothing, so this reload is SIGHUP's.
    proxy.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "config reloaded" in proxy.log.read_text(), "reloaded on SIGHUP", proxy)
    assert "config changed" not in proxy.log.read_text()
    # The reload drops the pins read before it: the new policy shows at once, not after an hour.
    config.write_text(f'pinned_images = ["{POLICY_ONLY}", "{PLAIN}"]\n')
    proxy.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: pinned_by_tag(proxy.path)[PLAIN], "PLAIN pinned after the reload", proxy)


def test_unreadable_label_store_passes_answers_through(ctd16: ContainerdDaemon,
                                                        proxies: Callable[..., ProxyProcess]) -> None:
    proxy = proxies(ctd16, "--pinned-image", POLICY_ONLY, "-a", "/nonexistent/containerd.sock")
    assert pinned_by_tag(proxy.path) == pinned_by_tag(ctd16.address)
    assert status_pinned(proxy.path, LABELLED) is False
    assert "cannot read pins; answers pass through unchanged" in proxy.log.read_text()
    assert proxy.proc.poll() is None


def test_unimplemented_method_and_bad_request_keep_the_runtimes_codes(
        ctd16: ContainerdDaemon, proxies: Callable[..., ProxyProcess]) -> None:
    proxy = proxies(ctd16)
    missing = "/runtime.v1.RuntimeService/NoSuchMethodYet"
    assert call_code(ctd16.address, missing) == grpc.StatusCode.UNIMPLEMENTED
    assert call_code(proxy.path, missing) == grpc.StatusCode.UNIMPLEMENTED
    garbage = b"\xff\xff\xff"
    assert call_code(proxy.path, "/runtime.v1.ImageService/ImageStatus", garbage) == call_code(
        ctd16.address, "/runtime.v1.ImageService/ImageStatus", garbage)
    assert call_code(proxy.path, VERSION) == grpc.StatusCode.OK
    assert proxy.proc.poll() is None


def test_socket_mode_stale_and_live_sockets(ctd16: ContainerdDaemon, proxies: Callable[..., ProxyProcess]) -> None:
    stale_dir = tempfile.mkdtemp(prefix="px", dir="/tmp")
    stale = os.path.join(stale_dir, "cri.sock")
    left = socket.socket(socket.AF_UNIX)
    left.bind(stale)
    left.close()  # a socket file nothing listens on, as a crash leaves it
    proxy = proxies(ctd16, listen=stale)
    assert stat.S_IMODE(os.stat(stale).st_mode) == 0o660
    assert call_code(stale, VERSION) == grpc.StatusCode.OK
    second = pinctl(ctd16, "cri-proxy", "--listen", stale, "-r", f"unix://{ctd16.address}")
    assert_one_line_error(second, 2, stale, "in use")
    assert proxy.stop() == 0
    assert not os.path.exists(stale)
    os.rmdir(stale_dir)


def test_needs_a_runtime_endpoint(ctd16: ContainerdDaemon) -> None:
    result = pinctl(ctd16, "cri-proxy", "--listen", "/tmp/px-none.sock", env={"CONTAINER_RUNTIME_ENDPOINT": ""})
    assert_one_line_error(result, 2, "--runtime-endpoint")


def test_upstream_stopped_and_restarted_under_the_proxy(ctd16: ContainerdDaemon,
                                                        proxies: Callable[..., ProxyProcess]) -> None:
    proxy = proxies(ctd16)
    assert call_code(proxy.path, VERSION) == grpc.StatusCode.OK
    ctd16.stop()
    try:
        assert call_code(proxy.path, VERSION) == grpc.StatusCode.UNAVAILABLE
        assert call_code(proxy.path, cri.LIST_IMAGES) == grpc.StatusCode.UNAVAILABLE
    finally:
        ctd16.start()
    wait_for(lambda: call_code(proxy.path, VERSION) == grpc.StatusCode.OK, "the proxy reconnected", proxy)
    assert pinned_by_tag(proxy.path)[LABELLED] is True
    assert proxy.proc.poll() is None


def test_eight_concurrent_clients_reconnecting(ctd16: ContainerdDaemon,
                                               proxies: Callable[..., ProxyProcess]) -> None:
    """A count of calls, not a span of time: the same work however busy the machine is."""
    proxy = proxies(ctd16)
    assert call_code(proxy.path, VERSION) == grpc.StatusCode.OK
    baseline = proxy.fds()
    errors: list[str] = []
    calls = [0] * 8

    def hammer(index: int) -> None:
        for _ in range(4):
            # A new connection every 50 calls: connections come and go, as clients restart.
            with grpc.insecure_channel(f"unix://{proxy.path}") as channel:
                for _ in range(50):
                    try:
                        if calls[index] % 3 == 0:
                            channel.unary_unary(cri.LIST_IMAGES)(b"", timeout=30)
                        else:
                            channel.unary_unary(VERSION)(b"", timeout=30)
                    except grpc.RpcError as err:
                        errors.append(f"{err.code()}: {err.details()}")
                    calls[index] += 1

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert calls == [200] * 8, calls
    # The clients' connections are closed; the proxy lets go of them when it sees that.
    wait_for(lambda: proxy.fds() <= baseline + 2, f"back to {baseline} + 2 descriptors", proxy)


def test_real_pods_and_container_events_through_the_proxy(modern_pod_node: PodNode,
                                                          proxies: Callable[..., ProxyProcess]) -> None:
    (info,) = modern_pod_node.load_runnable([runnable.runnable_recipe("example.test/px-pod:1")])
    proxy = proxies(modern_pod_node.daemon)
    events: list[tuple[str, int]] = []
    with grpc.insecure_channel(f"unix://{proxy.path}") as channel:
        stream = channel.unary_stream(EVENTS)(b"")
        follower = threading.Thread(target=_follow, args=(stream, events), daemon=True)
        follower.start()
        made = modern_pod_node.pods()
        made.address = proxy.path
        # Subscribed before the container under test: shown by a probe's event coming through,
        # not assumed after a pause (the stream sends nothing until the first event).
        probe_pod, probes = made.pod(), set[str]()
        deadline = time.monotonic() + 60
        while not probes & {cid for cid, _ in events}:
            assert time.monotonic() < deadline, events
            probes.add(made.container(info.refs[0], "exited", pod=probe_pod).id)
        container = made.container(info.refs[0], "running")
        assert container.id in {c.id for c in cri_pods.list_containers(proxy.path)}
        cri_pods.stop_container(proxy.path, container.id)
        made.wait_for_state(container.id, "exited")
        cri_pods.remove_container(proxy.path, container.id)
        assert container.id not in {c.id for c in cri_pods.list_containers(proxy.path)}
        cri_pods.stop_pod_sandbox(proxy.path, container.pod.id)
        cri_pods.remove_pod_sandbox(proxy.path, container.pod.id)
        cri_pods.stop_pod_sandbox(proxy.path, probe_pod.id)
        cri_pods.remove_pod_sandbox(proxy.path, probe_pod.id)
        assert cri_pods.list_pod_sandboxes(proxy.path) == []
        # ContainerEventType: CREATED 0, STARTED 1, STOPPED 2, DELETED 3.
        deadline = time.monotonic() + 10
        while {0, 1, 2, 3} - {kind for cid, kind in events if cid == container.id}:
            assert time.monotonic() < deadline, events
            time.sleep(0.05)
        stream.cancel()
        follower.join(5)
    assert proxy.stop() == 0


def _follow(stream: Iterator[bytes], events: list[tuple[str, int]]) -> None:
    from tests.harness.protowire import Reader

    try:
        for raw in stream:
            event = Reader(raw)
            events.append((event.text(1), event.integer(2)))
    except grpc.RpcError:
        pass


# -- the compiled relay's own process ------------------------------------------------------

def relay_pid(proxy: ProxyProcess) -> int:
    children = Path(f"/proc/{proxy.proc.pid}/task/{proxy.proc.pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def test_a_crashed_relay_is_replaced(ctd16: ContainerdDaemon, relay_proxies: Callable[..., ProxyProcess]) -> None:
    proxy = relay_proxies(ctd16, "--pinned-image", POLICY_ONLY)
    first = relay_pid(proxy)
    os.kill(first, signal.SIGKILL)
    # A call answered means a relay serves (between the two there is none to look at).
    wait_for(lambda: call_code(proxy.path, VERSION) == grpc.StatusCode.OK and relay_pid(proxy) != first,
             "another relay serving", proxy)
    assert pinned_by_tag(proxy.path)[POLICY_ONLY] is True
    assert "the relay stopped on its own; starting another" in proxy.log.read_text()
    assert proxy.stop() == 0


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_the_relay_follows_pinctl_out(ctd16: ContainerdDaemon, relay_proxies: Callable[..., ProxyProcess]) -> None:
    """pinctl killed: the relay stops and removes the socket, so a new proxy can start."""
    proxy = relay_proxies(ctd16)
    relay = relay_pid(proxy)
    proxy.proc.kill()
    proxy.proc.wait(5)
    wait_for(lambda: gone(relay), "the relay gone after pinctl", proxy)
    assert not os.path.exists(proxy.path)


def test_a_relay_stopped_by_sigterm_stops_pinctl(ctd16: ContainerdDaemon,
                                                 relay_proxies: Callable[..., ProxyProcess]) -> None:
    """systemd's stop signals every process of the unit: the relay's clean exit ends pinctl too."""
    proxy = relay_proxies(ctd16)
    os.kill(relay_pid(proxy), signal.SIGTERM)
    assert proxy.proc.wait(10) == 0
    assert not os.path.exists(proxy.path)
    assert "the relay was stopped; stopping" in proxy.log.read_text()


def test_a_relay_that_is_not_one(ctd16: ContainerdDaemon, tmp_path: Path) -> None:
    missing = pinctl(ctd16, "cri-proxy", "--listen", str(tmp_path / "a.sock"), "-r", f"unix://{ctd16.address}",
                     "--relay", str(tmp_path / "nothing"))
    assert_one_line_error(missing, 2, "--relay", "not an executable file")
    failing = pinctl(ctd16, "cri-proxy", "--listen", str(tmp_path / "b.sock"), "-r", f"unix://{ctd16.address}",
                     "--relay", shutil.which("false") or "/bin/false")
    assert failing.returncode == 1, failing.stderr
    assert "did not start serving" in failing.stderr and "Traceback" not in failing.stderr
    assert not os.path.exists(tmp_path / "b.sock")


def test_a_listen_directory_that_is_missing(ctd16: ContainerdDaemon, forwarding: str, tmp_path: Path) -> None:
    result = pinctl(ctd16, "cri-proxy", "--listen", str(tmp_path / "missing" / "cri.sock"),
                    "-r", f"unix://{ctd16.address}", "--relay", forwarding)
    assert_one_line_error(result, 2, "--listen", "cannot listen there")

"""RemoveImage through pinctl cri-proxy, with crictl rmi as an operator runs it: a pinned image
is refused (FAILED_PRECONDITION, a one-line message naming the pin and the fix) and stays, an
unpinned one goes, --allow-remove-pinned lets a pinned one go, and every call is in the deletion
journal with crictl's pid and name. On containerd 1.7 and 2.4.2 with both data paths (the Go
relay and Python), and once each in front of cri-dockerd and CRI-O."""

from __future__ import annotations

import pathlib
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
import pytest

from pinctl.journal import REQUEST_FAILED, REQUEST_FORWARDED, REQUEST_REFUSED, RemoveRequest
from pinctl.journal.presence import serving
from pinctl.journal.store import Journal
from pinctl.proto import cri_pb2
from tests.harness import cri, images
from tests.harness.containerd import ContainerdDaemon
from tests.harness.cri_dockerd import CriDockerd
from tests.harness.crictl import Crictl
from tests.harness.crio import CrioDaemon
from tests.harness.crio_fixtures import CRIO_TEST_IMAGES, pull
from tests.harness.criproxy_process import ProxyProcess
from tests.integration.test_criproxy import built_relay, proxy_factory

pytestmark = pytest.mark.integration

PIN = "io.cri-containerd.pinned"
LABELLED = "example.test/rm-labelled:1"
POLICY = "example.test/rm-policy:1"
PLAIN = "example.test/rm-plain:1"
LATE = "example.test/rm-late:1"
LoadImages = Callable[..., list[images.ImageInfo]]
DEADLINE = 60.0
REMOVE = "/runtime.v1.ImageService/RemoveImage"


@pytest.fixture(params=["relay", "python"])
def proxies(request: pytest.FixtureRequest) -> Iterator[Callable[..., ProxyProcess]]:
    yield from proxy_factory(built_relay() if request.param == "relay" else "python")


@pytest.fixture(params=["containerd17", "containerd24"], ids=["containerd-1.7", "containerd-2.4.2"])
def daemon(request: pytest.FixtureRequest, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon]
           ) -> ContainerdDaemon:
    found: ContainerdDaemon = clean_k8s_io(request.getfixturevalue(request.param))
    return found


@dataclass
class Rmi:
    returncode: int
    stderr: str
    pid: int


def rmi(crictl: Crictl, ref: str) -> Rmi:
    """crictl rmi REF, keeping its pid: the journal names the caller by it."""
    proc = subprocess.Popen(crictl.argv("rmi", ref), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = proc.communicate(timeout=120)
    return Rmi(proc.returncode, stderr, proc.pid)


def requests(proxy: ProxyProcess, count: int) -> list[RemoveRequest]:
    """The journal's RemoveRequest entries, once it holds count of them (it is written after the
    call's answer, by a thread of its own)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        read = Journal(str(proxy.history)).read()
        found = [entry for entry in read.entries if isinstance(entry, RemoveRequest)]
        assert not read.problems, read.problems
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, (found, proxy.log.read_text())
        time.sleep(0.1)


def tags(address: str) -> set[str]:
    return {tag for image in cri.list_images(address) for tag in image.repo_tags}


def test_crictl_rmi_of_a_pinned_image_is_refused_and_journaled(
        daemon: ContainerdDaemon, load_images: LoadImages, crictl: pathlib.Path,
        proxies: Callable[..., ProxyProcess], tmp_path: pathlib.Path) -> None:
    infos = load_images(daemon, [images.recipe(ref, seed=ref) for ref in (LABELLED, POLICY, PLAIN)])
    ids = {info.refs[0]: info.config_digest for info in infos}
    daemon.label_image(LABELLED, {PIN: "pinned"})
    proxy = proxies(daemon, "--pinned-image", POLICY)
    # The watcher can tell it serves: the mark comes just after the socket listens.
    deadline = time.monotonic() + 60
    while serving(str(proxy.history)) is None:
        assert time.monotonic() < deadline, f"no serving mark in {proxy.history}:\n{proxy.log.read_text()}"
        time.sleep(0.1)
    client = Crictl(crictl, proxy.path, tmp_path / "crictl")

    by_ref = rmi(client, LABELLED)
    assert by_ref.returncode != 0
    assert "FailedPrecondition" in by_ref.stderr, by_ref.stderr
    assert f"cri-proxy refused to remove {LABELLED}" in by_ref.stderr
    assert f"the pin label on {LABELLED}" in by_ref.stderr and f"pinctl unpin {LABELLED}" in by_ref.stderr
    assert "--allow-remove-pinned" in by_ref.stderr
    by_id = rmi(client, ids[POLICY])  # by image ID, resolved as the runtime resolves it
    assert by_id.returncode != 0 and f"policy pattern {POLICY}" in by_id.stderr, by_id.stderr
    plain = rmi(client, PLAIN)
    assert plain.returncode == 0, plain.stderr

    assert tags(daemon.address) >= {LABELLED, POLICY} and PLAIN not in tags(daemon.address)
    entries = requests(proxy, 3)
    assert [(e.ref, e.outcome, e.image_id, e.client, e.pid) for e in entries] == [
        (LABELLED, REQUEST_REFUSED, ids[LABELLED], "crictl", by_ref.pid),
        (ids[POLICY], REQUEST_REFUSED, ids[POLICY], "crictl", by_id.pid),
        (PLAIN, REQUEST_FORWARDED, ids[PLAIN], "crictl", plain.pid)]
    assert f"policy pattern {POLICY}" in entries[1].detail
    proxy.proc.send_signal(signal.SIGTERM)
    assert proxy.proc.wait(timeout=30) == 0
    assert serving(str(proxy.history), alive_only=False) is None  # its mark went with it


def test_the_pin_is_read_again_for_each_remove(
        daemon: ContainerdDaemon, load_images: LoadImages, crictl: pathlib.Path,
        proxies: Callable[..., ProxyProcess], tmp_path: pathlib.Path) -> None:
    """A label added a moment ago defends the image; one removed a moment ago does not, though the
    proxy's image answers may still be a refresh old."""
    load_images(daemon, [images.recipe(ref, seed=ref) for ref in (LATE, LABELLED)])
    daemon.label_image(LABELLED, {PIN: "pinned"})
    proxy = proxies(daemon)
    client = Crictl(crictl, proxy.path, tmp_path / "crictl")
    assert {i.repo_tags[0]: i.pinned for i in client.images()}[LATE] is False  # the proxy's set read now
    daemon.label_image(LATE, {PIN: "pinned"})
    refused = rmi(client, LATE)
    assert refused.returncode != 0 and "refused to remove" in refused.stderr, refused.stderr
    daemon.label_image(LABELLED, {PIN: ""})
    gone = rmi(client, LABELLED)
    assert gone.returncode == 0, gone.stderr
    assert LATE in tags(daemon.address) and LABELLED not in tags(daemon.address)
    assert [e.outcome for e in requests(proxy, 2)] == [REQUEST_REFUSED, REQUEST_FORWARDED]


def test_allow_remove_pinned_lets_it_go_and_says_it_was_pinned(
        daemon: ContainerdDaemon, load_images: LoadImages, crictl: pathlib.Path,
        proxies: Callable[..., ProxyProcess], tmp_path: pathlib.Path) -> None:
    (info,) = load_images(daemon, [images.recipe(LABELLED, seed=LABELLED)])
    daemon.label_image(LABELLED, {PIN: "pinned"})
    proxy = proxies(daemon, "--allow-remove-pinned")
    client = Crictl(crictl, proxy.path, tmp_path / "crictl")
    done = rmi(client, info.config_digest)
    assert done.returncode == 0, done.stderr
    assert LABELLED not in tags(daemon.address)
    (entry,) = requests(proxy, 1)
    assert (entry.outcome, entry.image_id, entry.client) == (REQUEST_FORWARDED, info.config_digest, "crictl")
    assert "pin label" in entry.detail and "--allow-remove-pinned" in entry.detail
    # An image the runtime does not know: its own answer, journaled as it came.
    # (crictl asks ImageStatus first and stops there: the call is made as the kubelet makes it.)
    with grpc.insecure_channel(f"unix://{proxy.path}") as channel:
        request = cri_pb2.RemoveImageRequest(image=cri_pb2.ImageSpec(image="example.test/rm-never:1"))
        try:
            channel.unary_unary(REMOVE)(request.SerializeToString(), timeout=60)
            code = grpc.StatusCode.OK
        except grpc.RpcError as err:
            code = err.code()
    entries = requests(proxy, 2)
    assert (entries[1].ref, entries[1].image_id) == ("example.test/rm-never:1", "")
    assert entries[1].outcome == (REQUEST_FORWARDED if code == grpc.StatusCode.OK else REQUEST_FAILED)


def test_an_unwritable_journal_never_fails_the_call(
        containerd17: ContainerdDaemon, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
        load_images: LoadImages, crictl: pathlib.Path, proxies: Callable[..., ProxyProcess],
        tmp_path: pathlib.Path) -> None:
    daemon = clean_k8s_io(containerd17)
    load_images(daemon, [images.recipe(ref, seed=ref) for ref in (PLAIN, POLICY)])
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    proxy = proxies(daemon, "--pinned-image", POLICY, env={"PINCTL_HISTORY_DIR": str(blocker / "history")})
    client = Crictl(crictl, proxy.path, tmp_path / "crictl")
    refused = rmi(client, POLICY)
    assert refused.returncode != 0 and "refused to remove" in refused.stderr, refused.stderr
    assert rmi(client, PLAIN).returncode == 0
    assert POLICY in tags(daemon.address) and PLAIN not in tags(daemon.address)
    deadline = time.monotonic() + DEADLINE
    while "cannot write the journal" not in proxy.log.read_text():
        assert time.monotonic() < deadline, proxy.log.read_text()
        time.sleep(0.1)
    assert proxy.log.read_text().count("cannot write the journal") == 1  # one line, not one per call
    assert proxy.proc.poll() is None


DOCKER_PINNED = "example.test/rm-docker-pinned:1"
DOCKER_PLAIN = "example.test/rm-docker-plain:1"


def test_through_cri_dockerd_a_pinned_image_is_refused(
        containerd17: ContainerdDaemon, cri_dockerd_043: CriDockerd, crictl: pathlib.Path,
        docker_images: Callable[..., list[images.ImageInfo]], proxies: Callable[..., ProxyProcess],
        tmp_path: pathlib.Path) -> None:
    """Docker's images through cri-dockerd v0.4.3 (which pins none by label or policy). Its
    RemoveImage removes by image ID only (a tag answers OK and removes nothing), as the kubelet
    calls it; the proxy refuses a pinned image named either way."""
    docker_images([images.recipe(ref, seed=ref) for ref in (DOCKER_PINNED, DOCKER_PLAIN)])
    env = {"DOCKER_HOST": cri_dockerd_043.docker.host, "CONTAINERD_NAMESPACE": "moby"}
    proxy = proxies(containerd17, "--pinned-image", DOCKER_PINNED, upstream=cri_dockerd_043.address, env=env)
    client = Crictl(crictl, proxy.path, tmp_path / "crictl")
    ids = {image.repo_tags[0]: image.id for image in client.images() if image.repo_tags}
    by_tag, by_id = rmi(client, DOCKER_PINNED), rmi(client, ids[DOCKER_PINNED])
    for refused in (by_tag, by_id):
        assert refused.returncode != 0, refused.stderr
        assert "refused to remove" in refused.stderr and f"policy pattern {DOCKER_PINNED}" in refused.stderr
    removed = rmi(client, ids[DOCKER_PLAIN])
    assert removed.returncode == 0, removed.stderr
    left = tags(cri_dockerd_043.address)
    assert DOCKER_PINNED in left and DOCKER_PLAIN not in left
    entries = requests(proxy, 3)
    assert [(e.outcome, e.image_id, e.client, e.pid) for e in entries] == [
        (REQUEST_REFUSED, ids[DOCKER_PINNED], "crictl", by_tag.pid),
        (REQUEST_REFUSED, ids[DOCKER_PINNED], "crictl", by_id.pid),
        (REQUEST_FORWARDED, ids[DOCKER_PLAIN], "crictl", removed.pid)]


def test_through_crio_a_pinned_image_is_refused(crio: CrioDaemon, crio_crictl: Crictl, crictl: pathlib.Path,
                                                proxies: Callable[..., ProxyProcess], tmp_path: pathlib.Path) -> None:
    """CRI-O keeps its own pins (pinned_images); the proxy defends the policy's pins too. Only a
    refusal here: the session's CRI-O keeps its images for the other tests."""
    wanted = CRIO_TEST_IMAGES[2]
    pull(crio_crictl, [wanted])
    proxy = proxies(None, "--pinned-image", wanted, upstream=crio.address)
    client = Crictl(crictl, proxy.path, tmp_path / "crictl")
    image_id = {image.repo_tags[0]: image.id for image in crio_crictl.images() if image.repo_tags}[wanted]
    for ref in (wanted, image_id):
        refused = rmi(client, ref)
        assert refused.returncode != 0 and f"refused to remove {ref}" in refused.stderr, (
            refused.stderr + proxy.log.read_text())
        assert f"policy pattern {wanted}" in refused.stderr
    assert wanted in tags(crio.address)
    assert [(e.outcome, e.image_id, e.client) for e in requests(proxy, 2)] == [
        (REQUEST_REFUSED, image_id, "crictl")] * 2

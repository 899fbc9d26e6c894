"""sync --watch and cri-proxy as a fleet runs them: on a fresh node (containerd's root empty, no
namespace yet), after containerd comes back with a fresh root, and with the policy in a
directory shaped like a Kubernetes ConfigMap volume that changes under them, with no SIGHUP."""

from __future__ import annotations

import shutil
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pinctl.config import loader
from pinctl.errors import ConfigError
from tests.harness import cri, images
from tests.harness.configmap import ConfigMapVolume, read_only_view
from tests.harness.containerd import ContainerdDaemon
from tests.integration.conftest import one_engine
from tests.integration.pinctl_runner import pinctl
from tests.integration.test_criproxy import ProxyProcess, proxy_factory
from tests.integration.test_metrics import free_port, http_get
from tests.integration.test_watch import DEADLINE, PIN, WatchProcess, labelled_within, load

pytestmark = pytest.mark.integration

POLICY = 'pinned_images = ["example.test/fleet/*"]\n'
# A changed file is read within POLL_SECONDS + SETTLE_SECONDS (3 s); this only ends a hung test.
RELOAD_DEADLINE = 60.0


@pytest.fixture
def empty_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerdDaemon]:
    """containerd 1.7 on a root nothing was ever put in: a node that has just joined."""
    daemon = ContainerdDaemon("containerd-1.7", tmp_path_factory.mktemp("fresh-node")).start()
    assert not daemon.ctr("namespaces", "ls", "-q").stdout.split(), "a fresh root has no namespace"
    yield daemon
    daemon.stop()


class Watched:
    """A watcher with its metrics endpoint, started on a config directory of the test's."""

    def __init__(self, daemon: ContainerdDaemon, config: Path, log: Path, *extra: str, patient: bool = False) -> None:
        self.port = free_port()
        self.process = WatchProcess(daemon, config, "--metrics-address", f"127.0.0.1:{self.port}", *extra,
                                    log_path=log, patient=patient)

    def get(self, path: str) -> tuple[int, str]:
        return http_get(f"http://127.0.0.1:{self.port}{path}")

    def wait_ready(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            code, body = self.get("/readyz")
            if code == 200:
                return body
            assert self.process.proc.poll() is None, self.process.log_path.read_text()
            assert time.monotonic() < deadline, f"{code} {body}\n{self.process.log_path.read_text()}"
            time.sleep(0.05)

    def metric(self, line: str) -> bool:
        return any(found == line for found in self.get("/metrics")[1].splitlines())

    def messages(self) -> list[str]:
        return [line["msg"] for line in self.process.lines()]


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[Callable[..., Watched]]:
    started: list[Watched] = []

    def start(daemon: ContainerdDaemon, config: Path, *extra: str, patient: bool = False) -> Watched:
        found = Watched(daemon, config, tmp_path / f"watch-{len(started)}.log", *extra, patient=patient)
        started.append(found)
        return found

    yield start
    for found in started:
        if found.process.proc.poll() is None:
            found.process.proc.kill()
            found.process.proc.wait()


@pytest.fixture
def configmap(tmp_path: Path) -> Iterator[tuple[ConfigMapVolume, Path]]:
    """A ConfigMap volume on the node (the kubelet's 0777 directory) and the container's view of
    it (mounted read-only), where pinctl reads it."""
    volume = ConfigMapVolume(tmp_path / "node" / "config")
    with read_only_view(volume.root, tmp_path / "pod" / "etc-pinctl") as view:
        yield volume, view


def config_dir(tmp_path: Path, text: str = POLICY) -> Path:
    root = tmp_path / "etc-pinctl"
    root.mkdir(mode=0o755)
    (root / "config.toml").write_text(text)
    return root / "config.toml"


def first_image_pinned_from_the_stream(daemon: ContainerdDaemon, watcher: Watched, tmp_path: Path, ref: str) -> None:
    """The first image of the node creates k8s.io; the watcher pins it from the event stream,
    shown by what else could have: no second full sync (the one at start saw no k8s.io), no retry,
    and the watcher has no periodic sync on containerd."""
    load(daemon, tmp_path, images.recipe(ref, seed=ref))
    assert "k8s.io" in daemon.ctr("namespaces", "ls", "-q").stdout.split()
    labelled_within(daemon, ref, timeout=DEADLINE)
    messages = watcher.messages()
    assert messages.count("full sync") == 1 and "pinned" in messages, messages
    assert not [m for m in messages if "retrying" in m], watcher.process.log_path.read_text()


def test_a_fresh_node_with_namespace_named_is_ready_and_pins_its_first_image(
        empty_root: ContainerdDaemon, watched: Callable[..., Watched], tmp_path: Path) -> None:
    watcher = watched(empty_root, config_dir(tmp_path), "-n", "k8s.io")
    body = watcher.wait_ready()
    assert body.startswith("ok: connected to containerd"), body
    sync = next(line for line in watcher.process.lines() if line["msg"] == "full sync")
    assert sync["namespaces"] == "k8s.io" and sync["not_created_yet"] == "k8s.io", sync
    assert not empty_root.ctr("namespaces", "ls", "-q").stdout.split(), "reading a namespace does not create it"
    first_image_pinned_from_the_stream(empty_root, watcher, tmp_path, "example.test/fleet/first:1")


def test_a_fresh_node_with_the_default_namespaces_is_ready_and_pins_its_first_image(
        empty_root: ContainerdDaemon, watched: Callable[..., Watched], tmp_path: Path) -> None:
    watcher = watched(empty_root, config_dir(tmp_path))
    watcher.wait_ready()
    sync = next(line for line in watcher.process.lines() if line["msg"] == "full sync")
    assert sync["namespaces"] == "k8s.io,moby" and sync["not_created_yet"] == "k8s.io,moby", sync
    log = watcher.process.log_path.read_text()
    assert "pick one with -n" not in log, "a fresh node is not a mistake to warn about"
    first_image_pinned_from_the_stream(empty_root, watcher, tmp_path, "example.test/fleet/default:1")


def test_one_shot_commands_still_refuse_a_namespace_that_does_not_exist(empty_root: ContainerdDaemon) -> None:
    found = pinctl(empty_root, "ls", "-n", "k8s.io")
    assert found.returncode == 2 and "namespace k8s.io does not exist" in found.stderr, found.stderr


def test_containerd_back_with_a_fresh_root(daemon: ContainerdDaemon, watched: Callable[..., Watched],
                                           tmp_path: Path) -> None:
    watcher = watched(daemon, config_dir(tmp_path), "-n", "k8s.io")
    watcher.wait_ready()
    load(daemon, tmp_path, images.recipe("example.test/fleet/before:1", seed="before"))
    labelled_within(daemon, "example.test/fleet/before:1")
    daemon.stop()
    shutil.rmtree(daemon.data_dir / "root")
    shutil.rmtree(daemon.data_dir / "state", ignore_errors=True)
    watcher.process.wait_log("containerd unreachable, retrying")
    daemon.start()
    assert not daemon.ctr("namespaces", "ls", "-q").stdout.split()
    watcher.process.wait_log("full sync", count=2)
    watcher.wait_ready()
    assert not [m for m in watcher.messages() if m == "cannot sync yet, retrying"]
    load(daemon, tmp_path, images.recipe("example.test/fleet/after:1", seed="after"))
    labelled_within(daemon, "example.test/fleet/after:1")
    assert watcher.messages().count("full sync") == 2


def test_a_configmaps_directory_is_accepted_as_the_container_sees_it(
        configmap: tuple[ConfigMapVolume, Path], tmp_path: Path) -> None:
    """As root, pinctl refuses a directory others may write (StrictModes), such as the kubelet's
    0777 one on the node; mounted read-only, as in the container, nobody can change it."""
    volume, view = configmap
    volume.write({"config.toml": POLICY})
    assert (view / "config.toml").read_text() == POLICY
    assert loader.load({}, {}, config_path=str(view / "config.toml")).files == [str(view / "config.toml")]
    with pytest.raises(ConfigError, match="is writable by a user other than root"):
        loader.load({}, {}, config_path=str(volume.root / "config.toml"))
    volume.write({"config.toml": POLICY, "config.d/a.toml": POLICY})
    assert len(loader.load({}, {}, config_path=str(view / "config.toml")).files) == 2


# How the watcher reads its config again is pinctl's alone: one containerd shows it (each
# engine's labels are tested where the engine decides).
@one_engine
def test_a_configmap_update_is_applied_without_sighup(daemon: ContainerdDaemon, watched: Callable[..., Watched],
                                                      configmap: tuple[ConfigMapVolume, Path], tmp_path: Path) -> None:
    volume, view = configmap
    volume.write({"config.toml": POLICY})
    load(daemon, tmp_path, images.recipe("example.test/later/app:1", seed="later"))
    # Patient (tests/integration/test_watch.py): its stop at the end is SIGTERM's.
    watcher = watched(daemon, view / "config.toml", patient=True)
    watcher.wait_ready()
    assert PIN not in {row.ref: row.labels for row in daemon.images()}["example.test/later/app:1"]

    volume.write({"config.toml": 'pinned_images = ["example.test/later/*"]\n'})
    labelled_within(daemon, "example.test/later/app:1", timeout=RELOAD_DEADLINE)
    assert "config changed, reloading" in watcher.messages() and "config reloaded" in watcher.messages()
    assert watcher.metric('pinctl_config_reloads_total{result="ok"} 1.0')

    # Broken: logged, counted, the policy in use stays (a new covered image is still pinned).
    volume.write({"config.toml": 'pinned_images = ["a/*/b"]\n'})
    watcher.process.wait_log("config reload failed, keeping the previous one", timeout=RELOAD_DEADLINE)
    assert watcher.metric('pinctl_config_reloads_total{result="failed"} 1.0')
    assert watcher.metric("pinctl_config_last_reload_successful 0.0")
    load(daemon, tmp_path, images.recipe("example.test/later/two:1", seed="later-two"))
    labelled_within(daemon, "example.test/later/two:1")

    # Writable by others: StrictModes refuses it at the reload as at start, and the old one stays.
    data = volume.write({"config.toml": 'pinned_images = ["example.test/other/*"]\n'})
    assert (data / "config.toml").stat().st_mode & stat.S_IWOTH == 0
    (data / "config.toml").chmod(0o666)
    watcher.process.wait_log("config reload failed, keeping the previous one", count=2, timeout=RELOAD_DEADLINE)
    refused = [line for line in watcher.process.lines() if line["msg"].startswith("config reload failed")]
    assert "writable by a user other than root" in refused[-1]["error"], refused[-1]
    (data / "config.toml").chmod(0o444)
    watcher.process.wait_log("config reloaded", count=2, timeout=RELOAD_DEADLINE)
    assert watcher.metric("pinctl_config_last_reload_successful 1.0")
    assert watcher.process.terminate()[0] == 0


@one_engine
def test_a_new_dropin_is_applied_without_sighup(daemon: ContainerdDaemon, watched: Callable[..., Watched],
                                                tmp_path: Path) -> None:
    main = config_dir(tmp_path)
    load(daemon, tmp_path, images.recipe("example.test/team/app:1", seed="team"))
    watcher = watched(daemon, main)
    watcher.wait_ready()
    (main.parent / "config.d").mkdir(mode=0o755)
    (main.parent / "config.d" / "team.toml").write_text('pinned_images = ["example.test/team/*"]\n')
    labelled_within(daemon, "example.test/team/app:1", timeout=RELOAD_DEADLINE)


# -- cri-proxy ----------------------------------------------------------------------------------


@pytest.fixture
def python_proxies() -> Iterator[Callable[..., ProxyProcess]]:
    """The Python data path: the pins and the config are read by pinctl whichever forwards, and
    tests/integration/test_criproxy.py runs the relay's reloads."""
    yield from proxy_factory("python")


def cri_pinned(path: str, ref: str) -> bool:
    return bool(cri.by_tag(cri.list_images(path)).get(ref, cri.CriImage("", (), (), 0, False)).pinned)


def test_cri_proxy_on_a_fresh_node_is_ready_and_pins_the_first_image(
        empty_root: ContainerdDaemon, python_proxies: Callable[..., ProxyProcess], tmp_path: Path) -> None:
    port = free_port()
    proxy = python_proxies(empty_root, "--config", str(config_dir(tmp_path)), "-n", "k8s.io",
                           "--metrics-address", f"127.0.0.1:{port}")
    assert cri.list_images(proxy.path) == []
    code, body = http_get(f"http://127.0.0.1:{port}/readyz")
    assert code == 200 and "pins read" in body, body
    load(empty_root, tmp_path, images.recipe("example.test/fleet/proxied:1", seed="proxied"))
    cri.wait_for_refs(empty_root.address, ["example.test/fleet/proxied:1"])
    deadline = time.monotonic() + DEADLINE
    while not cri_pinned(proxy.path, "example.test/fleet/proxied:1"):
        assert time.monotonic() < deadline, proxy.log.read_text()
        time.sleep(0.1)
    assert "cannot read pins" not in proxy.log.read_text()


def test_cri_proxy_applies_a_configmap_update_and_keeps_its_policy_when_broken(
        containerd17: ContainerdDaemon, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
        python_proxies: Callable[..., ProxyProcess], configmap: tuple[ConfigMapVolume, Path],
        tmp_path: Path) -> None:
    daemon = clean_k8s_io(containerd17)
    images.load_images(daemon, tmp_path / "archives", [images.recipe("example.test/cm/app:1", seed="cm-app")])
    volume, view = configmap
    volume.write({"config.toml": 'pinned_images = ["example.test/none/*"]\n'})
    port = free_port()
    proxy = python_proxies(daemon, "--config", str(view / "config.toml"),
                           "--metrics-address", f"127.0.0.1:{port}")
    assert not cri_pinned(proxy.path, "example.test/cm/app:1")

    volume.write({"config.toml": 'pinned_images = ["example.test/cm/*"]\n'})
    deadline = time.monotonic() + RELOAD_DEADLINE
    while not cri_pinned(proxy.path, "example.test/cm/app:1"):
        assert time.monotonic() < deadline, proxy.log.read_text()
        time.sleep(0.2)

    volume.write({"config.toml": "pinned_images = [\n"})
    deadline = time.monotonic() + RELOAD_DEADLINE
    while "config reload failed, keeping the previous one" not in proxy.log.read_text():
        assert time.monotonic() < deadline, proxy.log.read_text()
        time.sleep(0.1)
    assert cri_pinned(proxy.path, "example.test/cm/app:1"), "the policy in use stays"
    code, body = http_get(f"http://127.0.0.1:{port}/readyz")
    assert code == 200, body
    text = http_get(f"http://127.0.0.1:{port}/metrics")[1]
    assert 'pinctl_config_reloads_total{result="failed"} 1.0' in text.splitlines(), text
    assert "pinctl_config_last_reload_successful 0.0" in text.splitlines(), text
    assert proxy.stop() == 0

"""sync --watch records every image deletion in the journal, on real runtimes: containerd 1.7 and
2.4.2 (ctr images rm, crictl rmi), Docker (docker rmi, both stores) and CRI-O (crictl rmi).
The deleter verdict's rules are unit-tested (tests/unit/test_watch_journal.py); here cri-proxy's
presence is a mark the test writes, as the proxy would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pinctl.journal import DELETER_OUTSIDE_CRI, DELETER_UNKNOWN, Deletion, Restore, presence
from pinctl.journal.store import Journal
from pinctl.refs import DEFAULT_DOMAIN
from tests.harness import images
from tests.harness import registry as reg
from tests.harness.containerd import ContainerdDaemon
from tests.harness.crictl import Crictl
from tests.harness.crio import CrioDaemon
from tests.harness.crio_fixtures import pull, registry_path
from tests.harness.docker import DockerDaemon, load_images_docker
from tests.harness.ports import free_port
from tests.conftest import engine_unavailable
from tests.integration.test_pull import registry  # noqa: F401 - the module's registry fixture
from tests.integration.test_watch import WatchProcess, labelled_within, load

# One containerd of each line: 1.7 and the current 2.4.2.
both_containerds = pytest.mark.parametrize("daemon", ["containerd-1.7", "containerd-2.4"], ids=["ctd17", "ctd24"],
                                           indirect=True)
KEEP = "example.test/keep/app:1"
KEEP_ALSO = "example.test/keep/app:latest"
OTHER = "example.test/other:1"
TAGGED = "example.test/tagged:1"
TAGGED_ALSO = "example.test/tagged:2"
# The recorder waits 2 s after an image's last reference went (watch.deletions.SETTLE_S): generous beyond it.
RECORDED_S = 30.0


def deletions(history: Path) -> list[Deletion]:
    return [e for e in Journal(str(history)).read().entries if isinstance(e, Deletion)]


def wait_deletions(history: Path, count: int, timeout: float = RECORDED_S) -> list[Deletion]:
    deadline = time.monotonic() + timeout
    while True:
        found = deletions(history)
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"{len(found)} deletions, not {count}: {found}"
        time.sleep(0.1)


def deletion_counts(port: int) -> dict[tuple[str, str, str], float]:
    """pinctl_image_deletions_total from the watcher's /metrics, by (wanted, pinned, deleter)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "pinctl_image_deletions_total":
                labels = sample.labels
                found[(labels["wanted"], labels["pinned"], labels["deleter"])] = sample.value
    return found


def naming(found: list[Deletion], ref: str) -> Deletion:
    """The one entry naming ref (the CRI's own record named by the image ID may be among its refs)."""
    (hit,) = [d for d in found if ref in d.refs]
    return hit


@pytest.fixture
def history_watch(daemon: ContainerdDaemon, tmp_path: Path) -> Iterator[Callable[..., WatchProcess]]:
    started: list[WatchProcess] = []

    def start(policy: str, *extra: str) -> WatchProcess:
        config = tmp_path / "config.toml"
        config.write_text(policy)
        process = WatchProcess(daemon, config, *extra, env={"PINCTL_HISTORY_DIR": str(tmp_path / "history")},
                               log_path=tmp_path / f"watch-{len(started)}.log")
        started.append(process)
        process.wait_log("full sync")
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait()


@both_containerds
def test_each_deletion_is_one_entry_with_its_image_pins_and_deleter(
        daemon: ContainerdDaemon, history_watch: Callable[..., WatchProcess], crictl: Path, tmp_path: Path) -> None:
    history = tmp_path / "history"
    port = free_port()
    proc = history_watch('pinned_images = ["example.test/keep/*"]\n', "--metrics-address", f"127.0.0.1:{port}")
    built = images.load_images(daemon, tmp_path / "archives", [
        images.recipe(KEEP, KEEP_ALSO, seed="h-keep"), images.recipe(OTHER, seed="h-other"),
        images.recipe(TAGGED, TAGGED_ALSO, seed="h-tagged")])
    keep, other, tagged = built
    labelled_within(daemon, KEEP)
    labelled_within(daemon, KEEP_ALSO)

    # An untag with ctr: the image stays, under its other name.
    daemon.ctr("images", "rm", TAGGED_ALSO)
    (untag,) = wait_deletions(history, 1)
    assert untag.refs == (TAGGED_ALSO,) and untag.image_gone is False
    assert (untag.image_id, untag.size, untag.runtime, untag.namespace) == (tagged.image_id, tagged.size,
                                                                          "containerd", "k8s.io")
    assert untag.wanted == () and untag.pinned == () and untag.deleter == DELETER_UNKNOWN
    assert "no cri-proxy" in untag.evidence

    # crictl rmi by image ID, as the kubelet removes: both references, one entry.
    Crictl(crictl, daemon.address, tmp_path / "crictl").run("rmi", keep.image_id)
    found = wait_deletions(history, 2)
    wanted = naming(found, KEEP)
    # The CRI keeps a record named by the image ID too: it goes with the rest, in the same entry.
    assert set(wanted.refs) - {KEEP, KEEP_ALSO} <= {keep.image_id}, wanted.refs
    assert (wanted.image_id, wanted.size, wanted.image_gone) == (keep.image_id, keep.size, True)
    assert wanted.wanted == ("pattern example.test/keep/*",) and wanted.pinned == ("label",)
    assert wanted.deleter == DELETER_UNKNOWN

    # A cri-proxy serving (its mark, written here) and no RemoveImage through it: outside the CRI.
    presence.mark_serving(str(history), "/run/pinctl/cri.sock", daemon.address, pid=os.getpid())
    try:
        daemon.ctr("images", "rm", OTHER)
        found = wait_deletions(history, 3)
    finally:
        presence.clear(str(history), pid=os.getpid())
    outside = naming(found, OTHER)
    assert outside.refs == (OTHER,)
    # The CRI keeps a record named by the ID of each image it knows: a ctr rm of the tag leaves the image.
    assert outside.image_gone is False
    assert outside.deleter == DELETER_OUTSIDE_CRI and f"pid {os.getpid()}" in outside.evidence
    assert (outside.image_id, outside.wanted, outside.pinned) == (other.image_id, (), ())
    logged = [line for line in proc.lines() if line["msg"] == "image deleted"]
    assert [line["level"] for line in logged] == ["info", "warning", "info"], logged
    counted = deletion_counts(port)
    assert counted == {("false", "false", "unknown"): 1, ("true", "true", "unknown"): 1,
                       ("false", "false", "outside-cri"): 1}, counted


@pytest.mark.parametrize("daemon", ["containerd-1.7"], ids=["ctd17"], indirect=True)
def test_a_kill_loses_no_entry_and_what_went_meanwhile_is_recorded_at_restart(
        daemon: ContainerdDaemon, history_watch: Callable[..., WatchProcess], tmp_path: Path) -> None:
    history = tmp_path / "history"
    proc = history_watch('pinned_images = ["example.test/keep/*"]\n')
    load(daemon, tmp_path, images.recipe(KEEP, seed="k-keep"), images.recipe(OTHER, seed="k-other"),
         images.recipe(TAGGED, seed="k-tagged"))
    labelled_within(daemon, KEEP)
    # Known to the watcher: its create events were handled (the pin proves the batch was read).
    daemon.ctr("images", "rm", OTHER)
    (first,) = wait_deletions(history, 1)
    proc.proc.send_signal(signal.SIGKILL)
    proc.proc.wait()
    assert deletions(history) == [first]
    # A new watcher appends after what the killed one wrote.
    history_watch('pinned_images = ["example.test/keep/*"]\n')
    daemon.ctr("images", "rm", KEEP)
    found = wait_deletions(history, 2)
    assert found[0] == first
    assert found[1].refs == (KEEP,) and found[1].wanted == ("pattern example.test/keep/*",)
    assert Journal(str(history)).read().problems == []


def test_docker_rmi_is_recorded_on_either_image_store(containerd16: ContainerdDaemon, dockerd: DockerDaemon,
                                                      tmp_path: Path) -> None:
    """Docker's containerd store: containerd's events in namespace moby. The classic store: Docker's
    own events, which name the image alone (the watcher asks Docker which names it has left)."""
    history = tmp_path / "history"
    config = tmp_path / "config.toml"
    moby = dockerd.containerd
    config.write_text('pinned_images = ["example.test/dk/*"]\n'
                      + (f'docker_containerd_address = "{moby.address}"\n' if moby is not None else ""))
    app, other = load_images_docker(dockerd, tmp_path / "archives", [
        images.recipe("example.test/dk/app:1", "example.test/dk/app:2", seed="dk-app"),
        images.recipe("example.test/dko:1", seed="dk-other")])
    process = WatchProcess(containerd16, config, env={"DOCKER_HOST": dockerd.host, "PINCTL_HISTORY_DIR": str(history)})
    try:
        process.wait_log("full sync")
        if moby is not None:
            labelled_within(moby, "example.test/dk/app:1", namespace="moby")
        dockerd.docker("rmi", "example.test/dk/app:2")
        (untag,) = wait_deletions(history, 1)
        assert untag.refs == ("example.test/dk/app:2",) and untag.image_gone is False
        assert (untag.runtime, untag.namespace) == ("docker", "moby" if moby is not None else "")
        dockerd.docker("rmi", "example.test/dk/app:1")
        dockerd.docker("rmi", "example.test/dko:1")
        found = wait_deletions(history, 3)
    finally:
        process.proc.kill()
        process.proc.wait()
    wanted = naming(found, "example.test/dk/app:1")
    assert wanted.image_gone is True and wanted.image_id == app.image_id and (wanted.size or 0) > 0
    assert wanted.wanted == ("pattern example.test/dk/*",) and wanted.deleter == DELETER_UNKNOWN
    # The containerd store's records carry the pin label the watcher wrote; Docker's own store has no pins.
    assert wanted.pinned == (("label",) if moby is not None else ())
    plain = naming(found, "example.test/dko:1")
    assert (plain.image_id, plain.wanted, plain.pinned, plain.image_gone) == (other.image_id, (), (), True)


def test_crictl_rmi_on_crio_is_recorded_from_its_list(crio: CrioDaemon, crio_crictl: Crictl,
                                                        crio_registry: reg.Registry, tmp_path: Path) -> None:
    """CRI-O has no image events: the watcher compares its CRI's list with the last one."""
    keep, other = f"{DEFAULT_DOMAIN}/pinctl-test/hist-keep:1", f"{DEFAULT_DOMAIN}/pinctl-test/hist-other:1"
    for name in (keep, other):
        crio_registry.push(tmp_path / "push", images.recipe(f"{crio_registry.host}/{registry_path(name)}", seed=name))
    pull(crio_crictl, [keep, other])
    ids = {name: crio_crictl.image_status(name)["status"]["id"] for name in (keep, other)}
    history = tmp_path / "history"
    policy = tmp_path / "pinctl.toml"
    policy.write_text(f'pinned_images = ["{keep}"]\n')
    env = {key: value for key, value in os.environ.items() if key not in ("CONTAINERD_ADDRESS", "DOCKER_HOST")}
    env.update({"CONTAINER_RUNTIME_ENDPOINT": crio.endpoint, "PINCTL_CONFIG": str(policy),
                "PINCTL_HISTORY_DIR": str(history)})
    log_path = tmp_path / "watch.log"
    watcher = subprocess.Popen([sys.executable, "-m", "pinctl", "sync", "--watch"], env=env,
                               stdout=subprocess.DEVNULL, stderr=open(log_path, "w"))
    try:
        deadline = time.monotonic() + 90
        # "full sync" is logged once CRI-O's list is read: a deletion from then on is seen.
        while not ("full sync" in log_path.read_text()
                   and any(image.pinned and keep in image.repo_tags for image in crio_crictl.images())):
            assert time.monotonic() < deadline and watcher.poll() is None, log_path.read_text()
            time.sleep(0.2)
        crio_crictl.run("rmi", keep)
        crio_crictl.run("rmi", other)
        found = wait_deletions(history, 2, timeout=90)
    finally:
        watcher.terminate()
        watcher.wait(timeout=60)
        crio.remove_dropins()
        crio.reload()
    wanted, plain = naming(found, keep), naming(found, other)
    assert (wanted.runtime, wanted.namespace, wanted.image_gone) == ("cri-o", "", True)
    assert wanted.image_id == f"sha256:{ids[keep]}".replace("sha256:sha256:", "sha256:")
    assert wanted.wanted == (f"pattern {keep}",) and wanted.pinned == ("cri",) and (wanted.size or 0) > 0
    assert wanted.deleter == DELETER_UNKNOWN
    assert (plain.wanted, plain.pinned) == ((), ())


def restores(history: Path) -> list[Restore]:
    return [e for e in Journal(str(history)).read().entries if isinstance(e, Restore)]


def wait_restores(history: Path, count: int, timeout: float = 60.0) -> list[Restore]:
    deadline = time.monotonic() + timeout
    while len(restores(history)) < count:
        assert time.monotonic() < deadline, f"{restores(history)}, not {count}"
        time.sleep(0.1)
    return restores(history)


@both_containerds
def test_a_wanted_image_deleted_outside_the_cri_comes_back_from_import_dirs_once(
        daemon: ContainerdDaemon, history_watch: Callable[..., WatchProcess], tmp_path: Path) -> None:
    from tests.integration.test_import_dirs import write_archive

    history = tmp_path / "history"
    directory = tmp_path / "images"
    directory.mkdir()
    write_archive(directory, "app.tar", "restore-app", "example.test/dir/app:1")
    proc = history_watch(f'import_dirs = ["{directory}"]\n', "-n", "k8s.io", "--max-usage", "99")
    labelled_within(daemon, "example.test/dir/app:1")
    daemon.ctr("images", "rm", "example.test/dir/app:1")
    (gone,) = wait_deletions(history, 1)
    assert gone.wanted == (f"import_dirs {directory}",) and gone.pinned == ("label",)
    (restored,) = wait_restores(history, 1)
    assert (restored.outcome, restored.how, restored.refs) == (
        "restored", f"import from {directory}", ("example.test/dir/app:1",))
    assert restored.image_id == gone.image_id
    labelled_within(daemon, "example.test/dir/app:1", timeout=30)  # back, and pinned again
    # Deleted again at once: not restored again (the back-off), and the journal says so.
    daemon.ctr("images", "rm", "example.test/dir/app:1")
    wait_deletions(history, 2)
    second = wait_restores(history, 2)[1]
    assert second.outcome == "skipped" and "deleted again" in second.detail
    assert "example.test/dir/app:1" not in {row.ref for row in daemon.images()}
    assert [line["msg"] for line in proc.lines() if line["msg"].startswith("restore ")] == [
        "restore restored", "restore skipped"]


@pytest.mark.parametrize("engine", ["containerd-1.7", "containerd-2.4"], ids=["ctd17", "ctd24"])
def test_a_wanted_image_an_exact_policy_reference_names_is_pulled_back(engine: str, registry: reg.Registry,
                                                                       tmp_path: Path) -> None:
    from tests.integration.test_pull import push

    daemon = reg.RegistryContainerd(engine, tmp_path / "daemon")
    daemon.add_host(registry.host)
    try:
        daemon.start()
        images.ensure_sandbox_image(daemon)
    except Exception as exc:  # noqa: BLE001 - an engine that cannot start skips (fails in CI)
        daemon.stop()
        engine_unavailable(f"{engine} unavailable: {exc}")
    history = tmp_path / "history"
    try:
        ref = push(registry, tmp_path, "back:1", f"restore-pull-{engine}")
        config = tmp_path / "config.toml"
        config.write_text(f'pinned_images = ["{ref}"]\n')
        watcher = WatchProcess(daemon, config, "-r", daemon.address, "--max-usage", "99",
                               env={"PINCTL_HISTORY_DIR": str(history)})
        try:
            watcher.wait_log("full sync")
            pulled = subprocess.run([sys.executable, "-m", "pinctl", "pull", "-r", daemon.address, ref],
                                         capture_output=True, text=True, timeout=120,
                                         env={**os.environ, "CONTAINERD_ADDRESS": daemon.address})
            assert pulled.returncode == 0, pulled.stderr
            labelled_within(daemon, ref, timeout=30)
            daemon.ctr("images", "rm", ref)
            (gone,) = wait_deletions(history, 1)
            assert gone.wanted == (f"pattern {ref}",)
            (restored,) = wait_restores(history, 1, timeout=120)
            assert (restored.outcome, restored.how, restored.refs) == ("restored", "pull", (ref,)), restored
            labelled_within(daemon, ref, timeout=30)
        finally:
            watcher.proc.kill()
            watcher.proc.wait()
    finally:
        daemon.stop()


@pytest.mark.parametrize("daemon", ["containerd-1.7"], ids=["ctd17"], indirect=True)
def test_the_real_cri_proxy_names_crictl_and_outside_the_cri(daemon: ContainerdDaemon, crictl: Path,
                                                              tmp_path: Path) -> None:
    """cri-proxy and the watcher share one journal: a crictl rmi through the proxy is crictl's, a
    ctr images rm beside it is outside the CRI."""
    from tests.harness.criproxy_process import ProxyProcess

    plain, other = images.load_images(daemon, tmp_path / "archives", [
        images.recipe("example.test/px/plain:1", seed="px-plain"), images.recipe(OTHER, seed="px-other")])
    proxy = ProxyProcess(daemon, daemon.address).wait_serving()
    try:
        history = proxy.history
        config = tmp_path / "config.toml"
        config.write_text('pinned_images = ["example.test/keep/*"]\n')
        watcher = WatchProcess(daemon, config, env={"PINCTL_HISTORY_DIR": str(history)})
        try:
            watcher.wait_log("full sync")
            Crictl(crictl, proxy.path, tmp_path / "crictl").run("rmi", "example.test/px/plain:1")
            daemon.ctr("images", "rm", OTHER)
            found = wait_deletions(history, 2)
            entries = Journal(str(history)).read().entries
            proxy_log = proxy.log.read_text()
        finally:
            watcher.proc.kill()
            watcher.proc.wait()
    finally:
        proxy.stop()
    through = naming(found, "example.test/px/plain:1")
    assert (through.deleter, through.client, through.image_id) == ("cri-client", "crictl", plain.image_id), (
        entries, proxy_log)
    assert "crictl" in through.evidence and "cri-proxy saw" in through.evidence
    beside = naming(found, OTHER)
    assert beside.deleter == DELETER_OUTSIDE_CRI and beside.image_id == other.image_id

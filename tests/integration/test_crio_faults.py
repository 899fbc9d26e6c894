"""pinctl's CRI-O writes under faults, against a real CRI-O v1.34.0: every test ends with what
pinctl reported equal to what `crictl images -o json` says.

The module runs its own CRI-O, installed under another file name (crio-v1.34.0, as some packagers
do), so the shared one keeps its state: concurrent writers (pin, unpin, sync and a running
sync --watch), pinctl killed at each step of a write and its reload, a reload CRI-O refuses, an
impostor serving CRI-O's socket under argv[0] "crio", a drop-in that overrides pinctl's, and
crio.conf.d on a mount of its own.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pinctl.refs import DEFAULT_DOMAIN
from tests.harness import crio as crio_harness
from tests.harness import images
from tests.harness import registry as reg
from tests.harness.crictl import Crictl
from tests.harness.crio import CrioDaemon
from tests.harness.crio_fixtures import pull, registry_path

FAULT_IMAGES = tuple(f"{DEFAULT_DOMAIN}/pinctl-test/fault-{index}:1" for index in range(8))
DROPIN = "zz-pinctl.conf"
RENAMED = "crio-v1.34.0"

# Runs pinctl's own CLI in this process after arranging to be SIGKILLed at one step of a CRI-O
# write: the code path is pinctl's own up to the kill.
KILLED_AT = r"""
import os, signal, sys
step = sys.argv[1]
def die(*_args, **_kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
from pinctl.node import crio_apply, crio_process
if step == "holding-the-lock":
    crio_apply.apply = die
elif step == "before-the-rename":
    real_replace = os.replace
    def replace(source, target, *args, **kwargs):
        if os.path.basename(str(target)) == "zz-pinctl.conf":
            die()
        return real_replace(source, target, *args, **kwargs)
    os.replace = replace
elif step == "before-the-signal":
    crio_process.signal_reload = die
elif step == "after-the-signal":
    real_signal = crio_process.signal_reload
    def signal_then_die(process):
        real_signal(process)
        die()
    crio_process.signal_reload = signal_then_die
sys.argv = ["pinctl", *sys.argv[2:]]
from pinctl.cli import main
main()
"""

# Relays CRI-O's socket byte for byte under another socket, started as `exec -a crio python3 ...`.
IMPOSTOR = r"""
import os, socket, sys, threading
listen, upstream = sys.argv[1], sys.argv[2]
server = socket.socket(socket.AF_UNIX)
server.bind(listen)
server.listen(16)
print("ready", flush=True)
def pump(source, sink):
    try:
        while (data := source.recv(65536)):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        sink.close()
while True:
    client, _ = server.accept()
    backend = socket.socket(socket.AF_UNIX)
    backend.connect(upstream)
    threading.Thread(target=pump, args=(client, backend), daemon=True).start()
    threading.Thread(target=pump, args=(backend, client), daemon=True).start()
"""


@pytest.fixture(scope="module")
def faults(crio_registry: reg.Registry, crictl: pathlib.Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CrioDaemon, Crictl]]:
    base = tmp_path_factory.mktemp("crio-faults")
    daemon = CrioDaemon(base, crio_registry.host)
    renamed = base / "bin" / RENAMED
    renamed.parent.mkdir()
    shutil.copy2(daemon.binary, renamed)
    daemon.binary = renamed
    work = tmp_path_factory.mktemp("fault-images")
    for name in FAULT_IMAGES:
        crio_registry.push(work, images.recipe(f"{crio_registry.host}/{registry_path(name)}", seed=name))
    daemon.start()
    try:
        node = Crictl(crictl, daemon.endpoint, tmp_path_factory.mktemp("faults-crictl"))
        pull(node, FAULT_IMAGES)
        yield daemon, node
    finally:
        daemon.stop()


@pytest.fixture
def node(faults: tuple[CrioDaemon, Crictl]) -> Iterator[tuple[CrioDaemon, Crictl]]:
    daemon, crictl = faults
    daemon.remove_dropins()
    daemon.reload()
    yield daemon, crictl
    daemon.remove_dropins()
    daemon.reload()


def pinctl(daemon: CrioDaemon, *args: str, endpoint: str | None = None,
           config: pathlib.Path | None = None, driver: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("CONTAINERD_ADDRESS", "PINCTL_CONFIG", "CONTAINERD_NAMESPACE", "DOCKER_HOST")}
    env["CONTAINER_RUNTIME_ENDPOINT"] = endpoint or daemon.endpoint
    if config is not None:
        env["PINCTL_CONFIG"] = str(config)
    command = [sys.executable, "-c", KILLED_AT, *driver] if driver else [sys.executable, "-m", "pinctl"]
    return subprocess.run([*command, *args], capture_output=True, text=True, env=env, timeout=180)


def reported(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    document: dict[str, Any] = json.loads(done.stdout)
    return {result["ref"]: result["action"] for result in document["results"]}


def cri_pinned(crictl: Crictl) -> dict[str, bool]:
    return {tag: image.pinned for image in crictl.images() for tag in image.repo_tags}


def pinctl_pinned(daemon: CrioDaemon) -> dict[str, bool]:
    done = pinctl(daemon, "ls", "-o", "json")
    assert done.returncode == 0, done.stderr
    return {row["ref"]: row["pinned"] for row in json.loads(done.stdout)["images"] if not row["ref"].startswith("sha256:")}


def assert_truthful(daemon: CrioDaemon, crictl: Crictl) -> None:
    """pinctl ls says of every image what CRI-O's CRI says, and no temporary file is left."""
    cri = cri_pinned(crictl)
    assert {ref: pinned for ref, pinned in pinctl_pinned(daemon).items() if ref in cri} == cri
    assert not [name for name in os.listdir(daemon.dropin_dir) if name.endswith(".tmp")]


def test_concurrent_pins_unpins_and_syncs_each_end_as_reported(node: tuple[CrioDaemon, Crictl],
                                                                tmp_path: pathlib.Path) -> None:
    daemon, crictl = node
    pinned_first, synced = FAULT_IMAGES[5:7], FAULT_IMAGES[7]
    policy = tmp_path / "policy.toml"
    policy.write_text(f'pinned_images = ["{synced}"]\n')
    done = pinctl(daemon, "pin", *pinned_first, "-o", "json")
    assert done.returncode == 0, done.stderr
    for round_ in range(3):
        pins = FAULT_IMAGES[:5] if round_ % 2 == 0 else FAULT_IMAGES[:3]
        unpins = pinned_first if round_ % 2 == 0 else ()
        calls = [("pin", name) for name in pins] + [("unpin", name) for name in unpins] + [("sync", synced)]
        results: dict[tuple[str, str], subprocess.CompletedProcess[str]] = {}

        def run(call: tuple[str, str]) -> None:
            command, name = call
            args = ("sync", "-o", "json") if command == "sync" else (command, name, "-o", "json")
            results[call] = pinctl(daemon, *args, config=policy)

        threads = [threading.Thread(target=run, args=(call,)) for call in calls]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cri = cri_pinned(crictl)
        for (command, name), result in results.items():
            assert result.returncode == 0, (command, name, result.stderr)
            action = reported(result).get(name)
            if command == "sync":
                assert action in (None, "pinned", "already-pinned"), result.stdout
                assert cri[name] is True
                continue
            assert action in (("pinned", "already-pinned") if command == "pin" else ("unpinned", "already-unpinned"))
            assert cri[name] is (command == "pin"), (command, name, action, cri)
        text = (daemon.dropin_dir / DROPIN).read_text()
        assert all(name in text for name in pins) and not any(name in text for name in unpins)
        if unpins:
            assert pinctl(daemon, "pin", *unpins).returncode == 0
    assert_truthful(daemon, crictl)


def test_sync_watch_beside_pin_and_unpin(node: tuple[CrioDaemon, Crictl], tmp_path: pathlib.Path) -> None:
    daemon, crictl = node
    policy = tmp_path / "policy.toml"
    policy.write_text(f'pinned_images = ["{FAULT_IMAGES[0]}"]\n')
    assert pinctl(daemon, "pin", FAULT_IMAGES[2]).returncode == 0
    env = {key: value for key, value in os.environ.items() if key not in ("CONTAINERD_ADDRESS", "DOCKER_HOST")}
    env.update(CONTAINER_RUNTIME_ENDPOINT=daemon.endpoint, PINCTL_CONFIG=str(policy))
    watcher = subprocess.Popen([sys.executable, "-m", "pinctl", "sync", "--watch"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        pin = pinctl(daemon, "pin", FAULT_IMAGES[1], "-o", "json")
        unpin = pinctl(daemon, "unpin", FAULT_IMAGES[2], "-o", "json")
        assert pin.returncode == 0 and unpin.returncode == 0, (pin.stderr, unpin.stderr)
        wanted = {FAULT_IMAGES[0]: True, FAULT_IMAGES[1]: True, FAULT_IMAGES[2]: False}
        deadline_rounds = 600
        while {name: cri_pinned(crictl)[name] for name in wanted} != wanted and deadline_rounds:
            deadline_rounds -= 1
            threading.Event().wait(0.1)
        assert {name: cri_pinned(crictl)[name] for name in wanted} == wanted
        assert reported(pin)[FAULT_IMAGES[1]] == "pinned" and reported(unpin)[FAULT_IMAGES[2]] == "unpinned"
    finally:
        watcher.send_signal(signal.SIGTERM)
        _out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err
    assert_truthful(daemon, crictl)


@pytest.mark.parametrize("step", ["holding-the-lock", "before-the-rename", "before-the-signal", "after-the-signal"])
def test_a_pin_killed_at_each_step_is_mended_by_the_next(node: tuple[CrioDaemon, Crictl], step: str) -> None:
    daemon, crictl = node
    target = FAULT_IMAGES[3]
    killed = pinctl(daemon, "pin", target, driver=(step,))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    again = pinctl(daemon, "pin", target, "-o", "json")
    assert again.returncode == 0, again.stderr
    # Written but never applied is not "already-pinned": the next pin reloads, and says what CRI-O did.
    was_pinned = step == "after-the-signal"
    assert reported(again)[target] in (("already-pinned", "pinned") if was_pinned else ("pinned",))
    assert cri_pinned(crictl)[target] is True
    assert_truthful(daemon, crictl)
    assert pinctl(daemon, "sync", "-o", "json").returncode == 0


def test_a_reload_cri_o_refuses_is_said_with_its_reason(node: tuple[CrioDaemon, Crictl]) -> None:
    daemon, crictl = node
    target, kept = FAULT_IMAGES[4], FAULT_IMAGES[2]
    assert pinctl(daemon, "pin", kept).returncode == 0
    # A type CRI-O's decoder refuses, in a key pinctl does not read: only CRI-O can say it.
    daemon.write_dropin("10-bad.conf", '[crio.runtime]\nlog_level = 5\n')
    unpin = pinctl(daemon, "unpin", kept, "-o", "json")
    assert unpin.returncode == 1, unpin.stdout
    assert "CRI-O refused to reload" in json.loads(unpin.stdout)["results"][0]["error"]
    assert cri_pinned(crictl)[kept] is True  # as it still is: never reported unpinned
    refused = pinctl(daemon, "pin", target, "-o", "json")
    assert refused.returncode == 1, refused.stderr
    document = json.loads(refused.stdout)
    error = document["results"][0]["error"]
    assert "CRI-O refused to reload its configuration" in error and "10-bad.conf" in error, error
    assert cri_pinned(crictl)[target] is False
    check = pinctl(daemon, "check", "-o", "json")
    assert check.returncode == 1
    item = next(i for i in json.loads(check.stdout)["images"] if target in i["refs"])
    assert "refused its last reload" in item["cause"] and "10-bad.conf" in item["cause"], item
    (daemon.dropin_dir / "10-bad.conf").unlink()
    # The drop-in already says it; CRI-O has not applied it: pin reloads rather than says done.
    mended = pinctl(daemon, "pin", target, "-o", "json")
    assert mended.returncode == 0, mended.stderr
    assert reported(mended)[target] == "pinned"
    assert cri_pinned(crictl)[target] is True
    assert pinctl(daemon, "check").returncode == 0
    assert_truthful(daemon, crictl)


def test_an_impostor_on_the_socket_is_never_signalled(node: tuple[CrioDaemon, Crictl], tmp_path: pathlib.Path) -> None:
    daemon, crictl = node
    listen = tmp_path / "impostor.sock"
    impostor = subprocess.Popen(["bash", "-c", 'exec -a crio "$@"', "impostor", sys.executable, "-c", IMPOSTOR,
                                 str(listen), daemon.address], stdout=subprocess.PIPE, text=True)
    try:
        assert impostor.stdout is not None and impostor.stdout.readline() == "ready\n"
        before = sorted(os.listdir(daemon.dropin_dir))
        done = pinctl(daemon, "pin", FAULT_IMAGES[6], endpoint=f"unix://{listen}")
        assert done.returncode == 1
        assert "pinctl writes nothing" in done.stderr and "not CRI-O's crio" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        assert impostor.poll() is None  # not signalled
        assert sorted(os.listdir(daemon.dropin_dir)) == before
        assert cri_pinned(crictl)[FAULT_IMAGES[6]] is False
    finally:
        impostor.kill()
        impostor.wait()


def test_a_later_dropin_cancelling_pinctls_list_is_named(node: tuple[CrioDaemon, Crictl]) -> None:
    daemon, crictl = node
    assert pinctl(daemon, "pin", FAULT_IMAGES[0]).returncode == 0
    daemon.write_dropin("zzz-late.conf", crio_harness.pinned_images_dropin([FAULT_IMAGES[0]]))
    daemon.reload()
    done = pinctl(daemon, "pin", FAULT_IMAGES[1], "-o", "json")
    assert done.returncode == 1
    error = json.loads(done.stdout)["results"][0]["error"]
    assert "zzz-late.conf" in error, error
    assert cri_pinned(crictl)[FAULT_IMAGES[1]] is False
    short = FAULT_IMAGES[1].removeprefix(f"{DEFAULT_DOMAIN}/")  # as an operator types it
    for args in (("check",), ("check", FAULT_IMAGES[1]), ("check", short)):
        check = pinctl(daemon, *args, "-o", "json")
        assert check.returncode == 1, check.stdout
        item = next(i for i in json.loads(check.stdout)["images"] if FAULT_IMAGES[1] in i["refs"])
        assert item["wanted"] and not item["agrees"], item
        assert "zzz-late.conf" in item["cause"] and "replaces pinctl's list" in item["cause"], item
    assert_truthful(daemon, crictl)
    # Gone again, it leaves pinctl's pins as they were: its items were never taken for the site's.
    (daemon.dropin_dir / "zzz-late.conf").unlink()
    assert pinctl(daemon, "sync").returncode == 0
    assert cri_pinned(crictl)[FAULT_IMAGES[0]] and cri_pinned(crictl)[FAULT_IMAGES[1]]
    assert_truthful(daemon, crictl)


def test_dropins_on_a_mount_of_their_own(node: tuple[CrioDaemon, Crictl]) -> None:
    daemon, crictl = node
    assert daemon.pid is not None
    inside = ["nsenter", "-t", str(daemon.pid), "-m"]
    subprocess.run([*inside, "mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(daemon.dropin_dir)], check=True)
    try:
        daemon.reload()
        done = pinctl(daemon, "pin", FAULT_IMAGES[7], "-o", "json")
        assert done.returncode == 0, done.stderr
        assert reported(done)[FAULT_IMAGES[7]] == "pinned"
        assert cri_pinned(crictl)[FAULT_IMAGES[7]] is True
        text = pathlib.Path(f"/proc/{daemon.pid}/root/{str(daemon.dropin_dir).lstrip('/')}/{DROPIN}").read_text()
        assert FAULT_IMAGES[7] in text and "/proc/" not in text
    finally:
        subprocess.run([*inside, "umount", str(daemon.dropin_dir)], check=True)
    daemon.reload()


def test_a_symlinked_dropin_directory_is_refused_as_cri_o_would(node: tuple[CrioDaemon, Crictl],
                                                                   tmp_path: pathlib.Path) -> None:
    daemon, crictl = node
    elsewhere = tmp_path / "real.d"
    elsewhere.mkdir()
    moved = daemon.dropin_dir.with_name("crio.conf.d.moved")
    daemon.dropin_dir.rename(moved)
    daemon.dropin_dir.symlink_to(elsewhere)
    try:
        done = pinctl(daemon, "pin", FAULT_IMAGES[5])
        assert done.returncode == 2, done.stderr
        assert "is a symlink" in done.stderr and len(done.stderr.strip().splitlines()) == 1
        # check names the same cause, not a reload that cannot help.
        check = pinctl(daemon, "check")
        assert check.returncode == 2 and "is a symlink" in check.stderr and "kill -HUP" not in check.stderr
        assert os.listdir(elsewhere) == []
        assert cri_pinned(crictl)[FAULT_IMAGES[5]] is False
    finally:
        daemon.dropin_dir.unlink()
        moved.rename(daemon.dropin_dir)

"""scripts/sandbox as a newcomer runs it: a re-run keeps what they changed, --reset starts over,
--stop leaves nothing behind, not even a mount.

The real script (which runs scripts/bootstrap, then tests.harness.sandbox) in a private
directory; what it did is checked with the engine's own ctr and /proc/self/mountinfo.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import debs, sandbox
from tests.harness.containerd import ContainerdDaemon

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "sandbox"
ENGINE = sandbox.DEFAULT_ENGINE
PINNED = sandbox.PINNED_BY_LABEL  # pinned by the samples
OTHER = "example.test/epsilon:3.1"  # not pinned by the samples
EDITED_POLICY = 'pinned_images = ["example.test/epsilon:*"]\n'


def run_script(base: Path, *args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", **(env_extra or {})}
    result = subprocess.run([str(SCRIPT), "--dir", str(base), *args], capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


def pin_labels(base: Path) -> dict[str, str]:
    """ref -> value of the pin label, as the engine's own ctr lists them."""
    daemon = ContainerdDaemon(ENGINE, base)
    return {image.ref: image.labels[sandbox.PIN_KEY] for image in daemon.images() if sandbox.PIN_KEY in image.labels}


def ctr_label(base: Path, ref: str, value: str) -> None:
    ContainerdDaemon(ENGINE, base).label_image(ref, {sandbox.PIN_KEY: value})


def daemon_pid(base: Path) -> int:
    pid = sandbox._read_state(base)["pid"]
    assert isinstance(pid, int)
    return pid


def alive(pid: int) -> bool:
    # The detached daemon's parent is gone; whoever inherits it may reap it late: a zombie is dead.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def mounts_under(base: Path) -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as table:
        return [line.split()[4] for line in table if line.split()[4].startswith(str(base))]


@pytest.fixture
def base() -> Iterator[Path]:
    try:
        debs.engine_dir(ENGINE)
    except debs.EngineUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{ENGINE} unavailable: {exc}", pytrace=False)
        pytest.skip(f"{ENGINE} unavailable: {exc}")
    # Short, so the daemon's sockets fit below it; never the default the user may be using.
    parent = Path(tempfile.mkdtemp(prefix="pinctl-sb-", dir="/tmp"))
    yield parent / "sandbox"
    if (parent / "sandbox").exists():
        subprocess.run([str(SCRIPT), "--dir", str(parent / "sandbox"), "--stop"], capture_output=True, timeout=120)
    for point in reversed(mounts_under(parent)):
        subprocess.run(["umount", "-l", point], capture_output=True)
    shutil.rmtree(parent, ignore_errors=True)


def test_rerun_keeps_the_users_state_reset_starts_over_stop_removes_everything(base: Path) -> None:
    first = run_script(base)
    assert "started" in first.stdout and sandbox.KEEPING not in first.stdout
    assert pin_labels(base)[PINNED] == "pinned" and OTHER not in pin_labels(base)
    pid = daemon_pid(base)
    assert alive(pid)

    # The user's own changes: a pin moved, the policy edited.
    ctr_label(base, PINNED, "")
    ctr_label(base, OTHER, "pinned")
    (base / "config.toml").write_text(EDITED_POLICY)

    again = run_script(base)
    assert sandbox.KEEPING in again.stdout
    assert daemon_pid(base) == pid
    labels = pin_labels(base)
    assert labels.get(OTHER) == "pinned" and PINNED not in labels
    assert (base / "config.toml").read_text() == EDITED_POLICY
    assert "pattern example.test/epsilon:*" in again.stdout  # the pinctl ls it shows reads the user's policy

    reset = run_script(base, "--reset")
    assert sandbox.KEEPING not in reset.stdout and "stopped" in reset.stdout
    labels = pin_labels(base)
    assert labels[PINNED] == "pinned" and OTHER not in labels
    assert (base / "config.toml").read_text() == sandbox.POLICY
    new_pid = daemon_pid(base)
    assert new_pid != pid and not alive(pid) and alive(new_pid)

    # What containerd's overlay snapshotter leaves behind when a container was running.
    left_mount = base / "root" / "io.containerd.snapshotter.v1.overlayfs" / "snapshots" / "1" / "fs"
    left_mount.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(left_mount)], check=True)
    (left_mount / "file").write_text("inside the mount")
    assert mounts_under(base)

    stopped = run_script(base, "--stop")
    assert f"removed {base}" in stopped.stdout
    assert not base.exists() and mounts_under(base.parent) == []
    assert not alive(new_pid)
    assert "no sandbox" in run_script(base, "--stop").stdout


def test_stop_leaves_a_directory_it_did_not_make(tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("mine")
    result = subprocess.run([str(SCRIPT), "--dir", str(precious), "--stop"], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 1 and "holds no sandbox" in result.stderr, result.stderr
    assert (precious / "keep.txt").read_text() == "mine"


def test_mount_table_names_are_unescaped() -> None:
    assert sandbox._unescape(r"/tmp/a\040b\011c\134d") == "/tmp/a b\tc\\d"


def test_a_stopped_sandbox_starts_again_as_the_user_left_it(base: Path) -> None:
    first = run_script(base)
    address = sandbox._read_state(base)["address"]
    assert f"export CONTAINER_RUNTIME_ENDPOINT=unix://{address}" in first.stdout.splitlines()
    assert f"export PINCTL_HISTORY_DIR={base}/history" in first.stdout.splitlines()
    ctr_label(base, OTHER, "pinned")  # the user's pin
    for stop_signal in ("KILL", "TERM"):  # killed (its socket left behind), then stopped cleanly
        pid = daemon_pid(base)
        subprocess.run(["kill", f"-{stop_signal}", str(pid)], check=True)
        for _ in range(100):
            if not alive(pid):
                break
            subprocess.run(["sleep", "0.1"], check=True)
        again = run_script(base)
        assert sandbox.RESTARTED in again.stdout and "started" in again.stdout, again.stdout
        assert daemon_pid(base) != pid and alive(daemon_pid(base))
        labels = pin_labels(base)
        assert labels.get(OTHER) == "pinned" and labels[PINNED] == "pinned", labels
    assert sandbox.RESTARTED not in run_script(base, "--reset").stdout
    assert OTHER not in pin_labels(base)


def test_help_names_the_script_and_reads_as_plain_text() -> None:
    done = subprocess.run([sys.executable, "-m", "tests.harness.sandbox", "--help"], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: scripts/sandbox ")
    assert "``" not in done.stdout and "python -m" not in done.stdout


def test_the_docs_import_examples_have_archives_to_import(base: Path) -> None:
    """Issue 30: archives/ was empty, so README's import example had nothing to import. Each
    `pinctl import` line of docs/pull-and-import.md (where README's import examples went) that names
    only local archives runs as written from there."""
    started = run_script(base)
    folder = base / "archives"
    assert f"cd {folder}; pinctl import --pin" in started.stdout
    guide = (ROOT / "docs" / "pull-and-import.md").read_text()
    examples = [line.split("#")[0].split() for line in guide.splitlines() if line.startswith("pinctl import ")]
    local = [argv for argv in examples if "-n" not in argv]  # -n moby needs Docker
    assert len(local) >= 3, examples
    env = {**os.environ, "CONTAINERD_ADDRESS": str(sandbox._read_state(base)["address"]),
           "PINCTL_CONFIG": str(base / "config.toml"), "PINCTL_CONTAINERD_CONFIG": str(base / "containerd.toml")}
    pinctl = ROOT / ".venv" / "bin" / "pinctl"
    for argv in local:
        done = subprocess.run([str(pinctl), *argv[1:], "-o", "json"], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        results = json.loads(done.stdout)["imports"]
        assert results and all(item["action"] in ("imported", "present") for item in results), results
    labels = pin_labels(base)
    pinned = [ref for _, _, recipes in sandbox.SAMPLE_ARCHIVES.values() for recipe in recipes for ref in recipe.refs]
    assert all(labels.get(ref) == "pinned" for ref in pinned), labels


def test_pinctl_starts_from_bytecode_even_where_python_writes_none(tmp_path: Path) -> None:
    """PYTHONDONTWRITEBYTECODE=1 stops Python writing .pyc files, not reading them: after the
    script's set-up every module of pinctl has current bytecode, so no run recompiles them."""
    import importlib.util

    for compiled in (ROOT / "src" / "pinctl").rglob("*.pyc"):
        compiled.unlink()  # what earlier runs left: the script's own set-up must write them
    run_script(tmp_path / "sandbox", env_extra={"PYTHONDONTWRITEBYTECODE": "1"})
    try:
        stale = [str(source.relative_to(ROOT)) for source in sorted((ROOT / "src" / "pinctl").rglob("*.py"))
                 if not _current(Path(importlib.util.cache_from_source(str(source))), source)]
        assert stale == [], f"no current bytecode for {stale[:5]}"
    finally:
        run_script(tmp_path / "sandbox", "--stop")


def _current(compiled: Path, source: Path) -> bool:
    """The .pyc's header names the source's mtime and size (PEP 552, timestamp-based)."""
    try:
        header = compiled.read_bytes()[:16]
    except OSError:
        return False
    stat = source.stat()
    return (int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF)

"""The pin policy can only be what root wrote, and every path pinctl reads fails as one line.

Against real containerd 1.7, as root: a drop-in that cannot be read, or a config directory
another user could change, stops sync --prune before it unpins anything (checked with ctr);
symlink loops, FIFOs and absurd nesting in any path pinctl reads exit 2 with one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.harness import images
from tests.harness.containerd import ContainerdDaemon
from tests.integration.pinctl_runner import assert_one_line_error, pinctl

PIN = "io.cri-containerd.pinned"
NOBODY = 65534
LoadImages = Callable[..., list[images.ImageInfo]]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="acts as root and as another user")


@pytest.fixture
def ctd17(containerd17: ContainerdDaemon, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon]) -> ContainerdDaemon:
    return clean_k8s_io(containerd17)


@pytest.fixture
def two_teams(ctd17: ContainerdDaemon, load_images: LoadImages) -> None:
    load_images(ctd17, [
        images.recipe("registry.example/platform/base:1", seed="platform"),
        images.recipe("example.test/team-b/app:1", seed="team-b"),
    ])


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def run(daemon: ContainerdDaemon, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return pinctl(daemon, *args, env={"PINCTL_CONFIG": str(config)})


def pinned(daemon: ContainerdDaemon) -> set[str]:
    """References ctr shows with the pin label."""
    return {row.ref for row in daemon.images() if row.labels.get(PIN) == "pinned"}


def policy_of_two_teams(etc: Path) -> Path:
    main = write(etc / "config.toml", 'pinned_images = ["registry.example/platform/*"]\n')
    write(etc / "config.d" / "20-team-b.toml", 'pinned_images = ["example.test/team-b/*"]\n')
    return main


@needs_root
def test_prune_with_a_dangling_dropin_refuses_and_keeps_its_pins(ctd17: ContainerdDaemon, two_teams: None,
                                                                tmp_path: Path) -> None:
    main = policy_of_two_teams(tmp_path / "etc")
    sync = run(ctd17, main, "sync")
    assert sync.returncode == 0, sync.stderr
    assert pinned(ctd17) >= {"registry.example/platform/base:1", "example.test/team-b/app:1"}
    # Team B's drop-in now points at a file that was moved away: its patterns are unknown, not empty.
    dropin = tmp_path / "etc" / "config.d" / "20-team-b.toml"
    dropin.rename(tmp_path / "team-b.toml")
    dropin.symlink_to(tmp_path / "moved" / "team-b.toml")
    result = run(ctd17, main, "sync", "--prune")
    assert_one_line_error(result, 2, f"drop-in {dropin} is a symlink to", "which does not exist")
    assert "example.test/team-b/app:1" in pinned(ctd17)


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A root-owned 0755 directory under /tmp that another user can reach (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="pinctl-safety-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@needs_root
def test_prune_refuses_a_config_directory_another_user_could_change(ctd17: ContainerdDaemon, two_teams: None,
                                                                    reachable_dir: Path) -> None:
    # Issue 10's attack: the config lives in a world-writable directory, a non-root user moves
    # config.d aside, and root's next prune would unpin team B's images.
    etc = reachable_dir / "etc"
    main = policy_of_two_teams(etc)
    assert run(ctd17, main, "sync").returncode == 0
    etc.chmod(0o777)
    moved = subprocess.run(["mv", str(etc / "config.d"), str(etc / "gone")], user=NOBODY, capture_output=True, text=True)
    assert moved.returncode == 0, moved.stderr  # the threat is real: another user can do it
    result = run(ctd17, main, "sync", "--prune")
    assert_one_line_error(result, 2, f"refusing {main}: directory {etc} is writable by a user other than root",
                          f"chmod go-w {etc}")
    assert "example.test/team-b/app:1" in pinned(ctd17)
    etc.chmod(0o755)
    (etc / "gone").rename(etc / "config.d")
    plan = run(ctd17, main, "sync", "--prune", "--dry-run")
    assert plan.returncode == 0, plan.stderr


@needs_root
def test_a_sticky_root_directory_like_tmp_is_fine_for_roots_own_files(ctd17: ContainerdDaemon,
                                                                     tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    main = write(shared / "config.toml", 'pinned_images = ["registry.example/platform/*"]\n')
    assert run(ctd17, main, "config", "show").returncode == 0
    os.chown(main, NOBODY, NOBODY)
    assert_one_line_error(run(ctd17, main, "config", "show"), 2,
                          f"refusing {main}: it is owned by uid {NOBODY} in the shared directory {shared}",
                          f"chown -h root:root {main}")


def symlink_loop(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(path.with_name(path.name + ".2"))
    path.with_name(path.name + ".2").symlink_to(path)
    return path


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def nested(path: Path) -> Path:
    return write(path, "a = " + "[" * 50000 + "\n")


MAKERS: dict[str, Callable[[Path], Path]] = {"loop": symlink_loop, "fifo": fifo, "nested": nested}


def invocation(place: str, path: Path, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that make pinctl read path in that place."""
    plain = {"PINCTL_CONFIG": str(write(tmp_path / "plain" / "config.toml", ""))}
    if place == "--config":
        return ["config", "show", f"--config={path}"], {}
    if place == "PINCTL_CONFIG":
        return ["config", "show"], {"PINCTL_CONFIG": str(path)}
    if place == "drop-in":
        return ["config", "show"], {"PINCTL_CONFIG": str(write(path.parent.parent / "config.toml", ""))}
    if place == "--containerd-config":
        return ["ls", f"--containerd-config={path}"], plain
    return ["config", "show", f"--from-crio={path}"], plain


PLACES = {"--config": "config.toml", "PINCTL_CONFIG": "config.toml", "drop-in": "config.d/10.toml",
          "--containerd-config": "containerd.toml", "--from-crio": "crio.conf"}


@pytest.mark.parametrize("what", list(MAKERS))
@pytest.mark.parametrize("place", list(PLACES))
def test_paths_that_cannot_be_read_are_one_line_and_exit_2(ctd17: ContainerdDaemon, tmp_path: Path,
                                                          place: str, what: str) -> None:
    path = MAKERS[what](tmp_path / "given" / PLACES[place])
    args, env = invocation(place, path, tmp_path)
    result = pinctl(ctd17, *args, env=env)
    assert_one_line_error(result, 2, str(path))


def test_a_socket_path_in_a_symlink_loop_is_one_line_and_exit_2(ctd17: ContainerdDaemon, tmp_path: Path) -> None:
    loop = symlink_loop(tmp_path / "containerd.sock")
    result = pinctl(ctd17, "ls", "--address", str(loop))
    assert_one_line_error(result, 2, str(loop), "too many levels of symbolic links", "--address")


def test_lint_and_show_say_each_thing_once(ctd17: ContainerdDaemon, tmp_path: Path) -> None:
    main = write(tmp_path / "config.toml", 'pinned_images = ["a.example/*/b"]\n')
    lint = run(ctd17, main, "config", "lint", "--offline")
    assert lint.returncode == 1
    assert lint.stdout.startswith(f"{main}:1: invalid: pattern 'a.example/*/b'")
    assert lint.stdout.count(f"{main}:1") == 1
    show = run(ctd17, write(tmp_path / "plain" / "config.toml", ""), "config", "show").stdout
    assert "(k8s.io and moby where they exist)" in show

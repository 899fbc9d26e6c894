"""Who may change what pinctl reads as root, which decides the images kept: the config files and
config.d must be root's and not group or world writable, and so must every directory on the
way (as sshd's StrictModes), sticky directories and symlinks included. Not root, none of it is
checked. Most of these need real root (chown to another uid)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from pinctl.config import files as config_files
from pinctl.config import loader as config
from pinctl.backends import procfs

from .config_helpers import (
    NOBODY,
    as_root_fixture,  # noqa: F401  (the as_root fixture)
    config_error,
    directory_refusal,
    isolated_config,  # noqa: F401  (the autouse fixture: no machine /etc, a non-root user)
    load,
    needs_root,
    texts,
    write,
)

KERNEL_EUID = config_files._euid  # before the autouse fixture replaces it


# -- who may write the files -------------------------------------------------------------


def root_owned_setup(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    main = tmp_path / "etc" / "config.toml"
    write(main, 'pinned_images = ["registry.example/a"]\n')
    dropin_dir = tmp_path / "etc" / "config.d"
    dropin = dropin_dir / "10-team.toml"
    write(dropin, 'pinned_images = ["registry.example/b"]\n')
    dropin_dir.chmod(0o755)
    return main, dropin_dir, dropin


@needs_root
def test_root_owned_files_are_accepted_as_root(tmp_path: pathlib.Path, as_root: None) -> None:
    main, _, _ = root_owned_setup(tmp_path)
    assert texts(load(main)) == ["registry.example/a", "registry.example/b"]


@needs_root
@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666])
def test_group_or_world_writable_main_file_is_refused_as_root(tmp_path: pathlib.Path, as_root: None,
                                                             mode: int) -> None:
    main, _, _ = root_owned_setup(tmp_path)
    main.chmod(mode)
    assert config_error(main=main) == (
        f"refusing {main}: it is writable by a user other than root (owner uid 0, mode {mode:04o}) and decides "
        f"which images are kept (chown root:root {main} && chmod go-w {main})")


@needs_root
def test_world_writable_dropin_is_refused_as_root(tmp_path: pathlib.Path, as_root: None) -> None:
    main, _, dropin = root_owned_setup(tmp_path)
    dropin.chmod(0o666)
    message = config_error(main=main)
    assert message.startswith(f"refusing {dropin}: ") and f"chown root:root {dropin} && chmod go-w {dropin}" in message


@needs_root
@pytest.mark.parametrize("which", ["main", "dropin"])
def test_file_owned_by_another_user_is_refused_as_root(tmp_path: pathlib.Path, as_root: None, which: str) -> None:
    main, _, dropin = root_owned_setup(tmp_path)
    target = main if which == "main" else dropin
    os.chown(target, NOBODY, NOBODY)
    message = config_error(main=main)
    assert message.startswith(f"refusing {target}: ") and f"owner uid {NOBODY}, mode 0644" in message


@needs_root
@pytest.mark.parametrize("change", ["group-writable", "owner"])
def test_writable_dropin_directory_is_refused_as_root(tmp_path: pathlib.Path, as_root: None, change: str) -> None:
    main, dropin_dir, _ = root_owned_setup(tmp_path)
    if change == "owner":
        os.chown(dropin_dir, NOBODY, NOBODY)
    else:
        dropin_dir.chmod(0o775)
    message = config_error(main=main)
    assert message.startswith(f"refusing {dropin_dir}: ")
    assert message.endswith(f"(chown root:root {dropin_dir} && chmod go-w {dropin_dir})")


@needs_root
def test_ownership_is_not_checked_when_not_root(tmp_path: pathlib.Path) -> None:
    main, dropin_dir, dropin = root_owned_setup(tmp_path)
    main.chmod(0o666)
    os.chown(dropin, NOBODY, NOBODY)
    dropin_dir.chmod(0o777)
    assert texts(load(main)) == ["registry.example/a", "registry.example/b"]


def test_the_uid_check_asks_the_kernel() -> None:
    assert KERNEL_EUID() == os.geteuid()


# -- who may change the directories on the way (as sshd's StrictModes) -------------------


def writable_by_others(directory: pathlib.Path, change: str) -> None:
    if change == "owner":
        os.chown(directory, NOBODY, NOBODY)
    else:
        directory.chmod({"world-writable": 0o777, "group-writable": 0o775}[change])


@needs_root
@pytest.mark.parametrize("change", ["world-writable", "group-writable", "owner"])
def test_a_parent_directory_others_can_change_is_refused_as_root(tmp_path: pathlib.Path, as_root: None,
                                                                 change: str) -> None:
    main, _, _ = root_owned_setup(tmp_path)
    writable_by_others(main.parent, change)
    assert config_error(main=main) == directory_refusal(main, main.parent)


@needs_root
def test_any_ancestor_others_can_change_is_refused_as_root(tmp_path: pathlib.Path, as_root: None) -> None:
    deep = tmp_path / "a" / "b"
    main, _, _ = root_owned_setup(deep)
    (tmp_path / "a").chmod(0o777)
    assert config_error(main=main) == directory_refusal(main, tmp_path / "a")


@needs_root
def test_config_d_renamed_away_by_another_user_is_refused_as_root(tmp_path: pathlib.Path, as_root: None) -> None:
    # Issue 10: in a world-writable directory anyone can move config.d aside, and a prune
    # would then unpin what its drop-ins held. That the drop-ins are gone must not pass.
    main, dropin_dir, _ = root_owned_setup(tmp_path)
    main.parent.chmod(0o777)
    dropin_dir.rename(main.parent / "config.d.moved")
    assert config_error(main=main) == directory_refusal(main, main.parent)


@needs_root
def test_a_missing_file_in_a_directory_others_can_write_is_refused_as_root(as_root: None) -> None:
    directory = pathlib.Path(config.DEFAULT_PATH).parent
    directory.mkdir(parents=True)
    directory.chmod(0o777)
    assert config_error() == directory_refusal(pathlib.Path(config.DEFAULT_PATH), directory)


@needs_root
def test_root_entries_of_a_sticky_root_directory_are_accepted_as_root(tmp_path: pathlib.Path, as_root: None) -> None:
    # As /tmp: others may add entries, but only root may rename or remove root's.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    main, _, _ = root_owned_setup(shared)
    assert texts(load(main)) == ["registry.example/a", "registry.example/b"]
    alone = write(shared / "config.toml", 'pinned_images = ["registry.example/c"]\n')
    assert texts(load(pathlib.Path(alone))) == ["registry.example/c"]  # no config.d: only root could remove it


@needs_root
def test_another_users_entry_in_a_sticky_directory_is_refused_as_root(tmp_path: pathlib.Path, as_root: None) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    main, _, _ = root_owned_setup(shared)
    os.chown(shared / "etc", NOBODY, NOBODY)
    assert config_error(main=main) == (
        f"refusing {main}: {shared / 'etc'} is owned by uid {NOBODY} in the shared directory {shared}, "
        f"who could replace it (chown -h root:root {shared / 'etc'})")


@needs_root
def test_a_symlink_others_can_replace_is_refused_as_root(tmp_path: pathlib.Path, as_root: None) -> None:
    main, _, _ = root_owned_setup(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "config.toml").symlink_to(main)
    assert config_error(main=shared / "config.toml") == directory_refusal(shared / "config.toml", shared)


@needs_root
def test_a_symlink_into_a_directory_others_can_change_is_refused_as_root(tmp_path: pathlib.Path,
                                                                        as_root: None) -> None:
    main, _, _ = root_owned_setup(tmp_path)
    theirs = tmp_path / "theirs"
    write(theirs / "config.toml", 'pinned_images = ["registry.example/x"]\n')
    os.chown(theirs, NOBODY, NOBODY)
    main.unlink()
    main.symlink_to(theirs / "config.toml")
    assert config_error(main=main) == directory_refusal(main, theirs)


@needs_root
def test_symlinks_between_root_directories_are_followed_as_root(tmp_path: pathlib.Path, as_root: None) -> None:
    main, _, _ = root_owned_setup(tmp_path / "srv")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "pinctl").symlink_to("../srv/etc")
    cfg = load(tmp_path / "etc" / "pinctl" / "config.toml")
    assert texts(cfg) == ["registry.example/a", "registry.example/b"]
    # ".." after a symlink leaves its target, as the kernel reads it, not the name before it.
    dotted = tmp_path / "etc" / "pinctl" / ".." / "etc" / "config.toml"
    assert texts(load(dotted)) == texts(cfg)


@needs_root
def test_a_file_replaced_between_the_walk_and_the_open_is_refused_as_root(tmp_path: pathlib.Path, as_root: None,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    main, _, _ = root_owned_setup(tmp_path)
    other = write(tmp_path / "etc" / "other.toml", "pinned_images = []\n")
    real_open = os.open

    def replace_then_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == str(main) and os.path.exists(other):
            os.replace(other, main)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", replace_then_open)
    assert config_error(main=main) == f"{main} changed while pinctl read it (run pinctl again)"


@needs_root
def test_writable_directories_do_not_matter_when_not_root(tmp_path: pathlib.Path) -> None:
    main, _, _ = root_owned_setup(tmp_path)
    main.parent.chmod(0o777)
    tmp_path.chmod(0o777)
    assert texts(load(main)) == ["registry.example/a", "registry.example/b"]


@needs_root
def test_a_path_through_another_processs_root_is_read_in_its_mount_namespace(tmp_path: pathlib.Path,
                                                                            as_root: None) -> None:
    """CRI-O in a mount namespace of its own (a node's, a unit's private mounts): its /etc/crio is
    not the host's, and /proc/PID/root reaches it, which a walk that read the link ("/") missed."""
    private = tmp_path / "private"
    private.mkdir(mode=0o755)
    script = f"mount -t tmpfs -o mode=0755 none {private} && printf x > {private}/crio.conf && echo ready && exec sleep 60"
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        assert not (private / "crio.conf").exists()  # not in this namespace
        seen = config_files._walk(f"/proc/{holder.pid}/root{private}/crio.conf")
        assert seen is not None and seen.st_size == 1
        assert procfs.as_seen_by(holder.pid, "/etc/crio/crio.conf") == f"/proc/{holder.pid}/root/etc/crio/crio.conf"
        assert procfs.as_seen_by(os.getpid(), "/etc/crio/crio.conf") == "/etc/crio/crio.conf"
        # A path that is the same file on both sides keeps its plain name (what the operator knows).
        assert procfs.as_seen_by(holder.pid, str(tmp_path)) == str(tmp_path)
    finally:
        holder.kill()
        holder.wait()


@needs_root
def test_pull_and_import_read_the_image_filesystem_the_runtime_sees(tmp_path: pathlib.Path, as_root: None) -> None:
    """A runtime in a mount namespace of its own reports an ImageFsInfo mount point that is mounted
    only there: the disk budget of pull and import reads it through /proc/PID/root, not the
    host's directory of that name."""
    from pinctl.backends.cri import ImageFs, RuntimeVersion
    from pinctl.landing.runtimes import CriTarget

    private, sock = tmp_path / "imagefs", tmp_path / "cri.sock"
    private.mkdir(mode=0o755)
    # It listens and never accepts: a connection waits in the backlog and SO_PEERCRED names the
    # listener all the same. One that accepted and exited was gone before /proc/PID/root was read.
    serve = (f"import socket, time; s = socket.socket(socket.AF_UNIX); s.bind('{sock}'); s.listen(); "
             "print('ready', flush=True); time.sleep(600)")
    script = f"mount -t tmpfs -o size=64m,mode=0755 none {private} && exec {sys.executable} -c \"{serve}\""
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                              stdout=subprocess.PIPE, text=True)

    class Runtime:
        endpoint = f"unix://{sock}"

        def image_fs_info(self) -> list[ImageFs]:
            return [ImageFs(str(private), 0)]

    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        seen = CriTarget(Runtime(), RuntimeVersion("containerd", "1.7.24", "v1")).filesystem()  # type: ignore[arg-type]
        assert seen.capacity_bytes == 64 * 2**20, seen
        assert os.statvfs(private).f_blocks * os.statvfs(private).f_frsize != 64 * 2**20  # the host's differs
    finally:
        holder.kill()
        holder.wait()

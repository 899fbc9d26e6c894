"""pinctl.config.crio: CRI-O's configuration as CRI-O v1.34.0 sees it (the effective pinned_images
and pause_image, pinctl's own drop-in and who wrote each of its entries), and writing that drop-in."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import pathlib
import stat
import tomllib
from typing import Any, Iterator

import pytest

from pinctl.config import crio
from pinctl.config.crio import (
    CRIO_DEFAULT_PATH,
    PAUSE_IMAGE_DEFAULT,
    PINCTL_DROPIN_NAME,
    CrioEntry,
    as_crio_sees_it,
    is_temp_name,
    read_crio_config,
    remove_stale_temps,
    render_dropin,
    write_dropin,
)
from pinctl.errors import ConfigError, PatternError, PinctlError
from pinctl.pins.policy import compile_policy

from .config_helpers import (
    NOBODY,
    as_root_fixture,  # noqa: F401  (the as_root fixture)
    isolated_config,  # noqa: F401  (the autouse fixture: no machine /etc, a non-root user)
    load,
    needs_root,
    write,
)


@pytest.fixture
def main(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "crio" / "crio.conf"
    write(path, '[crio.image]\npinned_images = [\n  "registry.example/main:1",\n]\n')
    return path


def dropins(main: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(f"{main}.d")


def crio_d(parent: pathlib.Path) -> pathlib.Path:
    """An existing drop-in directory, as write_dropin needs."""
    directory = parent / "crio.conf.d"
    directory.mkdir(mode=0o755)
    return directory


def test_the_constants() -> None:
    assert CRIO_DEFAULT_PATH == "/etc/crio/crio.conf"
    assert PINCTL_DROPIN_NAME == "zz-pinctl.conf"
    # CRI-O v1.34.0, pkg/config/config_linux.go: DefaultPauseImage.
    assert PAUSE_IMAGE_DEFAULT == "registry.k8s.io/pause:3.10"
    assert CrioEntry("a", "/f", 3).where == "/f:3" and CrioEntry("a", "/f", 0).where == "/f"


def test_missing_default_is_cri_os_defaults(tmp_path: pathlib.Path) -> None:
    found = read_crio_config(str(tmp_path / "none" / "crio.conf"))
    assert (found.files, found.pinned_images, found.pinned_from) == ((), (), None)
    assert (found.pause_image, found.pause_where) == (PAUSE_IMAGE_DEFAULT, "CRI-O's default")
    assert found.dropin_path == str(tmp_path / "none" / "crio.conf.d" / PINCTL_DROPIN_NAME)


def test_missing_explicit_path_is_an_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="crio.conf does not exist"):
        read_crio_config(str(tmp_path / "none" / "crio.conf"), explicit=True)


def test_last_file_wins_for_each_key(main: pathlib.Path) -> None:
    d = dropins(main)
    write(d / "10-pause.conf", '[crio.image]\n\npause_image = "registry.example/pause:9"\n')
    winner = write(d / "20-pins.conf", '[crio.image]\npinned_images = [\n  "a.example/x",\n  "*y*",\n]\n')
    write(d / "30-other.conf", '[crio.runtime]\nlog_level = "debug"\n')
    found = read_crio_config(str(main))
    assert found.files == (str(main), str(d / "10-pause.conf"), winner, str(d / "30-other.conf"))
    assert found.pinned_images == (CrioEntry("a.example/x", winner, 3), CrioEntry("*y*", winner, 4))
    assert found.pinned_from == winner and found.site_entries == found.pinned_images
    assert (found.pause_image, found.pause_where) == ("registry.example/pause:9", f"{d / '10-pause.conf'}:3")
    assert found.own_entries == () and found.overriding == () and found.warnings == ()


def test_empty_and_blank_items_are_read_with_a_warning_each(main: pathlib.Path) -> None:
    write(main, '[crio.image]\npinned_images = [\n  "registry.example/a",\n  "",\n  "  ",\n]\n')
    found = read_crio_config(str(main))
    assert [e.text for e in found.pinned_images] == ["registry.example/a", "", "  "]
    assert len(found.warnings) == 2
    assert found.warnings[0].startswith(f"{main}:4: ") and "pins nothing" in found.warnings[0]
    assert found.warnings[1].startswith(f"{main}:5: ") and "blank" in found.warnings[1]


def test_from_crio_reads_empty_items_and_warns_instead_of_refusing(main: pathlib.Path) -> None:
    write(main, '[crio.image]\npinned_images = [\n  "registry.example/a",\n  "",\n  "  ",\n]\n')
    said: list[str] = []
    from pinctl.config import loader

    cfg = loader.load(None, {}, from_crio=str(main), warn=said.append)
    assert [p.text for p in cfg.patterns] == ["registry.example/a", "", "  "]
    assert said == list(cfg.warnings) and len(said) == 2 and all(f"{main}:" in w for w in said)
    policy = compile_policy(cfg.patterns)
    # CRI-O compiles them to ^$ and ^  $: they pin no name at all.
    assert policy.matcher.match(["registry.example/a", " ", "x"]) == [[0], [], []]


def test_a_lone_star_is_still_refused(main: pathlib.Path) -> None:
    write(main, '[crio.image]\npinned_images = ["*"]\n')
    cfg = load(from_crio=str(main))
    with pytest.raises(PatternError, match="CRI-O crashes on a lone"):
        compile_policy(cfg.patterns)
    assert any("crash" in w for w in read_crio_config(str(main)).warnings)


def test_wrong_types_are_errors_naming_file_and_line(main: pathlib.Path) -> None:
    write(main, '[crio.image]\n\npinned_images = [1]\n')
    with pytest.raises(ConfigError, match=f"^{main}:3: key 'pinned_images' must be a list of strings, item 1"):
        read_crio_config(str(main))
    write(main, '[crio.image]\npause_image = 3\n')
    with pytest.raises(ConfigError, match=f"^{main}:2: key 'pause_image' must be a string"):
        read_crio_config(str(main))


def test_own_dropin_round_trip(main: pathlib.Path) -> None:
    d = dropins(main)
    site = write(d / "10-site.conf", '[crio.image]\npinned_images = [\n  "site.example/a",\n  "site.example/b*",\n]\n')
    first = read_crio_config(str(main))
    text = render_dropin(first.site_entries, [("pin.example/p:1", "pin"), ("sync.example/*", "sync"),
                                             ("site.example/a", "pin")])
    # pinctl's pin of a site item is written too: it must outlive the site's item.
    assert tomllib.loads(text)["crio"]["image"]["pinned_images"] == [
        "site.example/a", "site.example/b*", "pin.example/p:1", "sync.example/*", "site.example/a"]
    assert f"# site: {site}:3" in text and "# pinctl: pin" in text and "# pinctl: sync" in text
    assert "systemctl reload crio" in text and "kill -HUP" in text
    write_dropin(os.path.join(first.dropin_dir, PINCTL_DROPIN_NAME), text)
    again = read_crio_config(str(main))
    dropin = again.dropin_path
    assert again.pinned_from == dropin
    assert [(e.text, e.owner) for e in again.pinned_images] == [
        ("site.example/a", "site"), ("site.example/b*", "site"), ("pin.example/p:1", "pin"), ("sync.example/*", "sync"),
        ("site.example/a", "pin")]
    # The carried-over copies are not the drop-in's own, and the site's list still comes from its file.
    assert [(e.text, e.owner, e.path) for e in again.own_entries] == [
        ("pin.example/p:1", "pin", dropin), ("sync.example/*", "sync", dropin), ("site.example/a", "pin", dropin)]
    assert again.site_entries == first.site_entries
    assert again.own_entries[0].line == 9  # four header lines, [crio.image], the key, two site items


def test_hand_edited_dropin_is_read_and_its_plain_items_are_the_sites(main: pathlib.Path) -> None:
    dropin = write(dropins(main) / PINCTL_DROPIN_NAME,
                   '[crio.image]\npinned_images = [\n  "hand.example/x",\n  "own.example/y",  # pinctl: sync\n]\n')
    found = read_crio_config(str(main))
    assert [(e.text, e.owner) for e in found.own_entries] == [("own.example/y", "sync")]
    assert [(e.text, e.where) for e in found.site_entries] == [
        ("registry.example/main:1", f"{main}:3"), ("hand.example/x", f"{dropin}:3")]


def test_files_after_pinctls_dropin_override_it(main: pathlib.Path) -> None:
    d = dropins(main)
    write(d / PINCTL_DROPIN_NAME, render_dropin([], [("p.example/a", "pin")]))
    later = write(d / "zzz-late.conf", '[crio.image]\npinned_images = ["late.example/x"]\n')
    write(d / "zzz-dir" / "a.conf", '[crio.image]\npause_image = "p.example/pause:1"\n')
    nested = write(d / "zzzz" / "b.conf", '[crio.image]\npinned_images = ["late.example/y"]\n')
    found = read_crio_config(str(main))
    assert found.overriding == (later, nested)
    assert found.pinned_from == nested
    assert [e.text for e in found.own_entries] == ["p.example/a"]
    # Files read after the drop-in replace its list themselves: none of them is carried over.
    assert [e.text for e in found.site_entries] == ["registry.example/main:1"]


@pytest.mark.parametrize(("text", "line", "message", "fix"), [
    ('[crio]\nimage = "x"\n', 2, "key 'image' under [crio] must be a table, got \"x\"", "[crio.image]"),
    ('# a comment\ncrio.image = 3\n', 2, "key 'image' under [crio] must be a table, got 3", "[crio.image]"),
    ('[[crio.image]]\npause_image = "p"\n', 1, "key 'image' under [crio] must be a table, got [a table]", "[crio.image]"),
    ('crio = "x"\n', 1, "key 'crio' must be a table, got \"x\"", "[crio]"),
    ('\ncrio = [1]\n', 2, "key 'crio' must be a table, got [1]", "[crio]"),
])
def test_crio_and_crio_image_must_be_tables_as_cri_os_decoder_says(main: pathlib.Path, text: str, line: int,
                                                                   message: str, fix: str) -> None:
    site = write(dropins(main) / "10-site.conf", text)
    with pytest.raises(ConfigError) as info:
        read_crio_config(str(main))
    assert str(info.value) == (f"{site}:{line}: {message}; CRI-O refuses this file (type mismatch) "
                               f"(write it as {fix} with its keys under it)")


def test_other_tables_under_crio_are_still_fine(main: pathlib.Path) -> None:
    write(dropins(main) / "10-site.conf", '[crio]\nroot = "/x"\n[crio.runtime]\nlog_level = "info"\n')
    assert read_crio_config(str(main)).pinned_from == str(main)


def test_a_symlinked_dropin_directory_is_refused_as_cri_o_fails_on_it(main: pathlib.Path,
                                                                       tmp_path: pathlib.Path) -> None:
    real = tmp_path / "real.d"
    write(real / "10-site.conf", '[crio.image]\npinned_images = ["site.example/a"]\n')
    dropins(main).symlink_to(real)
    with pytest.raises(ConfigError) as info:
        read_crio_config(str(main))
    assert str(info.value) == (
        f"CRI-O's drop-in directory {dropins(main)} is a symlink (to {real}); CRI-O reads it as one file and fails "
        "('is a directory'), so it reads none of the drop-ins there (replace the link with the directory it points "
        f"to, or start CRI-O with --config-dir {os.path.realpath(real)})")
    assert info.value.exit_code == 2


def test_through_proc_pid_root_a_symlinked_directory_is_named_as_cri_o_sees_it(main: pathlib.Path) -> None:
    dropins(main).symlink_to("elsewhere.d")  # relative, and dangling: refused all the same
    seen = f"/proc/{os.getpid()}/root{main}"
    with pytest.raises(ConfigError) as info:
        read_crio_config(seen)
    assert info.value.message.startswith(f"CRI-O's drop-in directory {seen}.d is a symlink (to elsewhere.d); ")
    assert info.value.hint.endswith(f"start CRI-O with --config-dir {main.parent}/elsewhere.d")


def test_symlinks_inside_the_directory_and_paths_through_proc_pid_root_are_read(main: pathlib.Path,
                                                                                 tmp_path: pathlib.Path) -> None:
    elsewhere = write(tmp_path / "kept" / "site.conf", '[crio.image]\npinned_images = ["linked.example/a"]\n')
    linked = dropins(main) / "10-linked.conf"
    linked.parent.mkdir()
    linked.symlink_to(elsewhere)
    found = read_crio_config(str(main))
    assert [e.text for e in found.pinned_images] == ["linked.example/a"] and found.pinned_from == str(linked)
    seen = f"/proc/{os.getpid()}/root{main}"  # /proc/PID/root is a link itself: only the last name counts
    through = read_crio_config(seen)
    assert [e.text for e in through.pinned_images] == ["linked.example/a"]
    assert through.pinned_from == f"/proc/{os.getpid()}/root{linked}"


def test_a_temp_name_a_killed_run_left_is_read_but_is_not_the_sites_list(main: pathlib.Path) -> None:
    temp = write(dropins(main) / ".zz-pinctl.conf.0123abcd.tmp", render_dropin([], [("pin.example/p", "pin")]))
    found = read_crio_config(str(main))
    # CRI-O reads it (its list is the last one read), but its items are pinctl's, not the site's.
    assert found.pinned_from == temp and [e.text for e in found.pinned_images] == ["pin.example/p"]
    assert [e.text for e in found.site_entries] == ["registry.example/main:1"]
    write(pathlib.Path(temp), "[crio.image]\npinned_images = [\n")  # a half-written one
    with pytest.raises(ConfigError) as info:
        read_crio_config(str(main))
    assert temp in info.value.message and info.value.hint == f"a killed pinctl run left it; remove it: rm {temp}"


def test_as_crio_sees_it_strips_only_another_processs_root() -> None:
    assert as_crio_sees_it("/proc/123/root/etc/crio/crio.conf.d/10-a.conf") == "/etc/crio/crio.conf.d/10-a.conf"
    assert as_crio_sees_it("/proc/1/root") == "/"
    for kept in ("/etc/crio/crio.conf", "/proc/self/root/etc/x", "/proc/123/rootfs/x", "/srv/proc/1/root/x",
                 "/proc/12a/root/x", "proc/1/root/x", "/proc/123/cwd/x"):
        assert as_crio_sees_it(kept) == kept


def test_render_dropin_names_site_files_as_cri_o_sees_them() -> None:
    site = [CrioEntry("s.example/a", "/proc/4242/root/etc/crio/crio.conf.d/10-site.conf", 3),
            CrioEntry("s.example/b", "/proc/4242/root/etc/crio/crio.conf", 0),
            CrioEntry("s.example/c", "/etc/crio/crio.conf", 7)]
    text = render_dropin(site, [("p.example/x", "pin")])
    assert '"s.example/a",  # site: /etc/crio/crio.conf.d/10-site.conf:3\n' in text
    assert '"s.example/b",  # site: /etc/crio/crio.conf\n' in text
    assert '"s.example/c",  # site: /etc/crio/crio.conf:7\n' in text
    assert "/proc/" not in text


def test_render_dropin_is_valid_toml_for_any_text() -> None:
    odd = ['quote"d', "back\\slash", "tab\tand\x7fdel", "é/ü:1", "emoji😀", "", "#hash", "a,b ]"]
    site = [CrioEntry("s.example/a", "/etc/crio/crio.conf.d/10\nx.conf", 2)]
    text = render_dropin(site, [(t, "pin") for t in odd] + [("s.example/a", "sync")])
    assert tomllib.loads(text)["crio"]["image"]["pinned_images"] == ["s.example/a", *odd, "s.example/a"]


def test_render_dropin_items_read_back_with_their_owner(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "c" / "crio.conf"
    odd = ['quote"d', "#hash", "x # pinctl: sync"]
    write(dropins(main) / PINCTL_DROPIN_NAME, render_dropin([], [(t, "pin") for t in odd]))
    found = read_crio_config(str(main))
    assert [(e.text, e.owner) for e in found.own_entries] == [(t, "pin") for t in odd]


def test_write_dropin_is_atomic_and_world_readable(tmp_path: pathlib.Path) -> None:
    path = crio_d(tmp_path) / PINCTL_DROPIN_NAME
    old = os.umask(0o077)
    try:
        write_dropin(str(path), "[crio.image]\n")
        write_dropin(str(path), "[crio.image]\npinned_images = []\n")
    finally:
        os.umask(old)
    assert path.read_text() == "[crio.image]\npinned_images = []\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(path.parent) == [PINCTL_DROPIN_NAME]


def test_write_dropin_without_permission_says_run_as_root(tmp_path: pathlib.Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Root writes anyway, so the refusal a non-root operator meets is made here: the rename fails.
    def refuse(_source: str, _target: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    target = crio_d(tmp_path) / PINCTL_DROPIN_NAME
    with pytest.raises(PinctlError) as info:
        write_dropin(str(target), "x")
    assert str(info.value) == f"cannot write CRI-O drop-in {target}: permission denied (run as root (sudo))"
    assert os.listdir(target.parent) == [] and sorted(os.listdir(tmp_path)) == ["crio.conf.d"]  # no temp file left


@needs_root
def test_files_others_can_change_are_refused_as_root(main: pathlib.Path, as_root: None) -> None:
    os.chown(main, NOBODY, NOBODY)
    with pytest.raises(ConfigError, match=f"^refusing {main}: "):
        read_crio_config(str(main))


def test_loader_keeps_using_it(main: pathlib.Path) -> None:
    from pinctl.config import loader

    assert loader.CRIO_DEFAULT_PATH == crio.CRIO_DEFAULT_PATH or loader.CRIO_DEFAULT_PATH.endswith("crio.conf")
    assert [p.text for p in load(from_crio=str(main)).patterns] == ["registry.example/main:1"]


# -- writing pinctl's drop-in -----------------------------------------------------------

OLD = '[crio.image]\npinned_images = [\n  "old.example/a",\n]\n'
NEW = '[crio.image]\npinned_images = [\n  "new.example/b",\n]\n'


def without_o_tmpfile(monkeypatch: pytest.MonkeyPatch, code: int = errno.EOPNOTSUPP) -> list[tuple[str, int]]:
    """os.open refuses O_TMPFILE with code, as a file system without it does; the (path, flags)
    of every other open."""
    real_open = os.open
    opened: list[tuple[str, int]] = []

    def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(code, os.strerror(code))
        opened.append((os.fspath(path), flags))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)
    return opened


@contextlib.contextmanager
def tmpfs(directory: pathlib.Path, options: str) -> Iterator[None]:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"tmpfs", os.fsencode(directory), b"tmpfs", 0, options.encode()) != 0:
        code = ctypes.get_errno()
        if code == errno.EPERM:
            pytest.skip("mounting a tmpfs is not permitted here")
        raise OSError(code, os.strerror(code), str(directory))
    try:
        yield
    finally:
        if libc.umount2(os.fsencode(directory), 0) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(directory))


def test_temp_names() -> None:
    assert (crio.TEMP_PREFIX, crio.TEMP_SUFFIX) == (".zz-pinctl.conf.", ".tmp")
    assert is_temp_name(".zz-pinctl.conf.0a1b2c3d4e5f6789.tmp") and is_temp_name(".zz-pinctl.conf.abc_XYZ.tmp")
    for name in (PINCTL_DROPIN_NAME, ".zz-pinctl.conf..tmp", ".zz-pinctl.conf.a.tmp.bak", "zz-pinctl.conf.a.tmp",
                 ".zz-pinctl.conf.a.b.tmp", ".10-site.conf.a.tmp", ".zz-pinctl.conf.a.tmp\n"):
        assert not is_temp_name(name), name


def test_the_temp_file_is_made_in_the_directory_and_named_only_once_whole(tmp_path: pathlib.Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    directory = crio_d(tmp_path)
    target = directory / PINCTL_DROPIN_NAME
    write(target, OLD)
    real_link, real_replace = os.link, os.replace
    seen: dict[str, Any] = {}

    def link(source: str, name: str, *args: Any, **kwargs: Any) -> None:
        seen["names before the link"] = sorted(os.listdir(directory))
        real_link(source, name, *args, **kwargs)

    def replace(source: str, dest: str) -> None:
        seen["source"] = os.fspath(source)
        seen["content"] = pathlib.Path(source).read_text()
        seen["mode"] = stat.S_IMODE(os.stat(source).st_mode)
        real_replace(source, dest)

    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "replace", replace)
    old = os.umask(0o077)
    try:
        write_dropin(str(target), NEW)
    finally:
        os.umask(old)
    source = seen["source"]
    assert os.path.dirname(source) == str(directory) and is_temp_name(os.path.basename(source))
    # Written while it had no name (O_TMPFILE), named complete, 0644 whatever the umask.
    assert seen["names before the link"] == [PINCTL_DROPIN_NAME]
    assert (seen["content"], seen["mode"]) == (NEW, 0o644)
    assert target.read_text() == NEW and os.listdir(directory) == [PINCTL_DROPIN_NAME]


@pytest.mark.parametrize("code", [errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL])
def test_without_o_tmpfile_a_named_temp_file_in_the_directory_is_used(tmp_path: pathlib.Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      code: int) -> None:
    directory = crio_d(tmp_path)
    target = directory / PINCTL_DROPIN_NAME
    write(target, OLD)
    opened = without_o_tmpfile(monkeypatch, code)
    old = os.umask(0o077)
    try:
        write_dropin(str(target), NEW)
    finally:
        os.umask(old)
    named = [(path, flags) for path, flags in opened if is_temp_name(os.path.basename(path))]
    assert len(named) == 1
    for flag in (os.O_CREAT, os.O_EXCL, os.O_NOFOLLOW, os.O_WRONLY):
        assert named[0][1] & flag == flag
    assert target.read_text() == NEW and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert os.listdir(directory) == [PINCTL_DROPIN_NAME]


def test_another_error_from_o_tmpfile_is_no_reason_for_a_named_file(tmp_path: pathlib.Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    directory = crio_d(tmp_path)
    target = directory / PINCTL_DROPIN_NAME
    opened = without_o_tmpfile(monkeypatch, errno.EIO)
    with pytest.raises(PinctlError) as info:
        write_dropin(str(target), NEW)
    assert str(info.value) == f"cannot write CRI-O drop-in {target}: input/output error (check {directory})"
    assert not [path for path, _ in opened if is_temp_name(os.path.basename(path))]
    assert os.listdir(directory) == []


@pytest.mark.parametrize("o_tmpfile", [True, False])
@pytest.mark.parametrize(("fails", "errno_", "said"), [("replace", errno.EIO, "input/output error"),
                                                       ("write", errno.ENOSPC, "no space left on device")])
def test_a_failed_write_leaves_the_old_dropin_whole_and_no_temp_name(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, o_tmpfile: bool, fails: str, errno_: int,
        said: str) -> None:
    # A rename that fails, or a full disk while the new text is written.
    directory = crio_d(tmp_path)
    target = directory / PINCTL_DROPIN_NAME
    write(target, OLD)
    if not o_tmpfile:
        without_o_tmpfile(monkeypatch)
    calls: list[Any] = []

    def fail(*args: Any) -> Any:
        calls.append(args)
        raise OSError(errno_, os.strerror(errno_))

    monkeypatch.setattr(os, fails, fail)
    with pytest.raises(PinctlError) as info:
        write_dropin(str(target), NEW)
    assert str(info.value) == f"cannot write CRI-O drop-in {target}: {said} (check {directory})"
    if fails == "replace":
        assert len(calls) == 1 and is_temp_name(os.path.basename(calls[0][0]))
    assert target.read_text() == OLD and os.listdir(directory) == [PINCTL_DROPIN_NAME]


def test_a_missing_directory_is_refused_in_one_line_and_not_made(tmp_path: pathlib.Path) -> None:
    directory = tmp_path / "crio" / "crio.conf.d"
    with pytest.raises(PinctlError) as info:
        write_dropin(str(directory / PINCTL_DROPIN_NAME), NEW)
    assert str(info.value) == (
        f"CRI-O's drop-in directory {directory} does not exist, and a running CRI-O reads only the drop-in "
        f"directory it found at start (create it and restart CRI-O (mkdir -p {directory} && systemctl restart "
        "crio), then run pinctl again)")
    assert "\n" not in str(info.value) and os.listdir(tmp_path) == []


def test_write_dropin_works_where_the_directory_is_a_mount_of_its_own(tmp_path: pathlib.Path) -> None:
    directory = crio_d(tmp_path)
    with tmpfs(directory, "size=64k,mode=0755"):
        assert os.stat(directory).st_dev != os.stat(tmp_path).st_dev
        target = directory / PINCTL_DROPIN_NAME
        write_dropin(str(target), OLD)
        write_dropin(str(target), NEW)
        assert target.read_text() == NEW and os.listdir(directory) == [PINCTL_DROPIN_NAME]
        # That file system full: the rename never happens, so the drop-in stays whole.
        filler = os.open(directory / "filler", os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            with pytest.raises(OSError) as full:
                while True:
                    os.write(filler, b"x" * 4096)
        finally:
            os.close(filler)
        assert full.value.errno == errno.ENOSPC
        with pytest.raises(PinctlError, match="no space left on device"):
            write_dropin(str(target), NEW + "#" * 8192 + "\n")
        assert target.read_text() == NEW
        assert sorted(os.listdir(directory)) == ["filler", PINCTL_DROPIN_NAME]


def test_stale_temps_are_removed_and_nothing_else(tmp_path: pathlib.Path) -> None:
    directory = crio_d(tmp_path)
    stale = [write(directory / ".zz-pinctl.conf.0123456789abcdef.tmp", "[crio.image]\npinned_images = [\n"),
             write(directory / ".zz-pinctl.conf.abc_XYZ.tmp", NEW)]
    outside = write(tmp_path / "elsewhere.tmp", "x")
    write(directory / ".zz-pinctl.conf.1.tmp.bak", NEW)
    write(directory / "10-site.conf", OLD)
    (directory / ".zz-pinctl.conf.link.tmp").symlink_to(outside)
    (directory / ".zz-pinctl.conf.dir.tmp").mkdir()
    assert remove_stale_temps(str(directory)) == stale
    assert sorted(os.listdir(directory)) == [
        ".zz-pinctl.conf.1.tmp.bak", ".zz-pinctl.conf.dir.tmp", ".zz-pinctl.conf.link.tmp", "10-site.conf"]
    assert pathlib.Path(outside).read_text() == "x"
    assert remove_stale_temps(str(tmp_path / "none")) == []


@needs_root
def test_as_root_a_temp_name_another_user_owns_is_kept(tmp_path: pathlib.Path, as_root: None) -> None:
    directory = crio_d(tmp_path)
    theirs = write(directory / ".zz-pinctl.conf.theirs.tmp", "x")
    os.chown(theirs, NOBODY, NOBODY)
    ours = write(directory / ".zz-pinctl.conf.ours.tmp", "x")
    assert remove_stale_temps(str(directory)) == [ours]
    assert os.listdir(directory) == [".zz-pinctl.conf.theirs.tmp"]



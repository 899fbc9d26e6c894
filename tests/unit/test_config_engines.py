"""The engines' own configuration beside pinctl's: CRI-O's pinned_images (crio.conf and its
drop-ins, walked in Go's order, held to the same ownership rules as root), containerd's sandbox
image from its config, engine socket paths that cannot be resolved, and how pattern_dialect
applies to pinctl's patterns next to CRI-O's."""

from __future__ import annotations

import os
import pathlib

import pytest

from pinctl.backends._grpc import check_socket
from pinctl.config.containerd import read_sandbox_image
from pinctl.config import loader as config
from pinctl.config.loader import PatternEntry
from pinctl.errors import ConfigError, UsageError

from .config_helpers import (
    NOBODY,
    as_root_fixture,  # noqa: F401  (the as_root fixture)
    deadline,
    directory_refusal,
    isolated_config,  # noqa: F401  (the autouse fixture: no machine /etc, a non-root user)
    load,
    needs_root,
    symlink_loop,
    write,
)

# -- CRI-O -------------------------------------------------------------------------------


@pytest.fixture
def crio(tmp_path: pathlib.Path) -> pathlib.Path:
    main = tmp_path / "crio" / "crio.conf"
    write(main, '[crio]\nroot = "/var/lib/containers"\n[crio.image]\npause_image = "registry.example/pause:3.9"\n'
                'pinned_images = ["registry.example/main:1"]\n')
    return main


def test_crio_main_file_patterns(crio: pathlib.Path) -> None:
    assert config.read_crio_patterns(str(crio)) == [PatternEntry("registry.example/main:1", f"crio {crio}", "crio")]


def test_crio_dropins_replace_the_key_last_file_wins(crio: pathlib.Path) -> None:
    dropins = pathlib.Path(f"{crio}.d")
    write(dropins / "00-base.conf", '[crio.image]\npinned_images = ["registry.example/base:1"]\n')
    winner = write(dropins / "10-team" / "a.conf",
                   '[crio.image]\npinned_images = ["example.test/x", "example.test/y"]\n')
    write(dropins / "20-unrelated.conf", '[crio.runtime]\nlog_level = "debug"\n[crio.image]\npause_image = "p"\n')
    assert config.read_crio_patterns(str(crio)) == [
        PatternEntry("example.test/x", f"crio {winner}", "crio"),
        PatternEntry("example.test/y", f"crio {winner}", "crio"),
    ]


def test_crio_walks_dropins_in_go_order(crio: pathlib.Path) -> None:
    # filepath.Walk visits "a" then "a/z.conf" then "b.conf": the nested file does not win.
    dropins = pathlib.Path(f"{crio}.d")
    write(dropins / "a" / "z.conf", '[crio.image]\npinned_images = ["example.test/nested"]\n')
    last = write(dropins / "b", '[crio.image]\npinned_images = ["example.test/any-name"]\n')
    assert config.read_crio_patterns(str(crio)) == [PatternEntry("example.test/any-name", f"crio {last}", "crio")]


def test_crio_dropin_can_empty_the_list(crio: pathlib.Path) -> None:
    write(pathlib.Path(f"{crio}.d") / "99-none.conf", "[crio.image]\npinned_images = []\n")
    assert config.read_crio_patterns(str(crio)) == []


def test_crio_explicit_missing_main_file_is_an_error(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "crio" / "crio.conf"
    write(pathlib.Path(f"{missing}.d") / "10.conf", '[crio.image]\npinned_images = ["example.test/a"]\n')
    with pytest.raises(ConfigError, match="crio.conf does not exist"):
        config.read_crio_patterns(str(missing))


def test_crio_default_main_file_may_be_missing_beside_dropins() -> None:
    dropin = write(pathlib.Path(f"{config.CRIO_DEFAULT_PATH}.d") / "10-crio.conf",
                   '[crio.image]\npinned_images = ["example.test/a"]\n')
    assert config.read_crio_patterns(config.CRIO_DEFAULT_PATH) == [
        PatternEntry("example.test/a", f"crio {dropin}", "crio")]


def test_crio_default_with_no_config_at_all_is_an_error() -> None:
    with pytest.raises(ConfigError, match="no CRI-O config"):
        config.read_crio_patterns(config.CRIO_DEFAULT_PATH)


def test_crio_bad_pinned_images_names_file_and_line(crio: pathlib.Path) -> None:
    bad = write(pathlib.Path(f"{crio}.d") / "10.conf", '[crio.image]\n\npinned_images = "example.test/a"\n')
    with pytest.raises(ConfigError) as info:
        config.read_crio_patterns(str(crio))
    assert str(info.value).startswith(f"{bad}:3: key 'pinned_images' must be a list of strings")


def test_crio_syntax_error_names_file_and_line(crio: pathlib.Path) -> None:
    bad = write(pathlib.Path(f"{crio}.d") / "10.conf", "[crio.image\n")
    with pytest.raises(ConfigError, match=f"^{bad}:1: "):
        config.read_crio_patterns(str(crio))


@needs_root
def test_crio_files_writable_by_others_are_refused_as_root(crio: pathlib.Path, as_root: None) -> None:
    os.chown(crio, NOBODY, NOBODY)
    with pytest.raises(ConfigError, match=f"^refusing {crio}: "):
        config.read_crio_patterns(str(crio))


@pytest.mark.parametrize("where", ["main", "dropin"])
@pytest.mark.parametrize("what", ["loop", "fifo", "dangling"])
def test_crio_files_that_cannot_be_read_are_errors(crio: pathlib.Path, where: str, what: str) -> None:
    dropins = pathlib.Path(f"{crio}.d")
    target = crio if where == "main" else dropins / "10.conf"
    target.parent.mkdir(exist_ok=True)
    target.unlink(missing_ok=True)
    if what == "loop":
        symlink_loop(target.parent, target.name)
    elif what == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to(target.parent / "gone.conf")
    with deadline(5), pytest.raises(ConfigError) as info:
        config.read_crio_patterns(str(crio))
    assert info.value.exit_code == 2 and str(target) in str(info.value) and "\n" not in str(info.value)


def test_crio_nested_too_deep_is_an_error(crio: pathlib.Path) -> None:
    write(crio, "[crio.image]\npinned_images = " + "[" * 50000 + "\n")
    with pytest.raises(ConfigError, match=f"^{crio}: nested too deeply"):
        config.read_crio_patterns(str(crio))


@needs_root
def test_crio_directories_others_can_change_are_refused_as_root(crio: pathlib.Path, as_root: None) -> None:
    nested = pathlib.Path(f"{crio}.d") / "10-team"
    write(nested / "a.conf", '[crio.image]\npinned_images = ["example.test/x"]\n')
    nested.chmod(0o777)
    with pytest.raises(ConfigError) as info:
        config.read_crio_patterns(str(crio))
    assert str(info.value).startswith(f"refusing {nested}: it is writable by a user other than root")
    nested.chmod(0o755)
    crio.parent.chmod(0o777)
    with pytest.raises(ConfigError) as info:
        config.read_crio_patterns(str(crio))
    assert str(info.value) == directory_refusal(crio, crio.parent)


def test_load_adds_crio_patterns_after_pinctls(tmp_path: pathlib.Path, crio: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, 'pinned_images = ["registry.example/own:1"]\n')
    cfg = load(main, from_crio=str(crio))
    assert cfg.patterns == [
        PatternEntry("registry.example/own:1", f"{main}:1", "pinctl"),
        PatternEntry("registry.example/main:1", f"crio {crio}", "crio"),
    ]
    assert cfg.files == [str(main), str(crio)]


# -- containerd's config and the engines' sockets -----------------------------------------


def test_containerd_config_gives_the_sandbox_image(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path / "containerd.toml", '[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "p.example/pause:3"\n')
    assert read_sandbox_image(path) == "p.example/pause:3"


@pytest.mark.parametrize("what, expected", [
    ("loop", "cannot read containerd config {path}: too many levels of symbolic links (fix --containerd-config)"),
    ("fifo", "containerd config {path} is a FIFO, not a regular file (fix --containerd-config)"),
    ("nested", "containerd config {path}: nested too deeply to read (fix the file)"),
])
def test_containerd_config_that_cannot_be_read_is_a_config_error(tmp_path: pathlib.Path, what: str,
                                                                 expected: str) -> None:
    path = tmp_path / "containerd.toml"
    if what == "loop":
        symlink_loop(tmp_path, path.name)
    elif what == "fifo":
        os.mkfifo(path)
    else:
        write(path, "version = 2\nx = " + "[" * 50000 + "\n")
    with deadline(5), pytest.raises(ConfigError) as info:
        read_sandbox_image(str(path))
    assert info.value.exit_code == 2 and str(info.value) == expected.format(path=path)


@needs_root
def test_containerd_config_is_not_held_to_root_ownership(tmp_path: pathlib.Path, as_root: None) -> None:
    # It only names the sandbox image, which decides no pin; containerd itself reads it as it is.
    path = write(tmp_path / "open" / "containerd.toml", '[plugins.cri]\nsandbox_image = "p.example/pause:3"\n', 0o666)
    (tmp_path / "open").chmod(0o777)
    assert read_sandbox_image(path) == "p.example/pause:3"


@pytest.mark.parametrize("what", ["loop", "long"])
def test_a_socket_path_that_cannot_be_resolved_is_a_usage_error(tmp_path: pathlib.Path, what: str) -> None:
    path = symlink_loop(tmp_path, "containerd.sock") if what == "loop" else tmp_path / ("s" * 300)
    reason = "too many levels of symbolic links" if what == "loop" else "file name too long"
    with pytest.raises(UsageError) as info:
        check_socket(str(path), "containerd", "--address or CONTAINERD_ADDRESS")
    assert info.value.exit_code == 2
    assert str(info.value) == (f"cannot use containerd socket {path}: {reason} "
                               f"(point --address or CONTAINERD_ADDRESS at containerd's socket)")


# -- dialects ----------------------------------------------------------------------------


def test_pattern_dialect_crio_in_a_file_makes_every_pinctl_entry_crio(tmp_path: pathlib.Path,
                                                                       crio: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, 'pinned_images = ["registry.example/a"]\n')
    write(tmp_path / "config.d" / "10.toml", 'pattern_dialect = "crio"\npinned_images = ["registry.example/b"]\n')
    cfg = load(main, env={"PINCTL_PINNED_IMAGES": "registry.example/c"}, from_crio=str(crio))
    assert [p.dialect for p in cfg.patterns] == ["crio"] * 4


def test_flag_dialect_overrides_the_file_for_every_pinctl_entry(tmp_path: pathlib.Path,
                                                                crio: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, 'pattern_dialect = "crio"\npinned_images = ["registry.example/a"]\n')
    cfg = load(main, flags={"pattern_dialect": "pinctl"}, from_crio=str(crio))
    assert [(p.text, p.dialect) for p in cfg.patterns] == [
        ("registry.example/a", "pinctl"), ("registry.example/main:1", "crio")]

"""What the configuration loader refuses, and how it says so (one line naming the file, the line
and the fix): TOML syntax errors, unknown keys, wrong types, bad env and flag values, and config
files or drop-ins that cannot be read (symlink loops, FIFOs, sockets, devices, nesting too deep
to read). Real files in a temporary directory; no engine."""

from __future__ import annotations

import os
import pathlib
import socket
from typing import Any

import pytest

from pinctl.config import loader as config
from pinctl.config.loader import Value
from pinctl.config.settings import KEYS

from .config_helpers import (
    config_error,
    deadline,
    isolated_config,  # noqa: F401  (the autouse fixture: no machine /etc, a non-root user)
    load,
    symlink_loop,
    write,
)

# -- strictness --------------------------------------------------------------------------


def test_syntax_error_names_file_and_line(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, 'timeout = 1\n\ncontainerd_address = /run/x.sock\n')
    message = config_error(main=main)
    assert message.startswith(f"{main}:3: ")
    assert "TOML" in message


def test_syntax_error_at_end_of_file_names_the_last_line(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, 'timeout = 1\npinned_images = [\n  "example.test/a",\n')
    assert config_error(main=main).startswith(f"{main}:3: ")


def test_syntax_error_in_a_dropin_names_the_dropin(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, "timeout = 1\n")
    dropin = write(tmp_path / "config.d" / "bad.toml", "timeout = = 2\n")
    assert config_error(main=main).startswith(f"{dropin}:1: ")


def test_not_utf8_names_the_line(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    main.write_bytes(b'timeout = 1\n# caf\xe9\n')
    assert config_error(main=main).startswith(f"{main}:2: not UTF-8")


def test_unknown_key_suggests_a_close_match(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, "timeout = 1\n  timout = 2\n")
    assert config_error(main=main) == f"{main}:2: unknown key 'timout' (did you mean 'timeout'?)"


def test_unknown_key_without_a_close_match_lists_the_keys(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, "colour = 'blue'\n")
    message = config_error(main=main)
    assert message.startswith(f"{main}:1: unknown key 'colour' (valid keys: namespaces, ")
    assert "docker_pinned_image_labels" in message


def test_a_table_is_an_unknown_key(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, "\n[settings]\ntimeout = 1\n")
    message = config_error(main=main)
    assert message.startswith(f"{main}:2: unknown key 'settings' (the file is flat")


def test_a_known_key_as_a_table_is_a_type_error(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, "[timeout]\nseconds = 1\n")
    assert config_error(main=main).startswith(f"{main}:1: key 'timeout' must be a number > 0, got a table")


WRONG_TYPES = [
    ("pinned_images", '"registry.example/a"', 'must be a list of strings, got "registry.example/a"'),
    ("pinned_images", '["registry.example/a", 3]', "must be a list of strings, item 2 is 3"),
    ("pinned_images", '["  "]', 'must not have empty items, item 1 is "  "'),
    ("pattern_dialect", '"glob"', 'must be one of "pinctl", "crio", got "glob"'),
    ("pattern_dialect", "1", 'must be one of "pinctl", "crio", got 1'),
    ("namespaces", '"k8s.io"', 'must be a list of strings, got "k8s.io"'),
    ("namespaces", "[[\"a\"]]", 'must be a list of strings, item 1 is ["a"]'),
    ("containerd_address", "5", "must be a non-empty string, got 5"),
    ("containerd_address", '""', 'must be a non-empty string, got ""'),
    ("containerd_config", "true", "must be a string, got true"),
    ("crio_config", "[1]", "must be a string, got [1]"),
    ("timeout", '"fast"', 'must be a number > 0, got "fast"'),
    ("timeout", "0", "must be a number > 0, got 0"),
    ("timeout", "-1.5", "must be a number > 0, got -1.5"),
    ("timeout", "true", "must be a number > 0, got true"),
    ("timeout", "inf", "must be a number > 0, got inf"),
    ("timeout", "nan", "must be a number > 0, got nan"),
    ("docker_host", "[]", "must be a string, got []"),
    ("docker_containerd_address", "3", "must be a string, got 3"),
    ("runtime_endpoint", "1979-05-27", "must be a string, got 1979-05-27"),
    ("docker_pinned_image_labels", '"keep"', 'must be a list of strings, got "keep"'),
    ("docker_pinned_image_labels", '["=true"]', 'items must be "key=value" or "key", item 1 is "=true"'),
    ("metrics_address", "9736", "must be a string, got 9736"),
    ("history_dir", "7", "must be a non-empty string, got 7"),
    ("kubelet_log", "7", "must be a string, got 7"),
    ("kubelet_root_dir", "7", "must be a non-empty string, got 7"),
    ("import_dirs", '"/var/lib/pinctl/images"', 'must be a list of strings, got "/var/lib/pinctl/images"'),
]


@pytest.mark.parametrize("key, literal, reason", WRONG_TYPES)
def test_wrong_type_names_file_line_key_and_fix(tmp_path: pathlib.Path, key: str, literal: str, reason: str) -> None:
    main = tmp_path / "config.toml"
    write(main, f"# comment\n{key} = {literal}\n")
    example = config._toml_literal(KEYS[key].example)
    assert config_error(main=main) == f"{main}:2: key '{key}' {reason} (e.g. {key} = {example})"


def test_every_key_has_a_wrong_type_case() -> None:
    assert {key for key, _, _ in WRONG_TYPES} == set(KEYS)


def test_every_example_is_valid_and_every_key_documented(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, "".join(f"{k} = {config._toml_literal(s.example)}\n" for k, s in KEYS.items()))
    cfg = load(main)
    for key, spec in KEYS.items():
        assert spec.help and "\n" not in spec.help and spec.type_label
        if key != "pinned_images":
            assert cfg.shown()[key].source == str(main)


def test_optional_string_set_to_empty_in_a_dropin_unsets_it(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, 'docker_host = "unix:///run/example.sock"\n')
    dropin = write(tmp_path / "config.d" / "10-local.toml", 'docker_host = ""\n')
    assert load(main).shown()["docker_host"] == Value(None, dropin)


def test_bad_env_value_names_the_variable() -> None:
    message = config_error(env={"PINCTL_PATTERN_DIALECT": "glob"})
    assert message == ("env PINCTL_PATTERN_DIALECT: key 'pattern_dialect' must be one of \"pinctl\", \"crio\", "
                       "got \"glob\" (e.g. PINCTL_PATTERN_DIALECT=crio)")


@pytest.mark.parametrize("flags, expected", [
    ({"timeout": -1}, "flag --timeout: key 'timeout' must be a number > 0, got -1"),
    ({"pattern_dialect": "glob"}, "flag --pattern-dialect: key 'pattern_dialect' must be one of"),
    ({"pinned_images": ["example.test/a", ""]}, "flag --pinned-image: key 'pinned_images' must not have empty items"),
    ({"namespaces": "k8s.io"}, "flag --namespace: key 'namespaces' must be a list of strings"),
])
def test_bad_flag_value_names_the_flag(flags: dict[str, Any], expected: str) -> None:
    assert config_error(flags=flags).startswith(expected)


# -- what cannot be read ------------------------------------------------------------------


def unix_socket(path: pathlib.Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    return listener


def named(path: pathlib.Path, how: str) -> dict[str, Any]:
    """load()'s arguments naming the main file by flag or by environment variable."""
    return {"main": path} if how == "flag" else {"env": {"PINCTL_CONFIG": str(path)}}


FIX = {"flag": "fix --config", "env": "fix PINCTL_CONFIG"}


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_symlink_loop_as_the_config_is_a_config_error(tmp_path: pathlib.Path, how: str) -> None:
    path = symlink_loop(tmp_path)
    assert config_error(**named(path, how)) == (
        f"cannot read config file {path}: too many levels of symbolic links ({FIX[how]})")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_too_long_path_as_the_config_is_a_config_error(tmp_path: pathlib.Path, how: str) -> None:
    path = tmp_path / ("x" * 300) / "config.toml"
    assert config_error(**named(path, how)) == f"cannot read config file {path}: file name too long ({FIX[how]})"


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_fifo_as_the_config_is_refused_without_blocking(tmp_path: pathlib.Path, how: str) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    with deadline(5):
        message = config_error(**named(fifo, how))
    assert message == f"config file {fifo} is a FIFO, not a regular file ({FIX[how]})"


@pytest.mark.parametrize("path, kind", [("/dev/null", "a character device"), ("/", "a directory")])
def test_other_files_that_are_not_regular_are_refused(path: str, kind: str) -> None:
    assert config_error(main=pathlib.Path(path)) == f"config file {path} is {kind}, not a regular file (fix --config)"


def test_a_socket_as_the_config_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "config.toml"
    with unix_socket(path):
        assert config_error(main=path) == f"config file {path} is a socket, not a regular file (fix --config)"


def test_a_file_swapped_for_a_fifo_after_the_first_look_is_refused(tmp_path: pathlib.Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The type seen before opening only spares devices an open; what was opened decides.
    main = write(tmp_path / "config.toml", "timeout = 1\n")
    real_open = os.open

    def swap_then_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == main and not os.path.islink(main) and os.path.isfile(main):
            os.unlink(main)
            os.mkfifo(main)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    with deadline(5):
        assert "is a FIFO, not a regular file" in config_error(main=pathlib.Path(main))


def test_a_config_nested_too_deep_is_a_config_error(tmp_path: pathlib.Path) -> None:
    main = write(tmp_path / "config.toml", "a = " + "[" * 50000 + "\n")
    assert config_error(main=pathlib.Path(main)) == (
        f"{main}: nested too deeply to read (pinctl's keys are flat: strings, numbers and lists of strings)")


@pytest.mark.parametrize(("body", "line", "said"), [
    ("timeout = 3\n" + "a" + ".a" * 50000 + " = 1\n", 2, "a key of 50,001 dotted parts"),
    ("[" + "t." * 5000 + "t]\n", 1, "a key of 5,001 dotted parts"),
    ('pinned_images = [' + ",".join(['"x:1"'] * 300_000) + "]\n", 1, "a line of 1,800,017 characters"),
])
def test_a_pathological_config_is_refused_before_the_toml_reader(tmp_path: pathlib.Path, body: str, line: int,
                                                                 said: str) -> None:
    """No real config has these, and the TOML reader is quadratic in a dotted key's parts."""
    main = write(tmp_path / "config.toml", body)
    with deadline(1):
        message = config_error(main=pathlib.Path(main))
    assert message.startswith(f"{main}:{line}: {said}") and len(message.splitlines()) == 1, message


def test_dotted_strings_in_a_long_list_are_not_keys(tmp_path: pathlib.Path) -> None:
    dotted = ", ".join(f'"r.e/a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z:{i}"' for i in range(10))
    main = write(tmp_path / "config.toml", f"pinned_images = [\n  {dotted},\n]\n")
    assert len(config.load({}, {}, config_path=main).patterns) == 10


@pytest.mark.parametrize("target", ["missing.toml", "loop", "fifo", "directory"])
def test_a_dropin_that_cannot_be_read_is_an_error_not_an_absence(tmp_path: pathlib.Path, target: str) -> None:
    # Skipping it would let sync --prune unpin whatever it held.
    main = tmp_path / "config.toml"
    write(main, 'pinned_images = ["registry.example/a"]\n')
    dropins = tmp_path / "config.d"
    write(dropins / "10-fine.toml", 'pinned_images = ["registry.example/b"]\n')
    dropin = dropins / "20-team.toml"
    expected = {
        "missing.toml": f"drop-in {dropin} is a symlink to {tmp_path / 'gone.toml'}, which does not exist "
                        f"(restore the file it points to, or remove the link)",
        "loop": f"cannot read drop-in {dropin}: too many levels of symbolic links (check {dropins})",
        "fifo": f"drop-in {dropin} is a FIFO, not a regular file (check {dropins})",
        "directory": f"drop-in {dropin} is a directory, not a regular file (check {dropins})",
    }[target]
    if target == "missing.toml":
        dropin.symlink_to(tmp_path / "gone.toml")
    elif target == "loop":
        symlink_loop(dropins, "20-team.toml")
    elif target == "fifo":
        os.mkfifo(dropin)
    else:
        dropin.mkdir()
    with deadline(5):
        assert config_error(main=main) == expected


def test_a_dangling_symlink_as_the_default_config_is_an_error() -> None:
    default = pathlib.Path(config.DEFAULT_PATH)
    default.parent.mkdir(parents=True)
    default.symlink_to(default.parent / "gone.toml")
    assert config_error().startswith(f"config file {default} is a symlink to {default.parent / 'gone.toml'}, "
                                     "which does not exist")


def test_a_symlink_loop_as_config_d_is_an_error(tmp_path: pathlib.Path) -> None:
    main = pathlib.Path(write(tmp_path / "config.toml", ""))
    loop = symlink_loop(tmp_path, "config.d")
    assert config_error(main=main) == (
        f"cannot read the drop-in directory {loop}: too many levels of symbolic links "
        f"(make it a directory of *.toml drop-ins)")


def test_a_fifo_as_config_d_is_not_a_directory(tmp_path: pathlib.Path) -> None:
    main = pathlib.Path(write(tmp_path / "config.toml", ""))
    os.mkfifo(tmp_path / "config.d")
    with deadline(5):
        assert "is not a directory" in config_error(main=main)

"""The configuration loader against real files in a temporary directory; no engine."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
from types import FrameType
from typing import Any, Iterator, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pinctl.backends._socket import check_socket
from pinctl.backends.containerd import read_sandbox_image
from pinctl.config import files as config_files
from pinctl.config import loader as config
from pinctl.config.loader import Config, PatternEntry, Value
from pinctl.config.settings import KEYS
from pinctl.errors import ConfigError, UsageError

REAL_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not REAL_ROOT, reason="chown to another uid needs root")
NOBODY = 65534
KERNEL_EUID = config_files._euid  # before the autouse fixture replaces it


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    """Never read the machine's /etc, and act as a non-root user unless a test says otherwise."""
    monkeypatch.setattr(config, "DEFAULT_PATH", str(tmp_path / "etc-default" / "config.toml"))
    monkeypatch.setattr(config, "CRIO_DEFAULT_PATH", str(tmp_path / "etc-crio-default" / "crio.conf"))
    monkeypatch.setattr(config_files, "_euid", lambda: 1000)


@pytest.fixture
def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_files, "_euid", lambda: 0)


def write(path: pathlib.Path, text: str, mode: int = 0o644) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def load(main: Optional[pathlib.Path] = None, flags: Optional[dict[str, Any]] = None,
         env: Optional[dict[str, str]] = None, from_crio: Optional[str] = None) -> Config:
    return config.load(flags, env or {}, config_path=str(main) if main else None, from_crio=from_crio)


def config_error(**kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load(**kwargs)
    assert info.value.exit_code == 2
    assert "\n" not in str(info.value)
    return str(info.value)


def texts(cfg: Config) -> list[str]:
    return [p.text for p in cfg.patterns]


# -- defaults and the main file ----------------------------------------------------------


def test_defaults_when_the_default_file_is_missing() -> None:
    cfg = load()
    assert cfg.shown() == {
        "pattern_dialect": Value("pinctl", "default"),
        "namespaces": Value((), "default"),
        "containerd_address": Value("/run/containerd/containerd.sock", "default"),
        "containerd_config": Value(None, "default"),
        "timeout": Value(2.0, "default"),
        "docker_host": Value(None, "default"),
        "docker_containerd_address": Value(None, "default"),
        "runtime_endpoint": Value(None, "default"),
        "docker_pinned_image_labels": Value((), "default"),
        "import_dirs": Value((), "default"),
        "metrics_address": Value(None, "default"),
    }
    assert cfg.patterns == [] and cfg.files == []


def test_the_default_file_is_read_when_present() -> None:
    path = write(pathlib.Path(config.DEFAULT_PATH), 'containerd_address = "/run/example.sock"\n')
    cfg = load()
    assert cfg.shown()["containerd_address"] == Value("/run/example.sock", path)
    assert cfg.files == [path]


def test_main_file_sets_every_key(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    path = write(main, """
pinned_images = ["registry.example/a:1"]
pattern_dialect = "crio"
namespaces = ["k8s.io", "moby"]
containerd_address = "/run/example/containerd.sock"
containerd_config = "/etc/example/containerd.toml"
timeout = 7
docker_host = "unix:///run/example-docker.sock"
docker_containerd_address = "/run/example-docker/containerd.sock"
runtime_endpoint = "unix:///run/example-cri.sock"
docker_pinned_image_labels = ["team.example/keep=true", "keep"]
import_dirs = ["/var/lib/pinctl/images"]
metrics_address = "127.0.0.1:9736"
""")
    cfg = load(main)
    assert {k: v.value for k, v in cfg.shown().items()} == {
        "pattern_dialect": "crio",
        "namespaces": ("k8s.io", "moby"),
        "containerd_address": "/run/example/containerd.sock",
        "containerd_config": "/etc/example/containerd.toml",
        "timeout": 7.0,
        "docker_host": "unix:///run/example-docker.sock",
        "docker_containerd_address": "/run/example-docker/containerd.sock",
        "runtime_endpoint": "unix:///run/example-cri.sock",
        "docker_pinned_image_labels": ("team.example/keep=true", "keep"),
        "import_dirs": ("/var/lib/pinctl/images",),
        "metrics_address": "127.0.0.1:9736",
    }
    assert isinstance(cfg.settings.timeout, float)
    assert {v.source for v in cfg.shown().values()} == {path}
    assert cfg.patterns == [PatternEntry("registry.example/a:1", f"{path}:2", "crio")]
    assert cfg.files == [path]


def test_defaulted_reads_sources_but_points_pinned_images_to_patterns() -> None:
    cfg = load()
    assert cfg.settings.timeout == 2.0 and cfg.defaulted("timeout")
    with pytest.raises(KeyError, match="patterns"):
        cfg.defaulted("pinned_images")


def test_explicit_missing_file_is_an_error(tmp_path: pathlib.Path) -> None:
    message = config_error(main=tmp_path / "nope.toml")
    assert f"{tmp_path / 'nope.toml'} does not exist" in message
    assert "--config" in message


def test_missing_file_named_by_env_is_an_error(tmp_path: pathlib.Path) -> None:
    message = config_error(env={"PINCTL_CONFIG": str(tmp_path / "nope.toml")})
    assert "nope.toml does not exist" in message and "PINCTL_CONFIG" in message


def test_env_names_the_main_file_and_its_dropins(tmp_path: pathlib.Path) -> None:
    main = write(tmp_path / "alt" / "pinctl.toml", "timeout = 3\n")
    dropin = write(tmp_path / "alt" / "config.d" / "a.toml", "timeout = 4\n")
    cfg = load(env={"PINCTL_CONFIG": main})
    assert cfg.shown()["timeout"] == Value(4.0, dropin)
    assert cfg.files == [main, dropin]


def test_config_flag_beats_env(tmp_path: pathlib.Path) -> None:
    flag_file = tmp_path / "flag.toml"
    write(flag_file, "timeout = 3\n")
    env_file = write(tmp_path / "env" / "env.toml", "timeout = 9\n")
    assert load(flag_file, env={"PINCTL_CONFIG": env_file}).settings.timeout == 3.0


def test_empty_pinctl_config_env_means_the_default() -> None:
    path = write(pathlib.Path(config.DEFAULT_PATH), "timeout = 5\n")
    assert load(env={"PINCTL_CONFIG": ""}).shown()["timeout"] == Value(5.0, path)


# -- drop-ins ----------------------------------------------------------------------------


def test_dropins_apply_in_lexical_order_and_replace_whole_values(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, 'timeout = 1\nnamespaces = ["a", "b"]\ncontainerd_address = "/run/main.sock"\n')
    first = write(tmp_path / "config.d" / "10-first.toml", 'timeout = 3\nnamespaces = ["c"]\n')
    last = write(tmp_path / "config.d" / "2-last.toml", "timeout = 5\n")  # "2" sorts after "10"
    write(tmp_path / "config.d" / "99-ignored.conf", "timeout = 100\n")
    write(tmp_path / "config.d" / ".99-editor-lock.toml", "timeout = 100\n")
    cfg = load(main)
    assert cfg.shown()["timeout"] == Value(5.0, last)
    assert cfg.shown()["namespaces"] == Value(("c",), first)
    assert cfg.shown()["containerd_address"] == Value("/run/main.sock", str(main))
    assert cfg.files == [str(main), first, last]


def test_dropins_are_read_without_a_default_main_file() -> None:
    dropin = write(pathlib.Path(config.DEFAULT_PATH).parent / "config.d" / "team.toml", "timeout = 4\n")
    cfg = load()
    assert cfg.shown()["timeout"] == Value(4.0, dropin)
    assert cfg.files == [dropin]


def test_missing_dropin_directory_is_fine(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, "timeout = 1\n")
    assert load(main).files == [str(main)]


def test_dropin_directory_that_is_a_file_is_an_error(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, "")
    write(tmp_path / "config.d", "")
    assert "is not a directory" in config_error(main=main)


def test_pinned_images_accumulate_from_every_source_with_lines(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, """# platform patterns
pinned_images = [
    "registry.example/platform/*",   # the base

    'registry.example/pause:3.9',
]
timeout = 3
""")
    team_a = write(tmp_path / "config.d" / "10-team-a.toml", 'timeout = 4\n\npinned_images = ["example.test/a/*"]\n')
    team_b = write(tmp_path / "config.d" / "20-team-b.toml",
                   '"pinned_images" = ["example.test/b:1",\n  "example.test/b:2"]\n')
    cfg = load(main, env={"PINCTL_PINNED_IMAGES": "example.test/env:1"},
               flags={"pinned_images": ["example.test/flag:1"]})
    assert cfg.patterns == [
        PatternEntry("registry.example/platform/*", f"{main}:3", "pinctl"),
        PatternEntry("registry.example/pause:3.9", f"{main}:5", "pinctl"),
        PatternEntry("example.test/a/*", f"{team_a}:3", "pinctl"),
        PatternEntry("example.test/b:1", f"{team_b}:1", "pinctl"),
        PatternEntry("example.test/b:2", f"{team_b}:2", "pinctl"),
        PatternEntry("example.test/env:1", "env PINCTL_PINNED_IMAGES", "pinctl"),
        PatternEntry("example.test/flag:1", "flag --pinned-image", "pinctl"),
    ]
    assert "pinned_images" not in cfg.sources


def test_a_later_empty_list_does_not_erase_earlier_patterns(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, 'pinned_images = ["registry.example/keep:1"]\n')
    write(tmp_path / "config.d" / "50-other-team.toml", "pinned_images = []\n")
    assert texts(load(main)) == ["registry.example/keep:1"]


def test_repeated_pattern_gets_each_of_its_lines(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, 'pinned_images = [\n  "example.test/x",\n  "example.test/x",\n]\n')
    assert [p.source for p in load(main).patterns] == [f"{main}:2", f"{main}:3"]


def test_escaped_pattern_falls_back_to_the_key_line(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, 'timeout = 1\npinned_images = [\n  "example.test/\\u0061pp",\n]\n')
    assert load(main).patterns == [PatternEntry("example.test/app", f"{main}:2", "pinctl")]


def test_quotes_in_comments_are_not_patterns(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, "\n".join([
        "pinned_images = [",
        '  # "registry.example/a" moved here from the old file',
        """  "registry.example/a",  # 'quoted' note""",
        "  'registry.example/b',",
        '  "registry.example/#c",',
        "]",
    ]) + "\n")
    assert [p.source for p in load(main).patterns] == [f"{main}:3", f"{main}:4", f"{main}:5"]


def test_multiline_strings_get_the_line_they_start_on(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, "\n".join([
        "pinned_images = [",
        '  """registry.example/a""",',
        "  '''registry.example/b''',",
        '  """',
        'registry.example/c""",',  # the newline after the opening quotes is no part of the string
        '  "registry.example/d",',
        "]",
    ]) + "\n")
    assert [(p.text, p.source) for p in load(main).patterns] == [
        ("registry.example/a", f"{main}:2"), ("registry.example/b", f"{main}:3"),
        ("registry.example/c", f"{main}:1"), ("registry.example/d", f"{main}:6")]


QUOTES = ['"{}"', "'{}'", '"""{}"""', "'''{}'''"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text("ab/:*#[]' ", min_size=1, max_size=8), st.sampled_from(QUOTES),
                          st.sampled_from(["", "  # a 'note' with ] and \"quotes\"", ", # ]"])), max_size=6))
def test_each_way_of_quoting_gets_its_line(written: list[tuple[str, str, str]]) -> None:
    # TOML cannot hold a ' in a literal string, nor pinctl an empty pattern.
    kept = [(text, quote, after) for text, quote, after in written
            if text.strip() and not ("'" in text and quote.startswith("'"))]
    lines = ["pinned_images = [  # ']' \"x\""]
    lines += ["  " + quote.format(text) + ("" if after.startswith(",") else ",") + after for text, quote, after in kept]
    lines.append("]")
    with tempfile.TemporaryDirectory() as directory:
        main = pathlib.Path(directory) / "config.toml"
        write(main, "\n".join(lines) + "\n")
        cfg = config.load(None, {}, config_path=str(main))
    assert cfg.patterns == [PatternEntry(text, f"{main}:{n}", "pinctl") for n, (text, _, _) in enumerate(kept, 2)]


@settings(max_examples=50, deadline=None)
@given(
    items=st.lists(st.text("abcdefghijklmnopqrstuvwxyz0123456789./:*-_", min_size=1, max_size=12), max_size=6),
    gaps=st.lists(st.integers(0, 2), min_size=7, max_size=7),
)
def test_every_pattern_gets_the_line_it_is_written_on(items: list[str], gaps: list[int]) -> None:
    lines = ["timeout = 1", "pinned_images = ["]
    expected = []
    for item, gap in zip(items, gaps):
        lines += ["  # note"] * gap
        lines.append(f'  "{item}",')
        expected.append(len(lines))
    lines += ["]", 'namespaces = ["k8s.io"]']
    with tempfile.TemporaryDirectory() as directory:
        main = pathlib.Path(directory) / "config.toml"
        write(main, "\n".join(lines) + "\n")
        cfg = config.load(None, {}, config_path=str(main))
    assert cfg.patterns == [PatternEntry(i, f"{main}:{n}", "pinctl") for i, n in zip(items, expected)]


# -- environment and flags ---------------------------------------------------------------


ENV_CASES = [
    ("PINCTL_PATTERN_DIALECT", "crio", "pattern_dialect", "crio"),
    ("CONTAINERD_NAMESPACE", "example", "namespaces", ("example",)),
    ("CONTAINERD_ADDRESS", "/run/env.sock", "containerd_address", "/run/env.sock"),
    ("PINCTL_CONTAINERD_CONFIG", "/etc/env/containerd.toml", "containerd_config", "/etc/env/containerd.toml"),
    ("DOCKER_HOST", "tcp://example.test:2375", "docker_host", "tcp://example.test:2375"),
    ("CONTAINER_RUNTIME_ENDPOINT", "unix:///run/env-cri.sock", "runtime_endpoint", "unix:///run/env-cri.sock"),
]


@pytest.mark.parametrize("var, raw, key, expected", ENV_CASES)
def test_env_beats_the_files(tmp_path: pathlib.Path, var: str, raw: str, key: str, expected: Any) -> None:
    main = tmp_path / "config.toml"
    write(main, f"{key} = {config._toml_literal(KEYS[key].example)}\n")
    assert load(main, env={var: raw}).shown()[key] == Value(expected, f"env {var}")


@pytest.mark.parametrize("var, raw, key, expected", ENV_CASES)
def test_empty_env_counts_as_unset(tmp_path: pathlib.Path, var: str, raw: str, key: str, expected: Any) -> None:
    main = tmp_path / "config.toml"
    write(main, f"{key} = {config._toml_literal(KEYS[key].example)}\n")
    assert load(main, env={var: ""}).shown()[key].source == str(main)
    assert load(main, env={var: "  "}).shown()[key].source == str(main)


def test_containerd_namespace_is_one_name() -> None:
    assert load(env={"CONTAINERD_NAMESPACE": " k8s.io "}).settings.namespaces == ("k8s.io",)
    # ctr reads it as one name too; a comma is not a list separator there.
    assert load(env={"CONTAINERD_NAMESPACE": "k8s.io,moby"}).settings.namespaces == ("k8s.io,moby",)


def test_pinned_images_env_is_split_on_commas() -> None:
    cfg = load(env={"PINCTL_PINNED_IMAGES": " registry.example/a:1 , ,example.test/b/* ,, "})
    assert cfg.patterns == [
        PatternEntry("registry.example/a:1", "env PINCTL_PINNED_IMAGES", "pinctl"),
        PatternEntry("example.test/b/*", "env PINCTL_PINNED_IMAGES", "pinctl"),
    ]


def test_pinned_images_env_of_only_separators_adds_nothing() -> None:
    assert load(env={"PINCTL_PINNED_IMAGES": " , ,"}).patterns == []


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text(" \t", max_size=2), st.text("abcxyz019./:*@", max_size=8),
                          st.text(" \t", max_size=2))))
def test_pinned_images_env_keeps_each_nonblank_item_trimmed(parts: list[tuple[str, str, str]]) -> None:
    raw = ",".join(before + item + after for before, item, after in parts)
    cfg = config.load(None, {"PINCTL_PINNED_IMAGES": raw, "PINCTL_CONFIG": ""})
    assert texts(cfg) == [item for _, item, _ in parts if item]


def test_timeout_has_no_env() -> None:
    assert load(env={"PINCTL_TIMEOUT": "9", "TIMEOUT": "9"}).shown()["timeout"] == Value(2.0, "default")


def test_flags_beat_env_and_files(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, 'timeout = 3\npattern_dialect = "crio"\nnamespaces = ["file"]\n')
    env = {"PINCTL_PATTERN_DIALECT": "crio", "CONTAINERD_NAMESPACE": "env", "CONTAINERD_ADDRESS": "/run/env.sock"}
    flags = {"timeout": 0.5, "pattern_dialect": "pinctl", "namespaces": ("flag-a", "flag-b"),
             "containerd_address": "/run/flag.sock", "containerd_config": "/etc/flag.toml",
             "docker_host": "unix:///run/flag-docker.sock", "runtime_endpoint": "unix:///run/flag-cri.sock"}
    cfg = load(main, flags=flags, env=env)
    assert cfg.shown()["timeout"] == Value(0.5, "flag")
    assert cfg.shown()["pattern_dialect"] == Value("pinctl", "flag")
    assert cfg.shown()["namespaces"] == Value(("flag-a", "flag-b"), "flag")
    assert cfg.shown()["containerd_address"] == Value("/run/flag.sock", "flag")
    assert cfg.shown()["containerd_config"] == Value("/etc/flag.toml", "flag")
    assert cfg.shown()["docker_host"] == Value("unix:///run/flag-docker.sock", "flag")
    assert cfg.shown()["runtime_endpoint"] == Value("unix:///run/flag-cri.sock", "flag")


def test_flags_not_given_leave_lower_sources(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, 'timeout = 3\nnamespaces = ["file"]\npinned_images = ["example.test/a"]\n')
    cfg = load(main, flags={"timeout": None, "namespaces": [], "pinned_images": (), "pattern_dialect": None})
    assert cfg.shown()["timeout"].source == cfg.shown()["namespaces"].source == str(main)
    assert texts(cfg) == ["example.test/a"]


@pytest.mark.parametrize("key", ["pinned_image", "docker_pinned_image_labels", "config_path"])
def test_a_flag_key_that_sets_nothing_is_a_programming_error(key: str) -> None:
    with pytest.raises(ValueError, match=repr(key)):
        load(flags={key: ["x"]})


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


def directory_refusal(path: pathlib.Path, directory: pathlib.Path) -> str:
    st = directory.stat()
    return (f"refusing {path}: directory {directory} is writable by a user other than root (owner uid {st.st_uid}, "
            f"mode {st.st_mode & 0o7777:04o}), who could replace what pinctl reads there "
            f"(chown root:root {directory} && chmod go-w {directory})")


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


# -- what cannot be read ------------------------------------------------------------------


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail where a blocking open (of a FIFO, say) would hang the test."""
    def expire(signum: int, frame: Optional[FrameType]) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def symlink_loop(directory: pathlib.Path, name: str = "config.toml") -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).symlink_to(directory / f"{name}.other")
    (directory / f"{name}.other").symlink_to(directory / name)
    return directory / name


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


# -- the module --------------------------------------------------------------------------


def test_import_stays_light() -> None:
    heavy = "('tomllib', 'tomli', 'difflib', 'json', 'click')"
    code = f"import sys, pinctl.config.loader; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- how config show and config lint put it ----------------------------------------------


def test_lint_names_each_location_once(tmp_path: pathlib.Path) -> None:
    from pinctl.pins import lint
    from pinctl.render import output

    main = tmp_path / "config.toml"
    write(main, 'pinned_images = [\n  "a.example/*/b",\n  "registry.example/*",\n  "registry.example/x:1",\n]\n')
    out = io.StringIO()
    output.print_problems(lint.lint(load(main).patterns, None), "table", out)
    assert out.getvalue().splitlines() == [
        f"{main}:2: invalid: pattern 'a.example/*/b' has a * that is not at the end "
        "(a * may only end a prefix (registry.example/team/*) or surround a keyword (*app*))",
        f"{main}:4: shadowed: 'registry.example/x:1' is shadowed by 'registry.example/*' ({main}:3)",
    ]


@pytest.mark.parametrize("text", ["", "namespaces = []\n"])
def test_config_show_says_what_no_namespaces_means(tmp_path: pathlib.Path, text: str) -> None:
    from pinctl.render import output

    cfg = load(pathlib.Path(write(tmp_path / "config.toml", text)))
    out = io.StringIO()
    output.print_config(cfg, "table", out)
    row = next(line for line in out.getvalue().splitlines() if line.startswith("namespaces"))
    assert row.split()[1:-1] == "(k8s.io and moby where they exist)".split()
    out = io.StringIO()
    output.print_config(cfg, "json", out)
    assert json.loads(out.getvalue())["config"]["namespaces"]["value"] == []

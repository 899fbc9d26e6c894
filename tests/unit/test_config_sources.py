"""Where the configuration loader finds its values, against real files in a temporary directory
(no engine): the default and the main file, drop-ins, environment and flags in that order of
precedence; the file and line each pinned_images pattern is credited with, however it is quoted;
and how config show and config lint report them."""

from __future__ import annotations

import io
import json
import pathlib
import subprocess
import sys
import tempfile
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pinctl.config import loader as config
from pinctl.config.loader import PatternEntry, Value
from pinctl.config.settings import KEYS

from .config_helpers import (
    config_error,
    isolated_config,  # noqa: F401  (the autouse fixture: no machine /etc, a non-root user)
    load,
    texts,
    write,
)

# -- defaults and the main file ----------------------------------------------------------


def test_defaults_when_the_default_file_is_missing() -> None:
    cfg = load()
    assert cfg.shown() == {
        "pattern_dialect": Value("pinctl", "default"),
        "namespaces": Value((), "default"),
        "containerd_address": Value("/run/containerd/containerd.sock", "default"),
        "containerd_config": Value(None, "default"),
        "crio_config": Value(None, "default"),
        "kubelet_root_dir": Value("/var/lib/kubelet", "default"),
        "timeout": Value(2.0, "default"),
        "docker_host": Value(None, "default"),
        "docker_containerd_address": Value(None, "default"),
        "runtime_endpoint": Value(None, "default"),
        "docker_pinned_image_labels": Value((), "default"),
        "import_dirs": Value((), "default"),
        "history_dir": Value("/var/lib/pinctl/history", "default"),
        "kubelet_log": Value(None, "default"),
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
crio_config = "/etc/example/crio.conf"
kubelet_root_dir = "/srv/example/kubelet"
timeout = 7
docker_host = "unix:///run/example-docker.sock"
docker_containerd_address = "/run/example-docker/containerd.sock"
runtime_endpoint = "unix:///run/example-cri.sock"
docker_pinned_image_labels = ["team.example/keep=true", "keep"]
import_dirs = ["/var/lib/pinctl/images"]
history_dir = "/srv/example/history"
kubelet_log = "/var/log/example/kubelet.log"
metrics_address = "127.0.0.1:9736"
""")
    cfg = load(main)
    assert {k: v.value for k, v in cfg.shown().items()} == {
        "pattern_dialect": "crio",
        "namespaces": ("k8s.io", "moby"),
        "containerd_address": "/run/example/containerd.sock",
        "containerd_config": "/etc/example/containerd.toml",
        "crio_config": "/etc/example/crio.conf",
        "kubelet_root_dir": "/srv/example/kubelet",
        "timeout": 7.0,
        "docker_host": "unix:///run/example-docker.sock",
        "docker_containerd_address": "/run/example-docker/containerd.sock",
        "runtime_endpoint": "unix:///run/example-cri.sock",
        "docker_pinned_image_labels": ("team.example/keep=true", "keep"),
        "import_dirs": ("/var/lib/pinctl/images",),
        "history_dir": "/srv/example/history",
        "kubelet_log": "/var/log/example/kubelet.log",
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
    ("PINCTL_CRIO_CONFIG", "/etc/env/crio.conf", "crio_config", "/etc/env/crio.conf"),
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
             "crio_config": "/etc/flag-crio.conf",
             "docker_host": "unix:///run/flag-docker.sock", "runtime_endpoint": "unix:///run/flag-cri.sock"}
    cfg = load(main, flags=flags, env=env)
    assert cfg.shown()["timeout"] == Value(0.5, "flag")
    assert cfg.shown()["pattern_dialect"] == Value("pinctl", "flag")
    assert cfg.shown()["namespaces"] == Value(("flag-a", "flag-b"), "flag")
    assert cfg.shown()["containerd_address"] == Value("/run/flag.sock", "flag")
    assert cfg.shown()["containerd_config"] == Value("/etc/flag.toml", "flag")
    assert cfg.shown()["crio_config"] == Value("/etc/flag-crio.conf", "flag")
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


def test_from_file_is_true_only_for_a_value_a_file_set(tmp_path: pathlib.Path) -> None:
    # open_node reads a namespace a config file names but the node lacks as empty; a -n is refused.
    main = tmp_path / "config.toml"
    write(main, 'namespaces = ["k8s.io", "moby"]\n')
    assert load(main).from_file("namespaces") and not load(main).from_file("timeout")
    assert not load(main, flags={"namespaces": ("k8s.io",)}).from_file("namespaces")
    assert not load(main, env={"CONTAINERD_NAMESPACE": "k8s.io"}).from_file("namespaces")
    assert not load().from_file("namespaces")


def test_config_show_names_the_files_it_read_on_stderr(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pinctl.render import output

    main = write(tmp_path / "config.toml", 'pinned_images = ["example.test/a:1"]\n')
    dropin = write(tmp_path / "config.d" / "10-team.toml", 'pinned_images = ["example.test/b:1"]\n')
    output.print_config(load(pathlib.Path(main)), "table", io.StringIO())
    assert capsys.readouterr().err == f"pinctl: config show: read {main}, {dropin}\n"
    output.print_config(load(pathlib.Path(main)), "json", io.StringIO())
    assert capsys.readouterr().err == ""

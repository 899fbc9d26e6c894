"""The container image's build files against pinctl itself: the Containerfile (a base that names
no registry, a clean final stage, root, and a CMD that pinctl's real click tree parses as the
watcher logging JSON) and the .dockerignore, which must let every build input in and keep the
heavy rest out; and the parser every deployment check shares, which must reject what pinctl
rejects. The mutation tests at the end show that each check can fail."""

from __future__ import annotations

import pathlib
import re
import tomllib
from collections.abc import Callable

import click
import pytest

from tests.harness.image_build import Buildah, build_inputs, ignore_matcher

from .deploy_helpers import (
    ROOT,
    Parsed,
    check_watch_command,
    has_registry_host,
    parse_fixture,  # noqa: F401  (the parse fixture)
)

CONTAINERFILE = ROOT / "Containerfile"
IGNORE_FILE = ROOT / ".dockerignore"


# -- Containerfile ------------------------------------------------------------------------


def read_containerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        line, pending = pending + stripped, ""
        if line:
            word, _, rest = line.partition(" ")
            instructions.append((word.upper(), rest.strip()))
    assert not pending, "the file ends in a continuation"
    return instructions


def exec_form(value: str) -> list[str]:
    import json

    parsed = json.loads(value)
    assert isinstance(parsed, list) and all(isinstance(x, str) for x in parsed), f"not exec form: {value}"
    return parsed


def check_containerfile(instructions: list[tuple[str, str]], parse: Callable[[list[str]], Parsed]) -> None:
    args = dict(value.split("=", 1) for word, value in instructions if word == "ARG" and "=" in value)
    base = args.get("BASE_IMAGE")
    assert base, "ARG BASE_IMAGE=<image> with a default is missing"
    assert not has_registry_host(base) and not re.search(r"[\w-]+\.[\w.-]+/", base), (
        f"the default base {base!r} names a registry host"
    )
    stages: list[str] = []
    for word, value in instructions:
        if word == "FROM":
            image, *alias = value.split()
            assert image in ("${BASE_IMAGE}", "$BASE_IMAGE") or image in stages, f"FROM {image}: not BASE_IMAGE"
            stages += [alias[-1]] if len(alias) == 2 and alias[0].upper() == "AS" else []
    assert len([w for w, _ in instructions if w == "FROM"]) >= 2, "build in one stage, run from a clean one"
    final = instructions[max(i for i, (w, _) in enumerate(instructions) if w == "FROM"):]
    users = [value for word, value in final if word == "USER"]
    assert not users or users[-1] in ("0", "0:0", "root", "root:root"), f"USER {users[-1]}: must be root"
    assert not any(word == "RUN" and re.search(r"\b(gcc|build-essential)\b", value) for word, value in final)
    entrypoint = [exec_form(value) for word, value in final if word == "ENTRYPOINT"]
    cmd = [exec_form(value) for word, value in final if word == "CMD"]
    assert entrypoint and entrypoint[-1] == ["pinctl"], f"ENTRYPOINT is {entrypoint}"
    assert cmd, "no CMD"
    check_watch_command(parse(cmd[-1]))


def test_containerfile(parse: Callable[[list[str]], Parsed]) -> None:
    check_containerfile(read_containerfile(CONTAINERFILE.read_text()), parse)


def check_ignore(excluded: Callable[[str], bool], inputs: list[str]) -> None:
    left_out = [path for path in inputs if excluded(path)]
    assert not left_out, f".dockerignore leaves out build inputs: {left_out[:5]}"
    for heavy in (".git/HEAD", ".venv/bin/python", "src/pinctl/__pycache__/cli.cpython-311.pyc"):
        assert excluded(heavy), f".dockerignore lets {heavy} into the build context"


def test_dockerignore() -> None:
    check_ignore(ignore_matcher(IGNORE_FILE.read_text()), build_inputs())


# -- each check can fail --------------------------------------------------------------------


def test_parse_rejects_what_pinctl_rejects(parse: Callable[[list[str]], Parsed]) -> None:
    for argv in (["sync", "--watch", "--no-such-option"], ["sync", "--log-format", "xml"], ["no-such-command"]):
        with pytest.raises(click.UsageError):
            parse(argv)
    with pytest.raises(AssertionError):
        check_watch_command(parse(["sync", "--log-format", "json"]))
    with pytest.raises(AssertionError):
        check_watch_command(parse(["ls"]))



@pytest.mark.parametrize("edit", [
    ("ARG BASE_IMAGE=python:3.12-slim", "ARG BASE_IMAGE=mirror.example/python:3.12-slim"),
    ('CMD ["sync", "--watch", "--log-format", "json"]', 'CMD ["sync", "--watch", "--log-format", "jsonl"]'),
    ('CMD ["sync", "--watch", "--log-format", "json"]', 'CMD ["sync", "--log-format", "json"]'),
    ('ENTRYPOINT ["pinctl"]', 'ENTRYPOINT ["pinctl", "sync"]'),
    ("USER 0:0", "USER 65534"),
], ids=["base-host", "bad-choice", "no-watch", "entrypoint", "user"])
def test_containerfile_check_fails(edit: tuple[str, str], parse: Callable[[list[str]], Parsed]) -> None:
    text = CONTAINERFILE.read_text()
    assert edit[0] in text
    with pytest.raises((AssertionError, click.UsageError)):
        check_containerfile(read_containerfile(text.replace(*edit)), parse)


@pytest.mark.parametrize("extra", ["src", "README.md", "**/*.py", "*.toml", "completions"])
def test_dockerignore_check_fails(extra: str) -> None:
    excluded = ignore_matcher(IGNORE_FILE.read_text() + f"\n{extra}\n")
    inputs = build_inputs()
    if extra == "completions" and not any(path.startswith("completions/") for path in inputs):
        pytest.skip("pyproject.toml installs no completions")
    with pytest.raises(AssertionError):
        check_ignore(excluded, inputs)


def test_dockerignore_check_fails_when_the_repository_goes_in() -> None:
    with pytest.raises(AssertionError):
        check_ignore(ignore_matcher("tests\n"), build_inputs())


def test_buildah_keeps_its_network_config_below_its_own_home(tmp_path: pathlib.Path) -> None:
    """Else its network backend makes /etc/cni/net.d (and a lock file there) on the host."""
    buildah = Buildah(tmp_path / "buildah").prepare()
    conf = tomllib.loads(pathlib.Path(buildah.env()["CONTAINERS_CONF"]).read_text())
    network_dir = pathlib.Path(conf["network"]["network_config_dir"])
    assert network_dir.is_dir() and network_dir.is_relative_to(tmp_path / "buildah")


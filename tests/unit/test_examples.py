"""The examples help, the man pages and docs/cli.md show: each names a real command and parses
with that command's own options (nothing runs)."""

from __future__ import annotations

import shlex

import click
import pytest

from pinctl.cli import cli
from pinctl.examples import EXAMPLES, examples_text


@pytest.mark.parametrize("path", sorted(EXAMPLES))
def test_every_example_parses_as_its_command(path: str) -> None:
    for what, line in EXAMPLES[path]:
        words = shlex.split(line.replace("source <(", "").rstrip(")"))
        assert words[:1 + len(path.split())] == ["pinctl", *path.split()], line
        assert what[:1].isupper() and not what.endswith("."), what
        ctx = cli.make_context("pinctl", words[1:], resilient_parsing=False)
        command, args = ctx, words[1:]
        for word in path.split():
            sub = command.command.get_command(command, word)  # type: ignore[attr-defined]
            assert sub is not None, line
            args = args[1:]
            command = sub.make_context(word, list(args), parent=command)
        assert isinstance(command.command, click.Command)


def test_help_shows_a_commands_examples() -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, ["help", "config", "export"], prog_name="pinctl")
    assert result.exit_code == 0 and result.output.startswith("Usage: pinctl config export")
    assert result.output.rstrip().endswith(examples_text("config export").rstrip())


def test_every_command_an_operator_runs_has_examples() -> None:
    wanted = {"ls", "pin", "unpin", "sync", "check", "gc plan", "prune", "pull", "import", "config export", "cri-proxy",
              "fleet status"}
    assert wanted <= set(EXAMPLES)

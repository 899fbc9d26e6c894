"""The option surface a newcomer meets: own options before common ones, ctr's and crictl's short
names, and --timeout bounded the same way on the command line and in the config file.

pinctl runs as a real process (python -m pinctl); config show needs no daemon.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from pinctl import completion
from pinctl.cli import COMMON_OPTIONS_HEADING, CommonOption, cli
from pinctl.cli.root import COMMON_OPTIONS_POINTER
from pinctl.config.settings import KEYS, KeySpec
from pinctl.model import FORMAT_JSON, FORMAT_TABLE, OUTPUT_FORMATS

LOW, HIGH = KEYS["timeout"].bounds or (0.0, 0.0)
SETTINGS_DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def run(*args: str, config: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # A config of the test's own, so no file of the machine's decides the outcome.
    full_env = {"PATH": "/usr/bin:/bin", "PINCTL_CONFIG": str(config), **(env or {})}
    return subprocess.run([sys.executable, "-m", "pinctl", *args], capture_output=True, text=True, env=full_env,
                          timeout=60)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text("")
    return path


def show(config: Path, *args: str) -> dict[str, Any]:
    result = run(*args, "config", "show", "-o", "json", config=config)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def setting(document: dict[str, Any], key: str) -> Any:
    return document["config"][key]["value"]


def assert_one_line(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def commands() -> list[click.Context]:
    return list(completion.tree.contexts(cli))


# -- own options first ---------------------------------------------------------------------------


@pytest.mark.parametrize("ctx", commands(), ids=lambda ctx: " ".join(completion.tree.command_path(ctx)))
def test_own_options_come_before_the_common_ones(ctx: click.Context) -> None:
    options = [p for p in ctx.command.get_params(ctx) if isinstance(p, click.Option)]
    kinds = [isinstance(p, CommonOption) for p in options]
    assert kinds == sorted(kinds), [p.name for p in options]  # the order man pages and completions use
    help_text = ctx.command.get_help(ctx)
    own = [p for p in options if not isinstance(p, CommonOption)]
    assert all(p.opts[-1] in help_text for p in own), help_text
    if completion.tree.command_path(ctx) == ("pinctl", "options"):
        return
    # The common options are listed once, by pinctl options; each command points there.
    assert COMMON_OPTIONS_HEADING not in help_text and "--containerd-config" not in help_text
    assert (COMMON_OPTIONS_POINTER in help_text) == any(kinds), help_text


def help_at(ctx: click.Context, width: int = 80) -> list[str]:
    sized = click.Context(ctx.command, info_name=ctx.info_name, parent=ctx.parent, terminal_width=width,
                          **ctx.command.context_settings)
    return ctx.command.get_help(sized).splitlines()


@pytest.mark.parametrize("ctx", commands(), ids=lambda ctx: " ".join(completion.tree.command_path(ctx)))
def test_every_help_fits_a_screen_and_names_exit_141(ctx: click.Context) -> None:
    lines = help_at(ctx)
    if completion.tree.command_path(ctx) != ("pinctl", "options"):
        assert len(lines) <= 40, "\n".join(lines)
    assert all(len(line) <= 80 for line in lines)
    text = " ".join(" ".join(lines).split())
    if isinstance(ctx.command, click.Group):
        return
    assert "141 the output's reader went away" in text, text


def test_pinctl_options_lists_every_common_option_once() -> None:
    ctx = next(c for c in commands() if completion.tree.command_path(c) == ("pinctl", "options"))
    text = "\n".join(help_at(ctx))
    common = [p for p in cli.params if isinstance(p, CommonOption)]
    assert common and all(text.count(f"{p.opts[-1]} ") == 1 for p in common), text
    result = run("options", config=Path("/nonexistent"))
    assert result.returncode == 0 and "--containerd-config" in result.stdout


def test_pin_help_shows_its_options_first() -> None:
    ctx = next(c for c in commands() if completion.tree.command_path(c) == ("pinctl", "pin"))
    lines = help_at(ctx)
    first = lines.index("Options:")
    names = [line.split()[0] for line in lines[first + 1:] if line.startswith("  -")]
    assert names[:4] == ["--dry-run", "-o,", "-q,", "-h,"] or names[:4] == ["-o,", "-q,", "--dry-run", "-h,"]


def test_root_help_shows_its_commands_in_the_first_24_lines() -> None:
    lines = help_at(commands()[0])
    first = lines.index("Commands:")
    every = every_command()
    listed = [line.split()[0] for line in lines[first + 1:first + 1 + len(every)]]
    assert sorted(listed) == sorted(every) and first + len(every) < 24, "\n".join(lines)
    assert COMMON_OPTIONS_POINTER in "\n".join(lines) and "--containerd-config" not in "\n".join(lines)
    assert "141 the output's reader went away (| head)" in " ".join(" ".join(lines).split())


def test_no_range_noise_in_help() -> None:
    for ctx in commands():
        text = ctx.command.get_help(ctx)
        assert "[x>=" not in text and "x<=" not in text, completion.tree.command_path(ctx)


# -- options from the key table ---------------------------------------------------------------

FLAGGED = [spec for spec in KEYS.values() if spec.flag]


def common_option(command: click.Command, flag: str) -> click.Option:
    # With pinctl's settings, as under its root: click keeps the first help option it builds for
    # a command, and a bare context's (--help alone) would then show in every later help.
    ctx = click.Context(command, info_name=command.name, help_option_names=cli.context_settings["help_option_names"])
    found = [p for p in command.get_params(ctx) if isinstance(p, click.Option) and flag in p.opts]
    assert len(found) == 1, (command.name, flag)
    return found[0]


@pytest.mark.parametrize("spec", FLAGGED, ids=lambda spec: spec.name)
def test_every_key_with_a_flag_is_the_common_option_it_declares(spec: KeySpec) -> None:
    option = common_option(cli, str(spec.flag))
    assert isinstance(option, CommonOption)
    assert option.name == spec.name  # what load_config reads it by
    assert tuple(option.opts) == spec.flag_names
    assert option.metavar == spec.metavar
    assert option.multiple == (spec.type == "list")
    assert option.env_name == spec.env and option.default_text == spec.default_markdown
    help_text = option.help or ""
    assert help_text.startswith((spec.flag_help or spec.help).rstrip("."))
    assert f"config '{spec.name}'" in help_text
    assert spec.env is None or f"${spec.env}" in help_text
    if spec.type == "choice":
        assert isinstance(option.type, click.Choice) and tuple(option.type.choices) == spec.choices
    for ctx in commands()[1:]:
        if ctx.command.name not in ("completion", "config", "fleet", "gc", "help", "options", "status"):
            assert common_option(ctx.command, str(spec.flag)).help == help_text, ctx.command.name


def test_common_options_are_the_settings_then_where_settings_come_from() -> None:
    names = [p.name for p in cli.params if isinstance(p, CommonOption)]
    assert names == [spec.name for spec in FLAGGED] + ["config_path", "from_crio"]


@pytest.mark.parametrize("spec", [spec for spec in FLAGGED if spec.default_text is None and not spec.accumulates],
                         ids=lambda spec: spec.name)
def test_help_states_a_plain_default_as_the_table_holds_it(spec: KeySpec) -> None:
    help_text = common_option(cli, str(spec.flag)).help or ""
    default = f"{spec.default:g}" if isinstance(spec.default, float) else str(spec.default)
    assert help_text.endswith(f", else {default}."), help_text
def test_every_output_option_is_the_same_option_with_the_formats_its_command_writes() -> None:
    outputs = {completion.tree.command_path(ctx): p for ctx in commands() for p in ctx.command.get_params(ctx)
               if isinstance(p, click.Option) and "--output" in p.opts}
    assert {("pinctl", "check"), ("pinctl", "config", "show"), ("pinctl", "ls")} <= set(outputs)
    for path, option in outputs.items():
        assert (option.opts, option.name, option.default) == (["-o", "--output"], "fmt", FORMAT_TABLE), path
        assert isinstance(option.type, click.Choice), path
        assert {FORMAT_TABLE, FORMAT_JSON} <= set(option.type.choices) <= set(OUTPUT_FORMATS), path


# -- short names -------------------------------------------------------------------------------


def test_every_command_takes_a_and_r_and_no_name_is_used_twice() -> None:
    for ctx in commands()[1:]:
        # None reads a setting of the node: fleet status asks the Kubernetes API alone.
        if ctx.command.name in ("completion", "config", "fleet", "gc", "help", "options", "status"):
            continue
        names = [n for p in ctx.command.get_params(ctx) if isinstance(p, click.Option) for n in p.opts + p.secondary_opts]
        assert len(names) == len(set(names)), sorted(names)
        assert {"-a", "-r", "--address", "--runtime-endpoint"} <= set(names), completion.tree.command_path(ctx)


@pytest.mark.parametrize("where", ["before", "after", "attached"])
def test_short_address_and_runtime_endpoint_set_the_config(config: Path, where: str) -> None:
    options = {
        "before": (["-a", "/run/x.sock", "-r", "unix:///run/y.sock"], []),
        "after": ([], ["-a", "/run/x.sock", "-r", "unix:///run/y.sock"]),
        "attached": ([], ["-a/run/x.sock", "-runix:///run/y.sock"]),
    }[where]
    result = run(*options[0], "config", "show", "-o", "json", *options[1], config=config)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert setting(document, "containerd_address") == "/run/x.sock"
    assert setting(document, "runtime_endpoint") == "unix:///run/y.sock"
    assert document["config"]["containerd_address"]["source"] == "flag"


def test_the_options_table_has_every_common_option_its_short_name_and_environment() -> None:
    text = SETTINGS_DOC.read_text()
    table = text[text.index("## Common options"):text.index("## The config file")]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    env_of = {spec.flag: spec.env for spec in KEYS.values() if spec.flag}
    for param in cli.params:
        if not isinstance(param, CommonOption):
            continue
        names = [*param.opts, *param.secondary_opts]
        row = next((r for r in rows if any(re.search(rf"`{n}[ `=\[]", r) for n in names)), None)
        assert row is not None, f"docs/configuration.md's options table has no row for {names}"
        for short in (n for n in names if not n.startswith("--")):
            assert f"`{short}" in row, (short, row)
        env = env_of.get(max(names, key=len))
        assert env is None or f"`{env}`" in row, (env, row)


# -- --timeout and the config key timeout ----------------------------------------------------------


@pytest.mark.parametrize("value", [LOW, 2, HIGH])
def test_timeout_within_bounds_is_taken(config: Path, value: float) -> None:
    assert setting(show(config, "--timeout", str(value)), "timeout") == value
    config.write_text(f"timeout = {value}\n")
    assert setting(show(config), "timeout") == value


@pytest.mark.parametrize("value", ["1e10", "86401", "0.01", "0", "-1", "nan", "inf", "soon"])
def test_timeout_flag_out_of_bounds_is_one_line(config: Path, value: str) -> None:
    result = run("ls", "--timeout", value, config=config, env={"CONTAINERD_ADDRESS": "/nonexistent.sock"})
    assert_one_line(result, 2, "--timeout", value, f"{LOW:g} to {HIGH:g} seconds", "--help")
    assert result.stdout == ""


@pytest.mark.parametrize("value", ["1e10", "86401", "0.01"])
def test_timeout_key_out_of_bounds_is_one_line(config: Path, value: str) -> None:
    config.write_text(f"timeout = {value}\n")
    result = run("ls", config=config, env={"CONTAINERD_ADDRESS": "/nonexistent.sock"})
    assert_one_line(result, 2, str(config), "timeout", f"{LOW:g} to {HIGH:g}")


def test_check_wait_has_no_range_noise_and_is_still_checked(config: Path) -> None:
    result = run("check", "--wait", "-1", config=config)
    assert_one_line(result, 2, "--wait", "at least 0 seconds")


@pytest.mark.parametrize("args, choices", [
    (("completion",), "bash, zsh, fish"),
    (("config", "export"), "crio, containerd, cri-dockerd"),
])
def test_a_missing_choice_is_one_line_listing_the_choices(args: tuple[str, ...], choices: str, config: Path) -> None:
    done = run(*args, config=config)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "\\n" not in done.stderr and "\t" not in done.stderr, done.stderr
    assert f"Choose from: {choices}" in done.stderr


# -- commands load when asked for -------------------------------------------------------------


def every_command() -> dict[str, click.Command]:
    """The root's commands by name, each module imported (the root loads them when asked for)."""
    ctx = click.Context(cli)
    return {name: command for name in cli.list_commands(ctx) if (command := cli.get_command(ctx, name)) is not None}


def test_every_command_is_named_in_the_roots_table_and_registered_by_its_module() -> None:
    import pinctl.cli as cli_package
    from pinctl.cli.root import COMMAND_MODULES

    own = {"options", "help", "completion"}  # defined in cli/root.py itself
    # A command module left out of the table would never be imported: its command would not exist.
    modules = {path.stem for path in Path(cli_package.__file__).parent.glob("*.py")} - {"__init__", "root", "options"}
    assert set(COMMAND_MODULES.values()) == modules
    loaded = every_command()
    assert set(loaded) == set(COMMAND_MODULES) | own, "a name in the table that its module does not register"
    # With every module imported: a command registered under a name the table lacks.
    assert set(cli.commands) == set(loaded)


def test_ls_loads_its_own_command_module_and_no_other() -> None:
    """`pinctl ls` pays for ls alone: no other command's module, nor what only they need."""
    code = ("import sys, click; from pinctl.cli import cli; cli.get_command(click.Context(cli), 'ls'); "
            "print(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert "pinctl.cli.ls" in loaded
    others = sorted(m for m in loaded if m.startswith("pinctl.cli.") and m not in ("pinctl.cli.ls", "pinctl.cli.root",
                                                                               "pinctl.cli.options"))
    assert others == []
    # secrets loads OpenSSL's hashes (hmac): a sixth of ls's start, for a temporary file's name.
    assert {"secrets", "hmac", "pinctl.fleet.condition", "pinctl.check.compare"} & loaded == set()

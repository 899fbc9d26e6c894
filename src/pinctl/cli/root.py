"""The root group and what every command does first: its help laid out (own options before the
common ones), the config loaded from every level of the command line, the node opened."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional, Sequence

import click

from pinctl import __version__
from pinctl.cli.options import COMMON_OPTIONS_HEADING, BorrowedOption, CommonOption, common_options
from pinctl.config.settings import KEYS
from pinctl.errors import UsageError
from pinctl.model import OutputFormat

if TYPE_CHECKING:
    from pinctl.backends.cri import CriRuntime, RuntimeVersion
    from pinctl.commands.pin import ChangeReport
    from pinctl.config.loader import Config
    from pinctl.node.sources import Node
    from pinctl.pins.policy import Policy

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
# 141: what a shell reports for a writer killed by SIGPIPE; pinctl ends the same way, quietly.
PIPE_EXIT_HELP = "141 the output's reader went away (| head)"
EXIT_CODES_HELP = ("Exit codes: 0 ok, 1 error, 2 usage or config error, 3 partial (some items failed), "
                   f"{PIPE_EXIT_HELP}.")
# Every command's --help ends its own options with this line instead of the common ones.
COMMON_OPTIONS_POINTER = "Common options (-n, -a, -r, --config, ...): see 'pinctl options'."


# Option names longer than this put their help on the next line.
HELP_NAME_COLUMN = 24


def exit_codes(*codes: str) -> str:
    """A command's own exit codes, and 141 as every command has it."""
    return "Exit codes: " + ", ".join([*codes, PIPE_EXIT_HELP]) + "."


# A command that changes nothing item by item never ends partial (3).
NO_PARTIAL_HELP = exit_codes("0 ok", "1 error", "2 usage or config error")


def _own_first(params: list[click.Parameter]) -> list[click.Parameter]:
    # A stable sort: arguments, the command's own options and --help keep their order.
    return sorted(params, key=lambda param: isinstance(param, CommonOption))


def _write_options(command: click.Command, ctx: click.Context, formatter: click.HelpFormatter, common: bool) -> bool:
    """The command's own options (and --help), or the common ones, as one section of --help;
    False when it has none of them."""
    params = [param for param in command.get_params(ctx)
              if isinstance(param, click.Option) and isinstance(param, CommonOption) == common]
    records = [record for param in params if not isinstance(param, BorrowedOption)
               if (record := param.get_help_record(ctx)) is not None]
    if records:
        with formatter.section(COMMON_OPTIONS_HEADING if common else "Options"):
            # A narrower name column leaves the help more room: fewer lines in a window.
            formatter.write_dl(records, col_max=HELP_NAME_COLUMN)
    lenders: dict[str, list[str]] = {}
    for param in params:
        if isinstance(param, BorrowedOption):
            lenders.setdefault(param.lender, []).append(param.opts[-1])
    for lender, names in lenders.items():
        formatter.write_paragraph()
        formatter.write_text(f"Also {', '.join(names)}, as for pinctl {lender} (see pinctl {lender} --help).")
    return bool(records)


def write_common_options(command: click.Command, ctx: click.Context, formatter: click.HelpFormatter) -> None:
    """The common options command takes, with their help: what pinctl options lists."""
    _write_options(command, ctx, formatter, common=True)


def _write_pointer(command: click.Command, ctx: click.Context, formatter: click.HelpFormatter) -> None:
    if any(isinstance(param, CommonOption) for param in command.get_params(ctx)):
        formatter.write_paragraph()
        formatter.write_text(COMMON_OPTIONS_POINTER)


class PinctlCommand(click.Command):
    """A command whose --help lists its own options and points to the common ones; its man page
    and completions list its own options before the common ones."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return _own_first(super().get_params(ctx))

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _write_options(self, ctx, formatter, common=False)
        _write_pointer(self, ctx, formatter)


class PinctlGroup(click.Group):
    """A group like PinctlCommand; its commands and subgroups are made the same way. Its --help
    puts the commands right after its first paragraph: they are what a newcomer looks for."""

    command_class = PinctlCommand
    group_class = type  # click: subgroups are of this group's own class

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return _own_first(super().get_params(ctx))

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        first, rest = _split_help(self.help or "")
        _write_help(formatter, first)
        self.format_commands(ctx, formatter)
        _write_help(formatter, rest)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _write_options(self, ctx, formatter, common=False)
        _write_pointer(self, ctx, formatter)


# The module that defines each of the root's commands, imported the first time the command is
# asked for: `pinctl ls` loads ls's module and what it needs, not every command's (each module
# pulls in its own engines and libraries; all of them cost `ls` more CPU than dockerd's answer).
# The root's own commands (options, help, completion) are defined below.
COMMAND_MODULES = {
    "check": "check", "fleet": "check", "config": "config", "cri-proxy": "criproxy", "gc": "gc",
    "prune": "gc", "history": "history", "import": "importing", "ls": "ls", "namespaces": "ls",
    "pin": "pin", "unpin": "pin", "pull": "pull", "sync": "sync",
}


class RootGroup(PinctlGroup):
    """pinctl itself: its commands are listed by name and imported when one is asked for."""

    group_class: Any = PinctlGroup  # its groups are plain PinctlGroups: none of them loads lazily

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMAND_MODULES})

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            import importlib

            importlib.import_module(f"pinctl.cli.{COMMAND_MODULES[cmd_name]}")  # registers it on cli
        return super().get_command(ctx, cmd_name)


def _split_help(text: str) -> tuple[str, str]:
    """A help text's first paragraph, and the rest."""
    import inspect

    first, _, rest = inspect.cleandoc(text).partition("\n\n")
    return first, rest


def _write_help(formatter: click.HelpFormatter, text: str) -> None:
    if text.strip():
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(text)


def _param_chain(ctx: click.Context) -> list[dict[str, Any]]:
    """Parameters of this command, then of each parent: nearest first."""
    chain: list[dict[str, Any]] = []
    current: Optional[click.Context] = ctx
    while current is not None:
        chain.append(current.params)
        current = current.parent
    return chain


def load_config(ctx: click.Context) -> Config:
    from pinctl.config import loader as config

    chain = _param_chain(ctx)

    def pick(name: str) -> Any:
        return next((p[name] for p in chain if p.get(name) not in (None, ())), None)

    def gather(name: str) -> list[Any]:
        return [item for params in reversed(chain) for item in params.get(name) or ()]

    # A key that accumulates takes what was given at every level, outermost first.
    flags = {spec.name: gather(spec.name) if spec.accumulates else pick(spec.name)
             for spec in KEYS.values() if spec.flag}
    return config.load(flags, os.environ, config_path=pick("config_path"), from_crio=pick("from_crio"))


def open_node(cfg: Config) -> Node:
    from pinctl.node.sources import open_node as open_all
    from pinctl.render import output

    return open_all(cfg, output.warn)


def load_policy(cfg: Config) -> Policy:
    from pinctl.pins.policy import compile_policy

    return compile_policy(cfg.patterns)


def print_change(report: ChangeReport, fmt: OutputFormat, quiet: bool) -> int:
    """pin, unpin and sync: every item, then the exit code the report carries."""
    from pinctl.render import output

    output.print_results(report.command, report.results, report.status, report.dry_run, fmt, quiet)
    for warning in report.warnings:
        output.warn(warning)
    return report.exit_code


def textfile_target(path: str, refs: Sequence[str] = ()) -> None:
    """--textfile: the whole node only, and a directory the file can be written in, checked first."""
    from pinctl.metrics import exposition as metrics

    if refs:
        raise UsageError("--textfile counts the whole node: give no REF with it",
                         "run check REF... and check --textfile PATH separately")
    metrics.check_textfile_target(path)


def open_runtime(cfg: Config) -> tuple[CriRuntime, RuntimeVersion]:
    from pinctl.node.sources import open_runtime as open_cri
    from pinctl.render import output

    return open_cri(cfg, output.warn)


@click.group(cls=RootGroup, context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES_HELP)
@common_options
@click.version_option(__version__, "--version", prog_name="pinctl")
def cli(**_: Any) -> None:
    """Show and set which container images the kubelet's image GC keeps.

    The kubelet skips an image only when the runtime reports it pinned over the CRI.
    containerd's CRI plugin pins an image when any of its references carries the label
    io.cri-containerd.pinned=pinned. pinctl lists those pins, adds and removes them, and
    keeps them in line with a policy of CRI-O-style patterns (see pinctl config show). It
    shows what the GC will delete next (gc plan) and prunes without touching what must stay.
    Run pinctl COMMAND --help for a command's own options.
    """


class OptionsCommand(PinctlCommand):
    """pinctl options: its help is the list of the common options, once for every command."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        write_common_options(self, ctx, formatter)
        _write_options(self, ctx, formatter, common=False)


# It takes the common options itself, so that its man page and completions list them too.
@cli.command("options", cls=OptionsCommand, short_help="List the options every command takes.",
             epilog=exit_codes("0 ok"))
@common_options
@click.pass_context
def options_command(ctx: click.Context, **_: Any) -> int:
    """List the options every command takes (as kubectl options does).

    Each goes before or after the command name (pinctl -n k8s.io pin X, pinctl pin -n k8s.io X);
    the one nearer the command wins. Each setting can also come from its environment variable or
    config key (pinctl config show says which did).
    """
    click.echo(ctx.get_help())
    return 0


@cli.command("help", short_help="Show a command's help: pinctl help config export.", epilog=exit_codes("0 ok", "2 no such command"))
@click.argument("command", nargs=-1, metavar="[COMMAND]...")
@click.pass_context
def help_command(ctx: click.Context, command: Sequence[str]) -> int:
    """Show the help of COMMAND (pinctl pin --help) with examples of it, or pinctl's own."""
    group = ctx.find_root().command
    here = ctx.find_root()
    for word in command:
        if not isinstance(group, click.Group):
            break
        found = group.get_command(here, word)
        if found is None:
            from pinctl.display import closest

            close = closest(word, group.list_commands(here))
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise UsageError(f"no such command '{word}'{hint}", f"see '{here.command_path} --help'")
        here = click.Context(found, info_name=word, parent=here)
        group = found
    from pinctl.examples import examples_text

    examples = examples_text(" ".join(here.command_path.split()[1:]))
    click.echo(here.get_help() + (f"\n\n{examples}" if examples else ""), nl=not examples)
    return 0


@cli.command("completion", epilog=exit_codes("0 ok", "2 unknown shell"))
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]), metavar="SHELL")
def completion_command(shell: str) -> int:
    """Print the completion script for SHELL.

    The script is static: completing commands and options starts no Python. Only image
    references and namespaces are asked of pinctl itself (pinctl ls -q, pinctl namespaces -q).
    """
    from pinctl import completion

    click.echo(completion.render(shell, cli), nl=False)
    return 0

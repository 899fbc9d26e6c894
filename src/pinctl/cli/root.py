"""The root group and what every command does first: its help laid out (own options before the
common ones), the config loaded from every level of the command line, the node opened."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional, Sequence

import click

from pinctl import __version__
from pinctl.cli.options import COMMON_OPTIONS_HEADING, CommonOption, common_options
from pinctl.config.settings import KEYS
from pinctl.errors import UsageError
from pinctl.model import OutputFormat

if TYPE_CHECKING:
    from pinctl.backends.cri import CriRuntime, RuntimeVersion
    from pinctl.commands import ChangeReport
    from pinctl.config.loader import Config
    from pinctl.node.sources import Node
    from pinctl.pins.policy import Policy

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
EXIT_CODES_HELP = "Exit codes: 0 ok, 1 error, 2 usage or config error, 3 partial (some items failed)."


def _own_first(params: list[click.Parameter]) -> list[click.Parameter]:
    # A stable sort: arguments, the command's own options and --help keep their order.
    return sorted(params, key=lambda param: isinstance(param, CommonOption))


def _write_options(command: click.Command, ctx: click.Context, formatter: click.HelpFormatter, common: bool) -> None:
    """The command's own options (and --help), or the common ones, as one section of --help."""
    records = [
        record
        for param in command.get_params(ctx)
        if isinstance(param, click.Option) and isinstance(param, CommonOption) == common
        if (record := param.get_help_record(ctx)) is not None
    ]
    if records:
        with formatter.section(COMMON_OPTIONS_HEADING if common else "Options"):
            formatter.write_dl(records)


class PinctlCommand(click.Command):
    """A command whose --help, man page and completions list its own options before the common ones."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return _own_first(super().get_params(ctx))

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _write_options(self, ctx, formatter, common=False)
        _write_options(self, ctx, formatter, common=True)


class PinctlGroup(click.Group):
    """A group like PinctlCommand; its commands and subgroups are made the same way."""

    command_class = PinctlCommand
    group_class = type  # click: subgroups are of this group's own class

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return _own_first(super().get_params(ctx))

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The commands are what a newcomer looks for here: before the long common options.
        _write_options(self, ctx, formatter, common=False)
        self.format_commands(ctx, formatter)
        _write_options(self, ctx, formatter, common=True)


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


@click.group(cls=PinctlGroup, context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES_HELP)
@common_options
@click.version_option(__version__, "--version", prog_name="pinctl")
def cli(**_: Any) -> None:
    """Show and set which container images the kubelet's image GC keeps.

    The kubelet skips an image only when the runtime reports it pinned over the CRI.
    containerd's CRI plugin pins an image when any of its references carries the label
    io.cri-containerd.pinned=pinned. pinctl lists those pins, adds and removes them, and
    keeps them in line with a policy of CRI-O-style patterns (see pinctl config show). It
    shows what the GC will delete next (gc plan) and prunes without touching what must stay.
    """

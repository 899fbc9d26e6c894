"""pinctl config show, lint and export."""

from __future__ import annotations

from typing import Any

import click

from pinctl.cli.options import common_options, output_options
from pinctl.cli.root import CONTEXT_SETTINGS, NO_PARTIAL_HELP, cli, exit_codes, load_config, load_policy, open_node
from pinctl.errors import EXIT_OK
from pinctl.model import FORMAT_JSON, FORMAT_TABLE, OutputFormat


@cli.group("config", context_settings=CONTEXT_SETTINGS)
def config_group() -> None:
    """Show and check pinctl's configuration and pin policy."""


@config_group.command("show", epilog=NO_PARTIAL_HELP)
@output_options([FORMAT_TABLE, FORMAT_JSON], quiet=False)
@common_options
@click.pass_context
def config_show(ctx: click.Context, fmt: OutputFormat, **_: Any) -> int:
    """Show the effective configuration and where each value came from.

    Sources, lowest to highest: defaults, the config file, its drop-ins (config.d/*.toml in
    lexical order), the environment, flags. pinned_images collects patterns from all of them.
    """
    from pinctl.render import output

    output.print_config(load_config(ctx), fmt)
    return EXIT_OK


@config_group.command("lint", epilog=exit_codes("0 no problems", "1 problems found", "2 the config cannot be read"))
@click.option("--offline", is_flag=True, help="Only check the patterns themselves; do not ask containerd.")
@output_options([FORMAT_TABLE, FORMAT_JSON], quiet=False)
@common_options
@click.pass_context
def config_lint(ctx: click.Context, offline: bool, fmt: OutputFormat, **_: Any) -> int:
    """Check the pin policy: one line per problem.

    Invalid patterns; patterns that match no image present; patterns shadowed by a broader
    one; globs that CRI-O would match differently (CRI-O does not anchor them); entries of
    containerd 2.x's own pinned_images (its config and the files it imports) that pin nothing,
    as containerd compares them with image names as written (a short or tagless name).
    """
    from pinctl.commands.config import lint
    from pinctl.config.containerd import read_config_pins
    from pinctl.render import output

    cfg = load_config(ctx)
    report = lint(cfg.patterns, None if offline else lambda: open_node(cfg),
                  lambda: read_config_pins(cfg.settings.containerd_config))
    output.print_problems(report.problems, fmt)
    return report.exit_code


@config_group.command("export", epilog=NO_PARTIAL_HELP)
@click.option("--for", "target", type=click.Choice(["crio", "containerd", "cri-dockerd"]), required=True,
              help="The runtime whose configuration to write.")
@click.option("--offline", is_flag=True,
              help="Do not ask the engines; patterns a runtime cannot express are then left out "
                   "(an image-ID pattern is refused).")
@common_options
@click.pass_context
def config_export(ctx: click.Context, target: str, offline: bool, **_: Any) -> int:
    """Write the pin policy as a runtime's own configuration, on stdout.

    crio: a crio.conf.d drop-in with [crio.image] pinned_images. containerd: a containerd 2.x
    pinned_images table (exact references) for the containerd pinctl reads and its config file
    (containerd_config), in that file's version: a drop-in, named on stderr, where the file
    imports a directory (conf.d/*.toml), else a table to merge into it; containerd reads it at
    start only. Refused for containerd 1.x, which has no pinned_images (pinctl sync writes its
    pin labels). cri-dockerd: --pinned-images and
    --pinned-image-labels flags. Patterns a runtime cannot express are expanded to the images
    present now, and each such compromise is said on stderr; an image-ID pattern is written as
    that image's names, and refused when no such image is present (or with --offline). The crio
    drop-in carries over CRI-O's own entries (--crio-config) and says how to load it.
    """
    from pinctl.commands.config import export
    from pinctl.render import output

    cfg = load_config(ctx)
    node = None if offline else open_node(cfg)
    result = export(target, load_policy(cfg), node, cfg)
    click.echo(result.text, nl=False)
    for note in result.notes:
        output.warn(note)
    return EXIT_OK

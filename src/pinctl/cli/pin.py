"""pinctl pin and pinctl unpin."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import click

from pinctl.cli.options import F, common_options, output_options
from pinctl.cli.root import EXIT_CODES_HELP, cli, load_config, load_policy, open_node, print_change
from pinctl.model import OutputFormat


def _change_command(name: str, summary: str) -> Callable[[F], click.Command]:
    def decorate(func: F) -> click.Command:
        func = click.argument("refs", nargs=-1, required=True, metavar="REF|ID|PATTERN...")(func)
        func = click.option("--dry-run", is_flag=True, help="Show the plan; change nothing.")(func)
        func = output_options()(func)
        func = common_options(func)
        return cli.command(name, help=summary, epilog=EXIT_CODES_HELP)(click.pass_context(func))

    return decorate


@_change_command("pin", """Pin images: add io.cri-containerd.pinned=pinned.

REF is normalised like Docker's (alpine means library/alpine:latest on Docker's default registry)
and labels that one reference. sha256:<id> or a unique ID prefix (4+ hex digits, with or without
sha256:) labels every reference of the image; a prefix counts as matching an image when it starts
its ID or the manifest digest of one of its references. A quoted
PATTERN ('registry.example/*', '*word*') labels every reference it matches now. Only that one
label is written. Already pinned references are reported and skipped; one that sync pinned
becomes a hand pin (sync's mark is removed, so sync --prune leaves it). A reference another
client re-points while pinctl writes is left alone, or the write undone, and reported.""")
def pin_command(ctx: click.Context, refs: Sequence[str], dry_run: bool, fmt: OutputFormat, quiet: bool,
                **_: Any) -> int:
    return _run_change(ctx, "pin", refs, dry_run, fmt, quiet)


@_change_command("unpin", """Unpin images: remove io.cri-containerd.pinned.

The label is removed from every reference of each image the arguments name (a REF, an ID or
a quoted PATTERN), since a label left on any of them would keep the image pinned. The mark
pinctl sync leaves beside its pins goes too. Each reference is reported.""")
def unpin_command(ctx: click.Context, refs: Sequence[str], dry_run: bool, fmt: OutputFormat, quiet: bool,
                  **_: Any) -> int:
    return _run_change(ctx, "unpin", refs, dry_run, fmt, quiet)


def _run_change(ctx: click.Context, command: str, args: Sequence[str], dry_run: bool, fmt: OutputFormat,
                quiet: bool) -> int:
    from pinctl.commands.pin import change

    cfg = load_config(ctx)
    # unpin reads the policy too: to say which pattern would pin an image again.
    policy = load_policy(cfg) if command == "unpin" else None
    report = change(open_node(cfg), command, args, cfg.settings.pattern_dialect, dry_run, policy)
    return print_change(report, fmt, quiet)

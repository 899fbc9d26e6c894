"""pinctl history: why an image went, from the deletion journal; it asks no engine or daemon."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import click

from pinctl.cli.options import common_options, output_options
from pinctl.cli.root import cli, exit_codes, load_config
from pinctl.model import OutputFormat


class Since(click.ParamType):
    """--since: a span back from now (2h, 7d) or a moment (RFC 3339), as seconds since the epoch."""

    name = "since"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        from pinctl.commands.history import parse_since

        if isinstance(value, float):
            return value
        try:
            return parse_since(str(value))
        except ValueError as err:
            self.fail(str(err), param, ctx)


@cli.command("history", short_help="Show which images went from the node, who deleted them and why.",
             epilog=exit_codes("0 ok", "1 a REF or ID named has no entry (the others are shown), or the journal "
                               "cannot be read", "2 usage error"))
@click.argument("terms", nargs=-1, metavar="[REF|ID]...")
@click.option("--since", type=Since(), metavar="TIME",
              help="Only entries since TIME: a span back from now (30m, 2h, 7d, 1d12h) or a moment "
                   "(2026-12-06T14:00:00Z; without an offset, local time).")
@click.option("--wanted", "wanted_only", is_flag=True, help="Only images pinctl wanted kept (policy, import_dirs, a pin).")
@click.option("--all", "everything", is_flag=True,
              help="Also the RemoveImage requests cri-proxy saw (refused or passed on) and the restores of "
                   "wanted images.")
@output_options()
@common_options
@click.pass_context
def history_command(ctx: click.Context, terms: Sequence[str], since: Optional[float], wanted_only: bool,
                    everything: bool, fmt: OutputFormat, quiet: bool, **_: Any) -> int:
    """Show the node's image deletions, newest first: when, the image, why pinctl wanted it,
    how it was pinned then, who deleted it, and what says so.

    pinctl sync --watch writes the journal as images go (history_dir, /var/lib/pinctl/history);
    this command only reads its files, so it works with the runtime and the watcher down. The
    deleter is the kubelet (its image GC, seen by cri-proxy, or named in its log), another CRI
    client (crictl rmi), outside the CRI (ctr, nerdctl, docker), or unknown. With REF or ID
    (an image ID prefix) only entries naming them. -q prints the images' names, one per line.
    """
    from pinctl.commands.history import HistoryRequest, history
    from pinctl.render.history import print_history

    cfg = load_config(ctx)
    request = HistoryRequest(cfg.settings.history_dir, tuple(terms), since, wanted_only, everything,
                             cfg.settings.pattern_dialect)
    result = history(request)
    print_history(result, fmt, quiet, everything)
    return result.exit_code

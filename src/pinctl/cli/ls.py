"""pinctl ls and pinctl namespaces: what is on the node."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import click

from pinctl.cli.options import common_options, output_options
from pinctl.cli.root import NO_PARTIAL_HELP, cli, exit_codes, load_config, load_policy, open_node, open_runtime
from pinctl.errors import EXIT_OK
from pinctl.model import OutputFormat


@cli.command("ls", epilog=exit_codes("0 ok", "1 a REF, ID or PATTERN matched no image (the rest are listed), or an error",
                                     "2 usage or config error"))
@click.argument("filters", nargs=-1, metavar="[REF|ID|PATTERN]...")
@click.option("--pinned/--unpinned", "pinned", default=None,
              help="Only images the runtime keeps (--pinned), or only those the GC may delete (--unpinned).")
@click.option("--drift", is_flag=True,
              help="Only where labels and policy disagree: covered by a pattern but not labelled, "
                   "or labelled but covered by no pattern.")
@click.option("--cri", is_flag=True, help="Add CRI PINNED: what the runtime tells the kubelet.")
@click.option("--id-refs", is_flag=True,
              help="Also list the sha256:<id> reference containerd's CRI adds to each image that has a name "
                   "(JSON and -q always have them).")
@output_options()
@common_options
@click.pass_context
def ls_command(ctx: click.Context, filters: Sequence[str], pinned: Optional[bool], drift: bool, cri: bool,
               id_refs: bool, fmt: OutputFormat, quiet: bool, **_: Any) -> int:
    """List image references, whether each is pinned and why.

    An image is pinned when any of its references (including a sha256:<id> one) carries
    io.cri-containerd.pinned=pinned; every reference of it then shows as pinned, and WHY
    names the one with the label. WHY also lists every policy pattern covering the image
    and where it came from, and labels that look like pins but are not. The table shows an
    image's names; its sha256:<id> reference only with --id-refs, or when it has no name.
    A REF that matches nothing, and a name the policy wants that the node lacks, are looked up
    in the deletion journal: a line on stderr says who deleted it and when (pinctl history). A
    REF, ID or PATTERN that matches nothing makes the exit code 1, as in pinctl history.
    """
    from pinctl.commands.ls import LsQuery, ls, ls_names
    from pinctl.render import output

    cfg = load_config(ctx)
    # A wanted image that is not on the node is looked up in the deletion journal (a table's
    # reader asks why it is missing; a script reading -q does not).
    query = LsQuery(tuple(filters), pinned, drift, cfg.settings.pattern_dialect, cfg.settings.history_dir,
                    point_absent=not quiet and not filters)
    node = open_node(cfg)
    if quiet and query.names_only_will_do and not cri:
        output.print_names(ls_names(node))
        return EXIT_OK
    runtime = open_runtime(cfg)[0] if cri else None
    result = ls(node, load_policy(cfg), query, runtime)
    output.print_images(result.rows, result.errors, fmt, quiet, show_drift=drift, show_cri=cri, id_refs=id_refs)
    for term in result.unmatched:  # as pin would say it
        went = result.went.get(term)
        output.warn(f"ls: no image matches {term}: {went}" if went else
                    f"ls: no image matches {term}; pinctl ls lists them all")
    for line in result.deleted_wanted:
        output.warn(f"ls: {line}")
    return result.exit_code


@cli.command("namespaces", short_help="List containerd's namespaces, marking the default ones.", epilog=NO_PARTIAL_HELP)
@click.option("-q", "--quiet", is_flag=True, help="Names only (what shell completion reads).")
@common_options
@click.pass_context
def namespaces_command(ctx: click.Context, quiet: bool, **_: Any) -> int:
    """List containerd's namespaces; those pinctl reads by default are marked."""
    from pinctl.commands.ls import namespaces
    from pinctl.render import output

    found = namespaces(open_node(load_config(ctx)))
    output.print_namespaces(found, quiet)
    return EXIT_OK

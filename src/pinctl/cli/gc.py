"""pinctl gc plan and pinctl prune: the kubelet's image GC, modelled and imitated."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Optional, Sequence

import click

from pinctl.cli.options import Duration, Percent, common_options, kubelet_options, output_options, textfile_option
from pinctl.cli.root import (
    CONTEXT_SETTINGS,
    PinctlGroup,
    cli,
    exit_codes,
    load_config,
    load_policy,
    open_node,
    open_runtime,
    textfile_target,
)
from pinctl.errors import PinctlError, UsageError
from pinctl.model import OutputFormat

if TYPE_CHECKING:
    from pinctl.gc.kubelet import SourcedGcSettings

def _gc_settings(kubelet_config: Optional[str], high: Optional[int], low: Optional[int], min_age: Any,
                 max_age: Any) -> SourcedGcSettings:
    """The kubelet's config file (or its defaults), with what the flags override."""
    from pinctl.gc.kubelet import GcOverrides, read_gc_settings

    return read_gc_settings(kubelet_config, GcOverrides(high, low, min_age, max_age))


@cli.group("gc", cls=PinctlGroup, context_settings=CONTEXT_SETTINGS,
           short_help="What the kubelet's image GC will delete next (gc plan).")
def gc_group() -> None:
    """What the kubelet's image garbage collector will do on this node."""


@gc_group.command("plan", epilog=exit_codes("0 nothing pinctl wants kept would or may be deleted",
                                            "1 something would or may (or an error)", "2 usage or config error"))
@click.option("--usage", type=Percent(), metavar="PERCENT",
              help="Simulate a disk this full instead of reading the image filesystem's usage.")
@kubelet_options
@textfile_option("the image filesystem's usage against the thresholds and the wanted images at risk")
@output_options(quiet=False)
@common_options
@click.pass_context
def gc_plan_command(ctx: click.Context, usage: Optional[float], kubelet_config: Optional[str],
                    high_threshold: Optional[int], low_threshold: Optional[int], min_age: Any, max_age: Any,
                    textfile: Optional[str], fmt: OutputFormat, **_: Any) -> int:
    """Show what the kubelet's image GC would delete next, in order, and what it keeps and why.

    Reads the runtime's images and containers over the CRI, the image filesystem under the
    CRI's ImageFsInfo mount point, and the kubelet's GC settings. Images pinctl's labels or
    policy want kept but the runtime does not pin are marked at risk with their place in the
    order. Past a disk eviction threshold, the kubelet deletes every unused unpinned image at
    once: that is listed too. Of a tie (images the kubelet ranks equal) it says how many go, not
    which.
    """
    from pinctl.commands.gc import gc_plan
    from pinctl.render import gc as gc_output

    cfg = load_config(ctx)
    settings = _gc_settings(kubelet_config, high_threshold, low_threshold, min_age, max_age)
    if textfile:
        if usage is not None:
            raise UsageError("--usage simulates a disk: its figures do not belong in a textfile",
                             "give --usage or --textfile, not both")
        textfile_target(textfile)
    report = gc_plan(open_node(cfg), load_policy(cfg), lambda: open_runtime(cfg), settings, usage)
    gc_output.print_gc_plan(report, fmt)
    if textfile:
        from pinctl.metrics import exposition as metrics

        metrics.write_textfile(textfile, metrics.gc_textfile(report))
    return report.exit_code


@cli.command("prune", short_help="Delete unused images as the kubelet's GC would, keeping pins.", epilog=exit_codes(
    "0 done (given names: each deleted)", "1 error, not confirmed, or no named image deleted",
    "2 usage or config error, or no --yes without a terminal", "3 some failed or named ones kept"))
@click.argument("images", nargs=-1, metavar="[REF|ID]...")
@click.option("--until-usage", type=Percent(), metavar="PERCENT",
              help="Delete until the image filesystem is this full. Default: the kubelet's low threshold.")
@click.option("--all-unused", is_flag=True, help="Delete every image nothing protects, whatever the usage.")
@click.option("--older-than", type=Duration(), metavar="DURATION",
              help="Only images first seen longer ago than this (raises the minimum age).")
@click.option("--dry-run", is_flag=True, help="Show the plan; delete nothing.")
@click.option("-y", "--yes", is_flag=True, help="Delete without asking (scripts). Without a terminal it is required.")
@kubelet_options
@output_options(quiet=False)
@common_options
@click.pass_context
def prune_command(ctx: click.Context, images: Sequence[str], until_usage: Optional[float], all_unused: bool,
                  older_than: Any, dry_run: bool,
                  yes: bool, kubelet_config: Optional[str], high_threshold: Optional[int],
                  low_threshold: Optional[int], min_age: Any, max_age: Any, fmt: OutputFormat, **_: Any) -> int:
    """Delete unused images as the kubelet's GC would, never one that must stay.

    Never deleted: an image a container uses or names, one the runtime or pinctl pins, the
    sandbox image, one younger than the minimum age. The plan is confirmed first (scripts pass
    --yes); each image is checked again just before it goes. Ties: largest first. Given REF or
    ID, only those images are candidates, whatever the usage; each one kept is listed with why.
    """
    from pinctl.commands.gc import PruneJob, prune
    from pinctl.gc.plan import PruneRequest
    from pinctl.render import gc as gc_output

    cfg = load_config(ctx)
    settings = _gc_settings(kubelet_config, high_threshold, low_threshold, min_age, max_age).settings
    job = PruneJob(settings, PruneRequest(until_usage, all_unused, older_than, tuple(images)), cfg.settings.namespaces,
                   dry_run)
    with gc_output.prune_progress() as progress:
        report = prune(open_node(cfg), load_policy(cfg), lambda: open_runtime(cfg), job,
                       lambda plans: _confirm_prune(plans, yes), progress)
    gc_output.print_prune(report.items, dry_run, fmt, plans=report.plans, named=report.named)
    return report.exit_code


def _confirm_prune(plans: Sequence[Any], yes: bool) -> None:
    from pinctl.render import gc as gc_output

    if not any(plan.delete for plan in plans):
        return
    gc_output.print_prune_plan(plans)
    if yes:
        return
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UsageError("prune deletes images: refusing without --yes when there is no terminal to ask",
                         "look at the plan with --dry-run, then pass --yes")
    if not click.confirm("Delete these images?", default=False, err=True):
        raise PinctlError("not confirmed: nothing was deleted")

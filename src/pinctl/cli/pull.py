"""pinctl pull; the pull request sync --pull makes too."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import click

from pinctl.cli.options import common_options, output_options, pull_options
from pinctl.cli.root import cli, exit_codes, load_config, open_node, open_runtime
from pinctl.model import OutputFormat

if TYPE_CHECKING:
    from pinctl.config.loader import Config
    from pinctl.pull.run import PullRequest


def pull_request(cfg: Config, refs: Sequence[str], pin: bool, options: Mapping[str, Any]) -> PullRequest:
    """The request the pull options make; --max-usage defaults to the kubelet's high threshold minus 5."""
    from pinctl.gc.kubelet import read_gc_settings
    from pinctl.pull.run import PullRequest, default_max_usage

    max_usage = options["max_usage"]
    if max_usage is None:
        settings = read_gc_settings(options["kubelet_config"]).settings
        max_usage = default_max_usage(settings.high_threshold_percent)
    return PullRequest(tuple(refs), pin, options["always"], options["parallel"], options["pull_timeout"],
                       options["retries"], max_usage, cfg.settings.namespaces, options["registry_config"])


def any_namespaces(cfg: Config) -> Config:
    """The node as pull needs it: -n names where images go, and may name a namespace the first
    pull creates, so the node is opened on the namespaces present."""
    return dataclasses.replace(cfg, settings=dataclasses.replace(cfg.settings, namespaces=()))


@cli.command("pull", short_help="Pull images through their runtime, within a disk budget.", epilog=exit_codes("0 every image pulled or present (and pinned)", "1 error or none pulled",
                                       "2 usage or config error",
                                       "3 partial (some failed or skipped for lack of room)", "130 interrupted"))
@click.argument("refs", nargs=-1, required=True, metavar="REF...")
@click.option("--pin", is_flag=True, help="Pin each image right after its pull succeeds (and only then).")
@pull_options
@output_options(quiet=False)
@common_options
@click.pass_context
def pull_command(ctx: click.Context, refs: Sequence[str], pin: bool, fmt: OutputFormat, **options: Any) -> int:
    """Pull images through the runtime that will use them, within a disk budget.

    Kubernetes' images (namespace k8s.io, the default) are pulled with the CRI's PullImage, so
    the runtime's registry configuration, mirrors and credentials apply; -n moby (or a node
    where only Docker answers) pulls through Docker's API. Images already present are skipped
    unless --always. Before each pull the image filesystem is read: a pull that would take it
    past --max-usage is skipped and said so (its size comes from the registry's manifest when
    the registry answers pinctl; when it does not, the pull is refused only when usage is at or
    past the budget already). Credentials never appear in output or errors.
    """
    from pinctl.commands.pull import PullCallbacks, pull
    from pinctl.render import pull as pull_output

    cfg = load_config(ctx)
    request = pull_request(cfg, refs, pin, options)
    node = open_node(any_namespaces(cfg))
    with pull_output.pull_progress() as (progress, finished):
        report = pull(node, lambda: open_runtime(cfg), request, PullCallbacks(progress, finished))
    pull_output.print_pull(report, fmt)
    return report.exit_code

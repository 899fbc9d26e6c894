"""pinctl import."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import click

from pinctl.cli.options import Percent, Seconds, common_options, output_options
from pinctl.cli.pull import any_namespaces
from pinctl.cli.root import cli, exit_codes, load_config, open_node, open_runtime
from pinctl.model import FORMAT_JSON, FORMAT_TABLE, OutputFormat


@cli.command("import", short_help="Import image archives through their runtime, and pin them.",
             epilog=exit_codes("0 every image imported or present (and pinned)", "1 error or every archive failed",
                               "2 usage or config error", "3 partial (some failed)", "130 interrupted"))
@click.argument("archives", nargs=-1, required=True, metavar="ARCHIVE...", type=click.Path(dir_okay=False))
@click.option("--pin", is_flag=True, help="Pin each reference right after its own import succeeds (and only then).")
@click.option("--platform", "platforms", multiple=True, metavar="OS/ARCH[/VARIANT]",
              help="Import this platform's manifests of a multi-platform image (repeatable). Default: this "
                   "node's platform.")
@click.option("--all-platforms", is_flag=True, help="Import the manifests of every platform an index lists.")
@click.option("--snapshotter", metavar="NAME",
              help="Unpack for this snapshotter. Default: the CRI's, from containerd's config, else overlayfs.")
@click.option("--max-usage", type=Percent(), metavar="PERCENT",
              help="Import nothing that would take the image filesystem past this usage. Default: the kubelet's "
                   "high threshold minus 5.")
@click.option("--kubelet-config", metavar="PATH",
              help="The kubelet's config file to read the image GC high threshold from. Default: "
                   "/var/lib/kubelet/config.yaml when it exists, else the kubelet's defaults.")
@click.option("--import-timeout", type=Seconds(1, 86400), default=1800.0, metavar="SECONDS",
              help="Give up on one blob's write, one layer's unpack or Docker's load after this long. Default: "
                   "1800.")
@output_options(formats=(FORMAT_TABLE, FORMAT_JSON), quiet=False)
@common_options
@click.pass_context
def import_command(ctx: click.Context, archives: Sequence[str], pin: bool, platforms: Sequence[str],
                   all_platforms: bool, snapshotter: Optional[str], max_usage: Optional[float],
                   kubelet_config: Optional[str], import_timeout: float, fmt: OutputFormat, **_: Any) -> int:
    """Import image archives (docker save, OCI layout; tar, gzip or zstd) through the runtime.

    k8s.io (the default) through containerd's content, snapshot and image services, as ctr
    images import does: streamed, digests checked, unpacked for the CRI's snapshotter; -n moby
    through Docker's API. An archive is untrusted input: an unsound one is refused whole, in one
    line naming the archive and the entry, none of its images named or labelled. --max-usage is
    pull's disk budget.
    """
    from pinctl.commands.importing import ImportCallbacks, import_
    from pinctl.gc.kubelet import read_gc_settings
    from pinctl.imports.run import ImportRequest
    from pinctl.pull.run import default_max_usage
    from pinctl.render import imports as import_output

    cfg = load_config(ctx)
    if max_usage is None:
        max_usage = default_max_usage(read_gc_settings(kubelet_config).settings.high_threshold_percent)
    request = ImportRequest(tuple(archives), pin, tuple(platforms), all_platforms, max_usage,
                            cfg.settings.namespaces, snapshotter, import_timeout)
    node = open_node(any_namespaces(cfg))
    with import_output.import_progress() as (progress, finished):
        report = import_(node, lambda: open_runtime(cfg), cfg, request, ImportCallbacks(progress, finished))
    import_output.print_import(report, fmt)
    return report.exit_code

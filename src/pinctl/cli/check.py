"""pinctl check: what the CRI runtime tells the kubelet."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import click

from pinctl.cli.options import Seconds, common_options, output_options, textfile_option
from pinctl.cli.root import cli, exit_codes, load_config, load_policy, open_node, open_runtime, textfile_target
from pinctl.model import OutputFormat


@cli.command("check", short_help="Compare pinctl's pins with what the CRI runtime reports.", epilog=exit_codes("0 pinctl and the runtime agree", "1 they differ (or an error)",
                                          "2 usage or config error"))
@click.argument("refs", nargs=-1, metavar="[REF]...")
@click.option("--wait", type=Seconds(0), default=0, metavar="SECONDS",
              help="Poll until they agree, for at most SECONDS: a runtime may lag a label change.")
@textfile_option("the images per namespace and pin state, policy coverage and drift, and the disagreements "
                 "by cause")
@output_options(quiet=False, help_text="Output format; table shows only disagreements.")
@common_options
@click.pass_context
def check_command(ctx: click.Context, refs: Sequence[str], wait: float, textfile: Optional[str], fmt: OutputFormat,
                  **_: Any) -> int:
    """Compare what pinctl expects with what the CRI runtime tells the kubelet.

    With REFs, only those images, asked one by one with the CRI's ImageStatus call, as the
    kubelet does for an image it is about to use. Without, every image the runtime lists: the wanted pin (a label in k8s.io or moby, a policy
    pattern, a Docker config label, the sandbox image) is set against the CRI's pinned field,
    and each difference gets its likely cause and fix. The kubelet itself refreshes its view of
    the images every 5 minutes, so it may lag behind the runtime.
    """
    from pinctl import commands
    from pinctl.render import output

    cfg = load_config(ctx)
    policy = load_policy(cfg)
    if textfile:
        textfile_target(textfile, refs)
    request = commands.CheckRequest(refs, wait, sizes=bool(textfile))
    with output.check_progress(active=wait > 0) as progress:
        report = commands.check(open_node(cfg), policy, lambda: open_runtime(cfg), request, progress)
    output.print_check(report.result, fmt, waited=report.waited)
    if textfile:
        from pinctl.metrics import exposition as metrics

        families = metrics.check_textfile(report.rows, report.namespaces, report.result, policy.patterns)
        metrics.write_textfile(textfile, families)
    return report.exit_code

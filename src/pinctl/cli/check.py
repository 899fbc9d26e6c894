"""pinctl check: what the CRI runtime tells the kubelet; pinctl fleet status: what the agents tell the API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Optional, Sequence

import click

from pinctl.cli.options import Duration, Seconds, common_options, output_options, textfile_option
from pinctl.cli.root import cli, exit_codes, load_config, load_policy, open_node, open_runtime, textfile_target
from pinctl.fleet.condition import POLICY_CONFIGMAP, POLICY_KEY, POLICY_NAMESPACE
from pinctl.model import OutputFormat


@cli.command("check", short_help="Compare pinctl's pins with what the CRI runtime reports.", epilog=exit_codes("0 pinctl and the runtime agree", "1 they differ (or an error)",
                                          "2 usage or config error"))
@click.argument("refs", nargs=-1, metavar="[REF]...")
@click.option("--wait", type=Seconds(0), default=0, metavar="SECONDS",
              help="Poll until they agree, for at most SECONDS: a runtime may lag a label change.")
@click.option("--kubelet-config", metavar="PATH",
              help="The kubelet's config file, for its credential checks. Default: "
                   "/var/lib/kubelet/config.yaml when it exists.")
@textfile_option("the images per namespace and pin state, policy coverage and drift, and the disagreements "
                 "by cause")
@output_options(quiet=False, help_text="Output format; table shows only disagreements.")
@common_options
@click.pass_context
def check_command(ctx: click.Context, refs: Sequence[str], wait: float, kubelet_config: Optional[str],
                  textfile: Optional[str], fmt: OutputFormat, **_: Any) -> int:
    """Compare what pinctl expects with what the CRI runtime tells the kubelet.

    With REFs, only those images, asked one by one with the CRI's ImageStatus call, as the
    kubelet does for an image it is about to use (one it does not know is looked up in the
    deletion journal: the cause says who deleted it, see pinctl history). Without, every image the runtime lists: the wanted pin (a label in k8s.io or moby, a policy
    pattern, a Docker config label, the sandbox image) is set against the CRI's pinned field,
    and each difference gets its likely cause and fix. The kubelet itself refreshes its view of
    the images every 5 minutes, so it may lag behind the runtime.

    With a kubelet here, each pinned image is also judged by its credential checks
    (KEP-2535): will a pod run the copy on disk, or make the kubelet pull it again?
    Those warnings leave the exit code alone.
    """
    from pinctl.commands.check import CheckRequest, check
    from pinctl.render import output

    cfg = load_config(ctx)
    policy = load_policy(cfg)
    if textfile:
        textfile_target(textfile, refs)
    request = CheckRequest(refs, wait, sizes=bool(textfile), history_dir=cfg.settings.history_dir,
                           kubelet_config=kubelet_config, kubelet_root_dir=cfg.settings.kubelet_root_dir)
    with output.check_progress(active=wait > 0) as progress:
        report = check(open_node(cfg), policy, lambda: open_runtime(cfg), request, progress)
    output.print_check(report.result, fmt, waited=report.waited)
    if textfile:
        from pinctl.metrics import exposition as metrics

        families = metrics.check_textfile(report.rows, report.namespaces, report.result, policy.patterns)
        metrics.write_textfile(textfile, families)
    return report.exit_code


@cli.group("fleet", short_help="Ask the Kubernetes API what pinctl agents report.")
def fleet_group() -> None:
    """What the pinctl agents of a Kubernetes cluster report on their Nodes.

    Each agent deployed with the node-status component (deploy/kubernetes/components/
    node-status) writes its Node's condition pinctl.io/PolicyApplied. These commands read
    those conditions with your kubeconfig, as kubectl does; nothing here runs on a node.
    """


@fleet_group.command("status", short_help="Has every node applied the policy ConfigMap?",
                     epilog=exit_codes("0 every selected node applied the ConfigMap's revision",
                                       "1 some did not (or an error)", "2 usage error"))
@click.option("-l", "--selector", default="", metavar="SELECTOR",
              help="Only nodes with these labels, as kubectl takes them (zone=a,pinctl.io/runtime!=cri-o).")
@click.option("--wait", type=Duration(), default="0", metavar="TIME",
              help="Poll until every node applied the ConfigMap, for at most TIME (5m); a status line shows "
                   "on a terminal.")
@click.option("--stale-after", type=Duration(), default="15m", metavar="TIME", show_default=True,
              help="A condition not rewritten for this long means its agent is gone.")
@click.option("--kubeconfig", metavar="FILE", help="As kubectl's: default KUBECONFIG, then ~/.kube/config.")
@click.option("--context", metavar="NAME", help="The kubeconfig context; default: its current one.")
@click.option("--namespace", default=POLICY_NAMESPACE, show_default=True, metavar="NAME",
              help="The policy ConfigMap's namespace.")
@click.option("--configmap", default=POLICY_CONFIGMAP, show_default=True, metavar="NAME", help="The policy ConfigMap.")
@click.option("--key", default=POLICY_KEY, show_default=True, metavar="KEY", help="The ConfigMap's key holding the policy.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the names of the nodes not applied.")
@output_options(quiet=False)
def fleet_status_command(selector: str, wait: timedelta, stale_after: timedelta, kubeconfig: Optional[str],
                         context: Optional[str], namespace: str, configmap: str, key: str, fmt: OutputFormat,
                         quiet: bool) -> int:
    """A row per node: its agent's state against the policy ConfigMap's revision (its
    content hash), the images it pins of those the policy wants, and the first reason.

    A node is applied when its agent runs the ConfigMap's revision and keeps every image the
    policy covers; an exact pattern's image the node lacks is counted absent and is pinned
    when it arrives. Nodes without an agent, or whose agent went quiet (--stale-after), are
    listed as such. With --wait it returns as soon as every node is applied (for CI after
    kubectl apply, as kubectl rollout status does).
    """
    from pinctl.commands.fleet import FleetStatusRequest, fleet_status
    from pinctl.render.fleet import fleet_progress, print_fleet_status

    request = FleetStatusRequest(kubeconfig, context, selector.strip(), namespace, configmap, key,
                                 stale_after.total_seconds(), wait.total_seconds())
    with fleet_progress(active=request.wait > 0 and not quiet) as progress:
        report = fleet_status(request, progress)
    print_fleet_status(report, fmt, quiet)
    return report.exit_code

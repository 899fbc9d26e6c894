"""pinctl sync: once, with --pull, and --watch."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Mapping, Optional

import click

from pinctl.cli.options import Duration, Seconds, common_options, output_options, sync_pull_options
from pinctl.cli.pull import any_namespaces, pull_request
from pinctl.cli.root import EXIT_CODES_HELP, cli, load_config, load_policy, open_node, open_runtime, print_change
from pinctl.errors import UsageError
from pinctl.model import OutputFormat

if TYPE_CHECKING:
    from pinctl.commands.sync import NodeStatusRequest, SyncRequest, WatchRequest
    from pinctl.config.loader import Config
    from pinctl.pins.policy import Policy

@cli.command("sync", epilog=EXIT_CODES_HELP)
@click.option("--prune", is_flag=True, help="Also unpin what sync pinned and no pattern covers.")
@click.option("--allow-empty-policy", is_flag=True,
              help="Let --prune run with no patterns at all (it then removes every pin sync added).")
@click.option("--dry-run", is_flag=True, help="Show the plan; change nothing.")
@click.option("--watch", is_flag=True,
              help="Keep running: sync at start, after every reconnect and as each image changes. A changed "
                   "config (checked every 2 s) or SIGHUP reloads it; SIGTERM stops it.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="With --watch: log as text or JSON.")
@click.option("--check-interval", type=Seconds(0, 86400), default=60.0, metavar="SECONDS",
              help="With --watch: read the whole node this often (metrics, --node-status); 0: never. "
                   "Default: 60.")
@click.option("--kubelet-config", metavar="PATH",
              help="With --watch or --pull: the kubelet's config (GC thresholds). Default: "
                   "/var/lib/kubelet/config.yaml.")
@click.option("--node-status", metavar="NODE",
              help="With --watch: write this Node's pinctl condition and Events (docs/fleet-status.md).")
@click.option("--status-heartbeat", type=Duration(), default="5m", metavar="TIME",
              help="With --node-status: rewrite an unchanged condition this often. Default: 5m.")
@click.option("--pull", "pull_first", is_flag=True,
              help="First pull the policy's exact references the node lacks (as pinctl pull), then sync.")
@sync_pull_options
@output_options()
@common_options
@click.pass_context
def sync_command(ctx: click.Context, prune: bool, allow_empty_policy: bool, dry_run: bool, watch: bool,
                 log_format: str, check_interval: float, kubelet_config: Optional[str], node_status: Optional[str],
                 status_heartbeat: timedelta, pull_first: bool,
                 fmt: OutputFormat, quiet: bool, **options: Any) -> int:
    """Label every image the policy covers, once.

    Each reference a pattern matches gets io.cri-containerd.pinned=pinned, plus
    io.pinctl.managed=true to record that sync put it there. --prune removes pins carrying
    that mark when no pattern covers them any more; a pin set by anyone else is never removed.
    """
    from pinctl.commands.sync import SyncRequest, WatchRequest, sync

    cfg = load_config(ctx)
    policy = load_policy(cfg)
    request = SyncRequest(prune, dry_run, allow_empty_policy, cfg.files)
    if watch:
        if pull_first:
            raise UsageError("--watch and --pull do not go together", "run sync --pull once, then sync --watch")
        if dry_run:
            raise UsageError("--watch and --dry-run do not go together", "use sync --dry-run once to see the plan")
        return _watch(ctx, WatchRequest(prune, allow_empty_policy, kubelet_config, options["max_usage"]),
                      log_format, check_interval, _node_status(node_status, status_heartbeat, check_interval))
    if node_status:
        raise UsageError("--node-status needs --watch", "add --watch: the condition is kept true as the node changes")
    if pull_first:
        return _sync_pull(cfg, policy, request, fmt, quiet, {**options, "kubelet_config": kubelet_config})
    if cfg.settings.import_dirs:
        return _sync_imports(cfg, policy, request, fmt, quiet, {**options, "kubelet_config": kubelet_config})
    return print_change(sync(open_node(cfg), policy, request), fmt, quiet)


def _sync_imports(cfg: Config, policy: Policy, request: SyncRequest, fmt: OutputFormat, quiet: bool,
                  options: Mapping[str, Any]) -> int:
    """sync with import_dirs: the directories' archives imported and pinned, then the policy."""
    from pinctl.commands.importing import ImportCallbacks
    from pinctl.commands.sync import SyncImportRequest, sync_with_imports
    from pinctl.gc.kubelet import read_gc_settings
    from pinctl.imports.run import ImportRequest
    from pinctl.pull.run import default_max_usage
    from pinctl.render import imports as import_output

    max_usage = options["max_usage"]
    if max_usage is None:
        max_usage = default_max_usage(read_gc_settings(options["kubelet_config"]).settings.high_threshold_percent)
    imports = ImportRequest((), True, max_usage=max_usage, namespaces=cfg.settings.namespaces)
    with import_output.import_progress() as (progress, finished):
        report = sync_with_imports(open_node(any_namespaces(cfg)), lambda: open_node(cfg), policy,
                                   lambda: open_runtime(cfg), cfg, SyncImportRequest(request, imports),
                                   ImportCallbacks(progress, finished))
    import_output.print_sync_imports(report, fmt, quiet)
    return report.exit_code


def _sync_pull(cfg: Config, policy: Policy, request: SyncRequest, fmt: OutputFormat, quiet: bool,
               options: Mapping[str, Any]) -> int:
    from pinctl.commands.pull import PullCallbacks
    from pinctl.commands.sync import sync_pull
    from pinctl.render import pull as pull_output

    if request.dry_run:
        raise UsageError("--pull and --dry-run do not go together", "use sync --dry-run to see the label plan")
    if cfg.settings.import_dirs:
        from pinctl.render import output

        output.warn("sync --pull does not read import_dirs: run pinctl sync for them")
    pulls = pull_request(cfg, (), False, options)
    with pull_output.pull_progress() as (progress, finished):
        report = sync_pull(open_node(any_namespaces(cfg)), lambda: open_node(cfg), policy, lambda: open_runtime(cfg),
                           pulls, request, PullCallbacks(progress, finished))
    pull_output.print_sync_pull(report, fmt, quiet)
    return report.exit_code


def _node_status(node: Optional[str], every: timedelta, check_interval: float) -> Optional[NodeStatusRequest]:
    from pinctl.commands.sync import NodeStatusRequest

    heartbeat = every.total_seconds()
    if not node:
        return None
    if check_interval <= 0:
        raise UsageError("--node-status needs the periodic check", "give --check-interval a number of seconds above 0")
    if heartbeat < 10:
        raise UsageError(f"--status-heartbeat {heartbeat:g}s is too often", "give 10s or more; the default is 5m")
    return NodeStatusRequest(node.strip(), heartbeat)


def _watch(ctx: click.Context, request: WatchRequest, log_format: str, check_interval: float,
           node_status: Optional[NodeStatusRequest]) -> int:
    from dataclasses import replace

    from pinctl.commands.sync import watch
    from pinctl.metrics import serve
    from pinctl.render.log import Log

    log = Log(log_format)
    cfg = load_config(ctx)
    address, source = cfg.settings.metrics_address, cfg.sources.get("metrics_address", "")
    request = replace(request, check_interval=check_interval, metrics=bool(address), node_status=node_status)
    return watch(lambda: load_config(ctx), request, log,
                 lambda watcher, checker: serve.watcher_metrics(address, source, watcher, checker, log, check_interval))

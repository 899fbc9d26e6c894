"""pinctl cri-proxy."""

from __future__ import annotations

from typing import Any

import click

from pinctl.cli.options import Seconds, common_options
from pinctl.cli.root import cli, exit_codes, load_config


@cli.command("cri-proxy", short_help="Serve the CRI to the kubelet, reporting pinctl's pins.", epilog=exit_codes("0 stopped by SIGTERM or SIGINT", "1 error", "2 usage or config error "
                                              "(no --runtime-endpoint, --listen or --metrics-address in use)"))
@click.option("--listen", metavar="SOCKET", required=True, type=click.Path(dir_okay=False),
              help="Serve the CRI on this unix socket (mode 0660), e.g. /run/pinctl/cri-proxy.sock; point the "
                   "kubelet's --container-runtime-endpoint at it. A stale socket there is replaced.")
@click.option("--relay", metavar="auto|python|PATH", default="auto", show_default=True,
              help="What forwards the calls: pinctl-cri-relay, the compiled relay (auto: when installed, beside "
                   "pinctl or on PATH), or Python's gRPC (python: adds about 1 ms to a ListImages of 1,000 images).")
@click.option("--refresh", metavar="SECONDS", type=Seconds(0.5, 3600.0), default=2.0, show_default=True,
              help="Read the pins this often where no image events come (CRI-O, --no-events).")
@click.option("--resync", metavar="SECONDS", type=Seconds(1.0, 86400.0), default=300.0, show_default=True,
              help="Read the pins this often even when events come.")
@click.option("--events/--no-events", default=True, show_default=True,
              help="Read the pins after the runtime's image events.")
@click.option("--allow-remove-pinned", is_flag=True, envvar="PINCTL_ALLOW_REMOVE_PINNED",
              help="Forward RemoveImage of a pinned image too, not FAILED_PRECONDITION. "
                   "Env: PINCTL_ALLOW_REMOVE_PINNED.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="One log line per event on stderr, as text or JSON.")
@common_options
@click.pass_context
def cri_proxy_command(ctx: click.Context, listen: str, relay: str, refresh: float, resync: float, events: bool,
                      allow_remove_pinned: bool, log_format: str, **_: Any) -> int:
    """Serve the CRI to the kubelet, forwarding every call to the runtime (--runtime-endpoint).

    ListImages, StreamImages and ImageStatus report pinned: true for every image pinctl wants
    kept; RemoveImage of such an image is refused, and every RemoveImage is journaled
    (--history-dir). The pins are kept current from the runtime's image events; no call waits
    for a read. SIGHUP or a changed config file reloads; SIGTERM stops.
    """
    from pinctl.commands.criproxy import ProxyRequest, cri_proxy
    from pinctl.criproxy.relay import find_relay
    from pinctl.metrics import serve
    from pinctl.render import output
    from pinctl.render.log import Log

    request = ProxyRequest(listen, find_relay(relay), allow_remove_pinned, refresh, resync, events)
    log = Log(log_format)
    cfg = load_config(ctx)
    address, source = cfg.settings.metrics_address, cfg.sources.get("metrics_address", "")
    return cri_proxy(lambda: load_config(ctx), request, log, output.warn,
                     lambda proxy: serve.proxy_metrics(address, source, proxy, log))

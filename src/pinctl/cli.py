"""The command line: click only. Work is done by pinctl.service; errors map to exits in main()."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TypeVar

import click

from pinctl import __version__
from pinctl.errors import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, PinctlError

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
DEFAULT_TIMEOUT = 2.0
EXIT_CODES_HELP = "Exit codes: 0 ok, 1 error, 2 usage or config error, 3 partial (some items failed)."


@dataclass
class EngineSettings:
    address: str
    timeout: float
    namespaces: list[str]
    containerd_config: Optional[str]


def engine_options(func: F) -> F:
    """Options accepted both before and after the subcommand name; the later one wins."""
    options = [
        click.option("-n", "--namespace", "namespaces", multiple=True, metavar="NS",
                     help="containerd namespace, repeatable; 'all' for every one. "
                          "Default: $CONTAINERD_NAMESPACE, else k8s.io and moby where they exist."),
        click.option("--address", metavar="SOCKET",
                     help="containerd socket. Default: $CONTAINERD_ADDRESS, else /run/containerd/containerd.sock."),
        click.option("--timeout", type=click.FloatRange(min=0.05), metavar="SECONDS",
                     help=f"Deadline for each call to the engine. Default: {DEFAULT_TIMEOUT:g}."),
        click.option("--containerd-config", metavar="PATH", type=click.Path(dir_okay=False),
                     help="containerd config to read the CRI sandbox image from. "
                          "Default: $PINCTL_CONTAINERD_CONFIG, else /etc/containerd/config.toml when readable."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def output_options(func: F) -> F:
    func = click.option("-q", "--quiet", is_flag=True, help="Print only references, one per line.")(func)
    return click.option("-o", "--output", "fmt", type=click.Choice(["table", "wide", "json"]),
                        default="table", show_default=True, help="Output format.")(func)


def engine_settings(ctx: click.Context) -> EngineSettings:
    chain = _param_chain(ctx)

    def pick(name: str) -> Any:
        for params in chain:
            value = params.get(name)
            if value not in (None, ()):
                return value
        return None

    from pinctl.backends.containerd import default_address

    env_ns = os.environ.get("CONTAINERD_NAMESPACE")
    return EngineSettings(
        address=pick("address") or default_address(),
        timeout=pick("timeout") or DEFAULT_TIMEOUT,
        namespaces=list(pick("namespaces") or ([env_ns] if env_ns else [])),
        containerd_config=pick("containerd_config") or os.environ.get("PINCTL_CONTAINERD_CONFIG") or None,
    )


def _param_chain(ctx: click.Context) -> list[dict[str, Any]]:
    chain: list[dict[str, Any]] = []
    current: Optional[click.Context] = ctx
    while current is not None:
        chain.append(current.params)
        current = current.parent
    return chain


def open_store(settings: EngineSettings) -> Any:
    from pinctl.backends.containerd import ContainerdStore

    return ContainerdStore(settings.address, settings.timeout, settings.containerd_config)


@click.group(context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES_HELP)
@engine_options
@click.version_option(__version__, "--version", prog_name="pinctl")
def cli(**_: Any) -> None:
    """Show and set which container images the kubelet's image GC keeps.

    The kubelet skips an image only when the runtime reports it pinned over the CRI.
    containerd's CRI plugin pins an image when any of its references carries the label
    io.cri-containerd.pinned=pinned. pinctl lists those pins and adds or removes them.
    """


@cli.command("ls", epilog=EXIT_CODES_HELP)
@click.argument("filters", nargs=-1, metavar="[REF|ID|GLOB]...")
@click.option("--pinned", "pinned", flag_value=True, default=None, help="Only images the runtime keeps.")
@click.option("--unpinned", "pinned", flag_value=False, help="Only images the GC may delete.")
@output_options
@engine_options
@click.pass_context
def ls_command(ctx: click.Context, filters: Sequence[str], pinned: Optional[bool], fmt: str, quiet: bool,
               **_: Any) -> int:
    """List image references, whether each is pinned and why.

    An image is pinned when any of its references (including a sha256:<id> one) carries
    io.cri-containerd.pinned=pinned; every reference of it then shows as pinned, and WHY
    names the one with the label. Labels that look like pins but are not are shown too.
    """
    from pinctl import output
    from pinctl.service import listing, namespaces

    store = open_store(settings := engine_settings(ctx))
    selected = namespaces.select_namespaces(store, settings.namespaces)
    if not selected and not settings.namespaces:
        output.warn(f"no k8s.io or moby namespace in containerd at {store.address}; pick one with -n NS or -n all")
    result = listing.list_images(store, selected)
    rows = listing.filter_rows(result.rows, filters, pinned)
    output.print_images(rows, result.errors, fmt, quiet)
    return EXIT_OK


def _change_command(name: str, summary: str) -> Callable[[F], click.Command]:
    def decorate(func: F) -> click.Command:
        func = click.argument("refs", nargs=-1, required=True, metavar="REF|ID...")(func)
        func = click.option("--dry-run", is_flag=True, help="Show the plan; change nothing.")(func)
        func = output_options(func)
        func = engine_options(func)
        return cli.command(name, help=summary, epilog=EXIT_CODES_HELP)(click.pass_context(func))

    return decorate


@_change_command("pin", """Pin images: add io.cri-containerd.pinned=pinned.

REF is normalised like Docker's (alpine means docker.io/library/alpine:latest) and labels that
one reference. sha256:<id> or a unique ID prefix labels every reference of the image. Only that
one label is written. Already pinned references are reported and skipped.""")
def pin_command(ctx: click.Context, refs: Sequence[str], dry_run: bool, fmt: str, quiet: bool, **_: Any) -> int:
    return _run_change(ctx, "pin", refs, dry_run, fmt, quiet)


@_change_command("unpin", """Unpin images: remove io.cri-containerd.pinned.

The label is removed from every reference of the image the argument names, since a label left on
any of them would keep the image pinned. Each reference is reported.""")
def unpin_command(ctx: click.Context, refs: Sequence[str], dry_run: bool, fmt: str, quiet: bool, **_: Any) -> int:
    return _run_change(ctx, "unpin", refs, dry_run, fmt, quiet)


def _run_change(ctx: click.Context, command: str, args: Sequence[str], dry_run: bool, fmt: str, quiet: bool) -> int:
    from pinctl import output
    from pinctl.service import namespaces, pinning

    settings = engine_settings(ctx)
    store = open_store(settings)
    selected = namespaces.select_namespaces(store, settings.namespaces)
    plan = pinning.make_plan(store, selected, command, args)
    results = pinning.apply_plan(store, plan, dry_run)
    status = pinning.status_of(results)
    output.print_results(command, results, status, dry_run, fmt, quiet)
    return {"success": EXIT_OK, "partial": EXIT_PARTIAL}.get(status, EXIT_ERROR)


def main(argv: Optional[Sequence[str]] = None) -> None:
    sys.exit(run(argv))


def run(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI and turn every failure into one line on stderr and a documented exit code."""
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="pinctl", standalone_mode=False)
        return code if isinstance(code, int) else EXIT_OK
    except click.UsageError as err:
        return _usage_error(err, err.ctx)
    except click.exceptions.Abort:
        return 130
    except PinctlError as err:
        click.echo(f"pinctl: {err}", err=True)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except Exception as err:  # noqa: BLE001 - the last net: one line, not a traceback
        if os.environ.get("PINCTL_DEBUG"):
            raise
        click.echo(f"pinctl: internal error: {type(err).__name__}: {err} (rerun with PINCTL_DEBUG=1 and report it)", err=True)
        return EXIT_ERROR


def _usage_error(err: click.UsageError, ctx: Optional[click.Context]) -> int:
    where = ctx.command_path if ctx else "pinctl"
    click.echo(f"pinctl: {err.format_message()} (see '{where} --help')", err=True)
    return EXIT_USAGE


def _silence_stdout() -> None:
    # The reader went away (| head); point stdout at /dev/null so the exit flush stays quiet.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())

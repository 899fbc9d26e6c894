"""The command line: click only. Work is done by pinctl.service; errors map to exits in run()."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypeVar

import click

from pinctl import __version__
from pinctl.config import CRIO_DEFAULT_PATH
from pinctl.errors import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, PinctlError, UsageError

if TYPE_CHECKING:
    from pinctl.backends.containerd import ContainerdStore
    from pinctl.config import Config
    from pinctl.service.policy import Policy

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
EXIT_CODES_HELP = "Exit codes: 0 ok, 1 error, 2 usage or config error, 3 partial (some items failed)."

# Options every command takes, before or after its name; the one nearer the command wins.
COMMON_OPTIONS = [
    click.option("-n", "--namespace", "namespaces", multiple=True, metavar="NS",
                 help="containerd namespace, repeatable; 'all' for every one. "
                      "Default: $CONTAINERD_NAMESPACE, config 'namespaces', else k8s.io and moby where they exist."),
    click.option("--address", metavar="SOCKET",
                 help="containerd socket. Default: $CONTAINERD_ADDRESS, else /run/containerd/containerd.sock."),
    click.option("--timeout", type=click.FloatRange(min=0.05), metavar="SECONDS",
                 help="Deadline for each call to the engine. Default: 2."),
    click.option("--containerd-config", metavar="PATH", type=click.Path(dir_okay=False),
                 help="containerd config to read the CRI sandbox image from. "
                      "Default: $PINCTL_CONTAINERD_CONFIG, else /etc/containerd/config.toml when readable."),
    click.option("--config", "config_path", metavar="PATH", type=click.Path(dir_okay=False),
                 help="pinctl config file; drop-ins come from config.d beside it. "
                      "Default: $PINCTL_CONFIG, else /etc/pinctl/config.toml."),
    click.option("--pinned-image", "pinned_images", multiple=True, metavar="PATTERN",
                 help="Add a pinned-image pattern (exact, glob 'repo/*' or keyword '*word*'); repeatable."),
    click.option("--pattern-dialect", type=click.Choice(["pinctl", "crio"]),
                 help="How patterns match: pinctl (strict, the default) or crio (exactly as CRI-O)."),
    click.option("--from-crio", metavar="[PATH]", is_flag=False, flag_value=CRIO_DEFAULT_PATH, default=None,
                 help=f"Add CRI-O's pinned_images (crio dialect) from PATH and PATH.d/. Default PATH: {CRIO_DEFAULT_PATH}."),
]

FLAG_KEYS = {
    "namespaces": "namespaces",
    "address": "containerd_address",
    "timeout": "timeout",
    "containerd_config": "containerd_config",
    "pattern_dialect": "pattern_dialect",
}


def common_options(func: F) -> F:
    for option in reversed(COMMON_OPTIONS):
        func = option(func)
    return func


def output_options(func: F) -> F:
    func = click.option("-q", "--quiet", is_flag=True, help="Print only references, one per line.")(func)
    return click.option("-o", "--output", "fmt", type=click.Choice(["table", "wide", "json"]),
                        default="table", show_default=True, help="Output format.")(func)


def _param_chain(ctx: click.Context) -> list[dict[str, Any]]:
    """Parameters of this command, then of each parent: nearest first."""
    chain: list[dict[str, Any]] = []
    current: Optional[click.Context] = ctx
    while current is not None:
        chain.append(current.params)
        current = current.parent
    return chain


def load_config(ctx: click.Context) -> Config:
    from pinctl import config

    chain = _param_chain(ctx)

    def pick(name: str) -> Any:
        return next((p[name] for p in chain if p.get(name) not in (None, ())), None)

    flags: dict[str, Any] = {key: pick(name) for name, key in FLAG_KEYS.items()}
    flags["namespaces"] = list(flags["namespaces"] or [])
    flags["pinned_images"] = [pattern for params in reversed(chain) for pattern in params.get("pinned_images", ())]
    return config.load(flags, os.environ, config_path=pick("config_path"), from_crio=pick("from_crio"))


def open_store(cfg: Config) -> ContainerdStore:
    from pinctl.backends.containerd import ContainerdStore

    return ContainerdStore(cfg.get("containerd_address"), cfg.get("timeout"), cfg.get("containerd_config"))


def load_policy(cfg: Config) -> Policy:
    from pinctl.service.policy import compile_policy

    return compile_policy(cfg.patterns)


def selected_namespaces(store: ContainerdStore, cfg: Config) -> list[str]:
    from pinctl import output
    from pinctl.service import namespaces

    requested = cfg.get("namespaces")
    selected = namespaces.select_namespaces(store, requested)
    if not selected and not requested:
        output.warn(f"no k8s.io or moby namespace in containerd at {store.address}; pick one with -n NS or -n all")
    return selected


@click.group(context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES_HELP)
@common_options
@click.version_option(__version__, "--version", prog_name="pinctl")
def cli(**_: Any) -> None:
    """Show and set which container images the kubelet's image GC keeps.

    The kubelet skips an image only when the runtime reports it pinned over the CRI.
    containerd's CRI plugin pins an image when any of its references carries the label
    io.cri-containerd.pinned=pinned. pinctl lists those pins, adds and removes them, and
    keeps them in line with a policy of CRI-O-style patterns (see pinctl config show).
    """


@cli.command("ls", epilog=EXIT_CODES_HELP)
@click.argument("filters", nargs=-1, metavar="[REF|ID|PATTERN]...")
@click.option("--pinned", "pinned", flag_value=True, default=None, help="Only images the runtime keeps.")
@click.option("--unpinned", "pinned", flag_value=False, help="Only images the GC may delete.")
@click.option("--drift", is_flag=True,
              help="Only where labels and policy disagree: covered by a pattern but not labelled, "
                   "or labelled but covered by no pattern.")
@output_options
@common_options
@click.pass_context
def ls_command(ctx: click.Context, filters: Sequence[str], pinned: Optional[bool], drift: bool, fmt: str,
               quiet: bool, **_: Any) -> int:
    """List image references, whether each is pinned and why.

    An image is pinned when any of its references (including a sha256:<id> one) carries
    io.cri-containerd.pinned=pinned; every reference of it then shows as pinned, and WHY
    names the one with the label. WHY also lists every policy pattern covering the image
    and where it came from, and labels that look like pins but are not.
    """
    from pinctl import output
    from pinctl.service import listing

    cfg = load_config(ctx)
    policy = load_policy(cfg)
    store = open_store(cfg)
    result = listing.list_images(store, selected_namespaces(store, cfg), policy)
    rows = listing.filter_rows(result.rows, filters, pinned, drift, cfg.get("pattern_dialect"))
    output.print_images(rows, result.errors, fmt, quiet, show_drift=drift)
    return EXIT_OK


def _change_command(name: str, summary: str) -> Callable[[F], click.Command]:
    def decorate(func: F) -> click.Command:
        func = click.argument("refs", nargs=-1, required=True, metavar="REF|ID|PATTERN...")(func)
        func = click.option("--dry-run", is_flag=True, help="Show the plan; change nothing.")(func)
        func = output_options(func)
        func = common_options(func)
        return cli.command(name, help=summary, epilog=EXIT_CODES_HELP)(click.pass_context(func))

    return decorate


@_change_command("pin", """Pin images: add io.cri-containerd.pinned=pinned.

REF is normalised like Docker's (alpine means docker.io/library/alpine:latest) and labels that
one reference. sha256:<id> or a unique ID prefix labels every reference of the image. A quoted
PATTERN ('registry.example/*', '*word*') labels every reference it matches now. Only that one
label is written. Already pinned references are reported and skipped.""")
def pin_command(ctx: click.Context, refs: Sequence[str], dry_run: bool, fmt: str, quiet: bool, **_: Any) -> int:
    return _run_change(ctx, "pin", refs, dry_run, fmt, quiet)


@_change_command("unpin", """Unpin images: remove io.cri-containerd.pinned.

The label is removed from every reference of each image the arguments name (a REF, an ID or
a quoted PATTERN), since a label left on any of them would keep the image pinned. The mark
pinctl sync leaves beside its pins goes too. Each reference is reported.""")
def unpin_command(ctx: click.Context, refs: Sequence[str], dry_run: bool, fmt: str, quiet: bool, **_: Any) -> int:
    return _run_change(ctx, "unpin", refs, dry_run, fmt, quiet)


def _run_change(ctx: click.Context, command: str, args: Sequence[str], dry_run: bool, fmt: str, quiet: bool) -> int:
    from pinctl.service import pinning

    cfg = load_config(ctx)
    store = open_store(cfg)
    plan = pinning.make_plan(store, selected_namespaces(store, cfg), command, args, cfg.get("pattern_dialect"))
    return _apply(command, store, plan, dry_run, fmt, quiet)


def _apply(command: str, store: ContainerdStore, plan: Any, dry_run: bool, fmt: str, quiet: bool) -> int:
    from pinctl import output
    from pinctl.service import pinning

    results = pinning.apply_plan(store, plan, dry_run)
    status = pinning.status_of(results)
    output.print_results(command, results, status, dry_run, fmt, quiet)
    return {"success": EXIT_OK, "partial": EXIT_PARTIAL}.get(status, EXIT_ERROR)


@cli.command("sync", epilog=EXIT_CODES_HELP)
@click.option("--prune", is_flag=True,
              help="Also unpin references that sync pinned earlier and no pattern covers now.")
@click.option("--allow-empty-policy", is_flag=True,
              help="Let --prune run with no patterns at all (it then removes every pin sync added).")
@click.option("--dry-run", is_flag=True, help="Show the plan; change nothing.")
@output_options
@common_options
@click.pass_context
def sync_command(ctx: click.Context, prune: bool, allow_empty_policy: bool, dry_run: bool, fmt: str, quiet: bool,
                 **_: Any) -> int:
    """Label every image the policy covers, once.

    Each reference a pattern matches gets io.cri-containerd.pinned=pinned, plus
    io.pinctl.managed=true to record that sync put it there. --prune removes pins carrying
    that mark when no pattern covers them any more; a pin set by anyone else is never removed.
    """
    from pinctl.service import pinning

    cfg = load_config(ctx)
    policy = load_policy(cfg)
    if prune and not policy and not allow_empty_policy:
        read = ", ".join(cfg.files) or "no config file"
        raise UsageError(f"the policy has no pinned_images (read: {read}); --prune would remove every pin sync added",
                         "fix the config, or pass --allow-empty-policy if that is what you want")
    store = open_store(cfg)
    plan = pinning.make_sync_plan(store, selected_namespaces(store, cfg), policy, prune)
    return _apply("sync", store, plan, dry_run, fmt, quiet)


@cli.group("config", context_settings=CONTEXT_SETTINGS)
def config_group() -> None:
    """Show and check pinctl's configuration and pin policy."""


@config_group.command("show", epilog=EXIT_CODES_HELP)
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output format.")
@common_options
@click.pass_context
def config_show(ctx: click.Context, fmt: str, **_: Any) -> int:
    """Show the effective configuration and where each value came from.

    Sources, lowest to highest: defaults, the config file, its drop-ins (config.d/*.toml in
    lexical order), the environment, flags. pinned_images collects patterns from all of them.
    """
    from pinctl import output

    output.print_config(load_config(ctx), fmt)
    return EXIT_OK


@config_group.command("lint", epilog="Exit codes: 0 no problems, 1 problems found, 2 the config cannot be read.")
@click.option("--offline", is_flag=True, help="Only check the patterns themselves; do not ask containerd.")
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output format.")
@common_options
@click.pass_context
def config_lint(ctx: click.Context, offline: bool, fmt: str, **_: Any) -> int:
    """Check the pin policy: one line per problem.

    Invalid patterns; patterns that match no image present; patterns shadowed by a broader
    one; globs that CRI-O would match differently (CRI-O does not anchor them).
    """
    from pinctl import output
    from pinctl.service import lint

    cfg = load_config(ctx)
    store = None if offline else open_store(cfg)
    problems = lint.lint(cfg, store, None if store is None else lambda: selected_namespaces(store, cfg))
    output.print_problems(problems, fmt)
    return EXIT_ERROR if problems else EXIT_OK


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
        click.echo(f"pinctl: internal error: {type(err).__name__}: {err} (rerun with PINCTL_DEBUG=1 and report it)",
                   err=True)
        return EXIT_ERROR


def _usage_error(err: click.UsageError, ctx: Optional[click.Context]) -> int:
    where = ctx.command_path if ctx else "pinctl"
    click.echo(f"pinctl: {err.format_message()} (see '{where} --help')", err=True)
    return EXIT_USAGE


def _silence_stdout() -> None:
    # The reader went away (| head); point stdout at /dev/null so the exit flush stays quiet.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())

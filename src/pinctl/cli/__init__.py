"""The command line: click only. Work is done by pinctl.service; errors map to exits in run()."""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, TextIO, TypeVar

import click

from pinctl import __version__
from pinctl.config.loader import CONFIG_ENV, CRIO_DEFAULT_PATH, DEFAULT_PATH
from pinctl.errors import (
    EXIT_ERROR, EXIT_OK, EXIT_PIPE, EXIT_USAGE, OutputClosed, OutputError, PinctlError, UsageError,
)
from pinctl.config.settings import KEYS, KeySpec, default_sentence
from pinctl.model import FORMAT_JSON, FORMAT_TABLE, OUTPUT_FORMATS, OutputFormat

if TYPE_CHECKING:
    from pinctl.config.loader import Config
    from pinctl.commands import ChangeReport
    from pinctl.pins.policy import Policy
    from pinctl.node.sources import Node
    from pinctl.watch.watcher import Watcher

F = TypeVar("F", bound=Callable[..., Any])

# click 8.2+ raises this for a group named without a subcommand; older click prints help itself.
NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
EXIT_CODES_HELP = "Exit codes: 0 ok, 1 error, 2 usage or config error, 3 partial (some items failed)."


class Seconds(click.ParamType):
    """A number of seconds within bounds; unlike click.FloatRange, --help shows no '[x>=...]'."""

    name = "seconds"

    def __init__(self, low: float, high: float = math.inf) -> None:
        self.low, self.high = low, high

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds; {self.wanted()}", param, ctx)
        # Checked here: a deadline too large for gRPC would otherwise fail only at the first call.
        if not (math.isfinite(seconds) and self.low <= seconds <= self.high):
            self.fail(f"{value} is out of range; {self.wanted()}", param, ctx)
        return seconds

    def wanted(self) -> str:
        if math.isinf(self.high):
            return f"give at least {self.low:g} seconds"
        return f"give {self.low:g} to {self.high:g} seconds"


class Percent(click.ParamType):
    """A percentage from 0 to 100; unlike click's ranges, --help shows no '[0<=x<=100]'."""

    name = "percent"

    def __init__(self, whole: bool = False) -> None:
        self.whole = whole

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        try:
            number = int(value) if self.whole else float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a {'whole ' if self.whole else ''}percentage; give 0 to 100", param, ctx)
        if not 0 <= number <= 100:
            self.fail(f"{value} is out of range; give 0 to 100", param, ctx)
        return number


class Count(click.ParamType):
    """A whole number within bounds, without click's '[x>=...]' in --help."""

    name = "count"

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        try:
            number = int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a whole number; give {self.low} to {self.high}", param, ctx)
        if not self.low <= number <= self.high:
            self.fail(f"{value} is out of range; give {self.low} to {self.high}", param, ctx)
        return number


class Duration(click.ParamType):
    """A duration as the kubelet writes them: 2m, 1h30m, 90s, 0."""

    name = "duration"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        from datetime import timedelta

        from pinctl.gc.kubelet import parse_duration

        if isinstance(value, timedelta):
            return value
        try:
            parsed = parse_duration(str(value))
        except ValueError as err:
            self.fail(str(err), param, ctx)
        if parsed < timedelta(0):
            self.fail(f"{value} is negative; give a duration like 2m", param, ctx)
        return parsed


class CommonOption(click.Option):
    """An option every command takes (COMMON_OPTIONS): listed after the command's own ones.

    env_name and default_text are for README's table of them: the variable that sets the same
    thing, and what holds when neither is given (`code` in backquotes).
    """

    def __init__(self, param_decls: Optional[Sequence[str]] = None, env_name: Optional[str] = None,
                 default_text: str = "", **attrs: Any) -> None:
        super().__init__(param_decls, **attrs)
        self.env_name = env_name
        self.default_text = default_text


def _common(*names: str, **attrs: Any) -> Callable[[F], F]:
    return click.option(*names, cls=CommonOption, **attrs)


def setting_option(spec: KeySpec) -> Callable[[F], F]:
    """The option that sets one config key: names, metavar, type and help from the key table.

    Its parameter is named after the key, which is how load_config finds what it was given.
    """
    attrs: dict[str, Any] = {"metavar": spec.metavar, "multiple": spec.type == "list", "help": spec.option_help,
                             "env_name": spec.env, "default_text": spec.default_markdown}
    if spec.type == "choice":
        attrs["type"] = click.Choice(spec.choices)
    elif spec.type == "number":
        attrs["type"] = Seconds(*(spec.bounds or (0.0, math.inf)))
    elif spec.metavar == "PATH":
        attrs["type"] = click.Path(dir_okay=False)
    return _common(*spec.flag_names, spec.name, **attrs)


def setting_options(keys: Mapping[str, KeySpec]) -> list[Callable[[F], F]]:
    """One option for each key with a flag, in the table's order."""
    return [setting_option(spec) for spec in keys.values() if spec.flag]


# They say where the settings come from and set none themselves.
SOURCE_OPTIONS = [
    _common("--config", "config_path", metavar="PATH", type=click.Path(dir_okay=False), env_name=CONFIG_ENV,
            default_text=f"`{DEFAULT_PATH}`",
            help="pinctl config file; drop-ins come from config.d beside it. "
                 + default_sentence(CONFIG_ENV, None, DEFAULT_PATH)),
    _common("--from-crio", metavar="[PATH]", is_flag=False, flag_value=CRIO_DEFAULT_PATH, default=None,
            default_text=f"not read; PATH `{CRIO_DEFAULT_PATH}` when given alone",
            help=f"Add CRI-O's pinned_images (crio dialect) from PATH and PATH.d/. Default PATH: {CRIO_DEFAULT_PATH}."),
]
# Options every command takes, before or after its name; the one nearer the command wins.
# The settings' own come from pinctl.config.settings (-a and -r: the short names of ctr and crictl).
COMMON_OPTIONS = [*setting_options(KEYS), *SOURCE_OPTIONS]
COMMON_OPTIONS_HEADING = "Common options (before or after the command name)"


def common_options(func: F) -> F:
    for option in reversed(COMMON_OPTIONS):
        func = option(func)
    return func


def output_options(
    formats: Sequence[OutputFormat] = OUTPUT_FORMATS, quiet: bool = True, help_text: str = "Output format."
) -> Callable[[F], F]:
    """-o/--output with the formats a command writes and, with quiet, -q/--quiet for references alone."""

    def decorate(func: F) -> F:
        if quiet:
            func = click.option("-q", "--quiet", is_flag=True, help="Print only references, one per line.")(func)
        return click.option("-o", "--output", "fmt", type=click.Choice(formats), default=FORMAT_TABLE,
                            show_default=True, help=help_text)(func)

    return decorate


def textfile_option(what: str) -> Callable[[F], F]:
    return click.option(
        "--textfile", metavar="PATH", type=click.Path(dir_okay=False),
        help=f"Also write {what} as Prometheus metrics to PATH, for node_exporter's textfile collector (a "
             "*.prom file in its --collector.textfile.directory). Written to a temporary file beside it, then "
             "renamed over it.")


def _own_first(params: list[click.Parameter]) -> list[click.Parameter]:
    # A stable sort: arguments, the command's own options and --help keep their order.
    return sorted(params, key=lambda param: isinstance(param, CommonOption))


def _write_options(command: click.Command, ctx: click.Context, formatter: click.HelpFormatter, common: bool) -> None:
    """The command's own options (and --help), or the common ones, as one section of --help."""
    records = [
        record
        for param in command.get_params(ctx)
        if isinstance(param, click.Option) and isinstance(param, CommonOption) == common
        if (record := param.get_help_record(ctx)) is not None
    ]
    if records:
        with formatter.section(COMMON_OPTIONS_HEADING if common else "Options"):
            formatter.write_dl(records)


class PinctlCommand(click.Command):
    """A command whose --help, man page and completions list its own options before the common ones."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return _own_first(super().get_params(ctx))

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _write_options(self, ctx, formatter, common=False)
        _write_options(self, ctx, formatter, common=True)


class PinctlGroup(click.Group):
    """A group like PinctlCommand; its commands and subgroups are made the same way."""

    command_class = PinctlCommand
    group_class = type  # click: subgroups are of this group's own class

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return _own_first(super().get_params(ctx))

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The commands are what a newcomer looks for here: before the long common options.
        _write_options(self, ctx, formatter, common=False)
        self.format_commands(ctx, formatter)
        _write_options(self, ctx, formatter, common=True)


def _param_chain(ctx: click.Context) -> list[dict[str, Any]]:
    """Parameters of this command, then of each parent: nearest first."""
    chain: list[dict[str, Any]] = []
    current: Optional[click.Context] = ctx
    while current is not None:
        chain.append(current.params)
        current = current.parent
    return chain


def load_config(ctx: click.Context) -> Config:
    from pinctl.config import loader as config

    chain = _param_chain(ctx)

    def pick(name: str) -> Any:
        return next((p[name] for p in chain if p.get(name) not in (None, ())), None)

    def gather(name: str) -> list[Any]:
        return [item for params in reversed(chain) for item in params.get(name) or ()]

    # A key that accumulates takes what was given at every level, outermost first.
    flags = {spec.name: gather(spec.name) if spec.accumulates else pick(spec.name)
             for spec in KEYS.values() if spec.flag}
    return config.load(flags, os.environ, config_path=pick("config_path"), from_crio=pick("from_crio"))


def open_node(cfg: Config) -> Node:
    from pinctl.render import output
    from pinctl.node.sources import open_node as open_all

    return open_all(cfg, output.warn)


def load_policy(cfg: Config) -> Policy:
    from pinctl.pins.policy import compile_policy

    return compile_policy(cfg.patterns)


@click.group(cls=PinctlGroup, context_settings=CONTEXT_SETTINGS, epilog=EXIT_CODES_HELP)
@common_options
@click.version_option(__version__, "--version", prog_name="pinctl")
def cli(**_: Any) -> None:
    """Show and set which container images the kubelet's image GC keeps.

    The kubelet skips an image only when the runtime reports it pinned over the CRI.
    containerd's CRI plugin pins an image when any of its references carries the label
    io.cri-containerd.pinned=pinned. pinctl lists those pins, adds and removes them, and
    keeps them in line with a policy of CRI-O-style patterns (see pinctl config show). It
    shows what the GC will delete next (gc plan) and prunes without touching what must stay.
    """


@cli.command("ls", epilog=EXIT_CODES_HELP)
@click.argument("filters", nargs=-1, metavar="[REF|ID|PATTERN]...")
@click.option("--pinned/--unpinned", "pinned", default=None,
              help="Only images the runtime keeps (--pinned), or only those the GC may delete (--unpinned).")
@click.option("--drift", is_flag=True,
              help="Only where labels and policy disagree: covered by a pattern but not labelled, "
                   "or labelled but covered by no pattern.")
@click.option("--cri", is_flag=True, help="Add CRI PINNED: what the runtime tells the kubelet.")
@output_options()
@common_options
@click.pass_context
def ls_command(ctx: click.Context, filters: Sequence[str], pinned: Optional[bool], drift: bool, cri: bool,
               fmt: OutputFormat, quiet: bool, **_: Any) -> int:
    """List image references, whether each is pinned and why.

    An image is pinned when any of its references (including a sha256:<id> one) carries
    io.cri-containerd.pinned=pinned; every reference of it then shows as pinned, and WHY
    names the one with the label. WHY also lists every policy pattern covering the image
    and where it came from, and labels that look like pins but are not.
    """
    from pinctl.render import output
    from pinctl import commands
    from pinctl.node import sources

    cfg = load_config(ctx)
    query = commands.LsQuery(tuple(filters), pinned, drift, cfg.settings.pattern_dialect)
    node = open_node(cfg)
    if quiet and query.names_only_will_do and not cri:
        output.print_names(commands.ls_names(node))
        return EXIT_OK
    runtime = sources.open_runtime(cfg, output.warn)[0] if cri else None
    result = commands.ls(node, load_policy(cfg), cfg.settings.docker_pinned_image_labels, query, runtime)
    output.print_images(result.rows, result.errors, fmt, quiet, show_drift=drift, show_cri=cri)
    return EXIT_OK


def _change_command(name: str, summary: str) -> Callable[[F], click.Command]:
    def decorate(func: F) -> click.Command:
        func = click.argument("refs", nargs=-1, required=True, metavar="REF|ID|PATTERN...")(func)
        func = click.option("--dry-run", is_flag=True, help="Show the plan; change nothing.")(func)
        func = output_options()(func)
        func = common_options(func)
        return cli.command(name, help=summary, epilog=EXIT_CODES_HELP)(click.pass_context(func))

    return decorate


@_change_command("pin", """Pin images: add io.cri-containerd.pinned=pinned.

REF is normalised like Docker's (alpine means library/alpine:latest on Docker's default registry)
and labels that one reference. sha256:<id> or a unique ID prefix (4+ hex digits, with or without
sha256:) labels every reference of the image; a prefix counts as matching an image when it starts
its ID or the manifest digest of one of its references. A quoted
PATTERN ('registry.example/*', '*word*') labels every reference it matches now. Only that one
label is written. Already pinned references are reported and skipped; one that sync pinned
becomes a hand pin (sync's mark is removed, so sync --prune leaves it). A reference another
client re-points while pinctl writes is left alone, or the write undone, and reported.""")
def pin_command(ctx: click.Context, refs: Sequence[str], dry_run: bool, fmt: OutputFormat, quiet: bool,
                **_: Any) -> int:
    return _run_change(ctx, "pin", refs, dry_run, fmt, quiet)


@_change_command("unpin", """Unpin images: remove io.cri-containerd.pinned.

The label is removed from every reference of each image the arguments name (a REF, an ID or
a quoted PATTERN), since a label left on any of them would keep the image pinned. The mark
pinctl sync leaves beside its pins goes too. Each reference is reported.""")
def unpin_command(ctx: click.Context, refs: Sequence[str], dry_run: bool, fmt: OutputFormat, quiet: bool,
                  **_: Any) -> int:
    return _run_change(ctx, "unpin", refs, dry_run, fmt, quiet)


def _run_change(ctx: click.Context, command: str, args: Sequence[str], dry_run: bool, fmt: OutputFormat,
                quiet: bool) -> int:
    from pinctl import commands

    cfg = load_config(ctx)
    report = commands.change(open_node(cfg), command, args, cfg.settings.pattern_dialect, dry_run)
    return _print_change(report, fmt, quiet)


def _print_change(report: ChangeReport, fmt: OutputFormat, quiet: bool) -> int:
    from pinctl.render import output

    output.print_results(report.command, report.results, report.status, report.dry_run, fmt, quiet)
    return report.exit_code


def pull_options(func: F) -> F:
    """How pull (and sync --pull) pulls: credentials, budget, parallelism, patience."""
    return _pull_option_list(func, kubelet=True)


def _pull_option_list(func: F, kubelet: bool) -> F:
    options = [
        click.option("--registry-config", metavar="PATH", type=click.Path(dir_okay=False),
                     help="Docker's config.json to take registry credentials from (its auths entries); they are "
                          "passed to the runtime with each pull. The runtime's own credentials apply too."),
        click.option("--max-usage", type=Percent(), metavar="PERCENT",
                     help="Pull nothing that would take the image filesystem past this usage. Default: the "
                          "kubelet's high threshold minus 5."),
        click.option("--kubelet-config", metavar="PATH",
                     help="The kubelet's config file to read the image GC high threshold from. Default: "
                          "/var/lib/kubelet/config.yaml when it exists, else the kubelet's defaults.")
        if kubelet else None,
        click.option("--parallel", type=Count(1, 32), default=3, metavar="N",
                     help="Pulls at a time (1 to 32). Default: 3."),
        click.option("--pull-timeout", type=Seconds(1, 86400), default=600.0, metavar="SECONDS",
                     help="Give up on one pull after this long. Default: 600."),
        click.option("--retries", type=Count(0, 10), default=3, metavar="N",
                     help="Tries again after a transient registry error (HTTP 429 or 5xx, unavailable), waiting "
                          "1, 2, 4... seconds (0 to 10). Default: 3."),
        click.option("--always", is_flag=True, help="Pull again even when the image is present (its pin labels "
                                                     "are kept)."),
    ]
    for option in reversed(options):
        func = option(func) if option is not None else func
    return func


def sync_pull_options(func: F) -> F:
    """pull's options, for sync --pull; sync has its own --kubelet-config."""
    return _pull_option_list(func, kubelet=False)


def _pull_request(refs: Sequence[str], pin: bool, options: Mapping[str, Any]) -> Any:
    from pinctl.pull.run import PullRequest, default_max_usage

    max_usage = options["max_usage"]
    if max_usage is None:
        settings = _gc_settings(options["kubelet_config"], None, None, None, None).settings
        max_usage = default_max_usage(settings.high_threshold_percent)
    return PullRequest(tuple(refs), pin, options["always"], options["parallel"], options["pull_timeout"],
                       options["retries"], max_usage)


@cli.command("pull", epilog="Exit codes: 0 every image pulled or present (and pinned), 1 error or every pull "
                            "failed, 2 usage or config error, 3 partial (some failed or skipped for lack of "
                            "room), 130 interrupted.")
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
    from pinctl.render import output, pull as pull_output
    from pinctl import commands
    from pinctl.node import sources

    cfg = load_config(ctx)
    request = _pull_request(refs, pin, options)
    node = open_node(_any_namespaces(cfg))
    with pull_output.pull_progress() as (progress, finished):
        report = commands.pull(node, cfg.settings.namespaces, lambda: sources.open_runtime(cfg, output.warn),
                               request, options["registry_config"], progress, finished)
    pull_output.print_pull(report, fmt)
    return report.exit_code


@cli.command("sync", epilog=EXIT_CODES_HELP)
@click.option("--prune", is_flag=True,
              help="Also unpin references that sync pinned earlier and no pattern covers now.")
@click.option("--allow-empty-policy", is_flag=True,
              help="Let --prune run with no patterns at all (it then removes every pin sync added).")
@click.option("--dry-run", is_flag=True, help="Show the plan; change nothing.")
@click.option("--watch", is_flag=True,
              help="Keep running: sync at start and after every reconnect, then each image as it is created or "
                   "changed. SIGHUP reloads the config; SIGTERM or SIGINT stop it.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="With --watch: one log line per action on stderr, as text or JSON.")
@click.option("--check-interval", type=Seconds(0, 86400), default=60.0, metavar="SECONDS",
              help="With --watch and --metrics-address: read the images, the CRI runtime's pins and the GC model "
                   "this often for the metrics; 0 turns that off. Default: 60.")
@click.option("--kubelet-config", metavar="PATH",
              help="With --metrics-address or --pull: the kubelet's config file to read the image GC thresholds "
                   "from. Default: /var/lib/kubelet/config.yaml when it exists, else the kubelet's defaults.")
@click.option("--pull", "pull_first", is_flag=True,
              help="First pull every exact reference of the policy the node lacks (as pinctl pull does; globs and "
                   "keywords are reported as skipped), then sync.")
@sync_pull_options
@output_options()
@common_options
@click.pass_context
def sync_command(ctx: click.Context, prune: bool, allow_empty_policy: bool, dry_run: bool, watch: bool,
                 log_format: str, check_interval: float, kubelet_config: Optional[str], pull_first: bool,
                 fmt: OutputFormat, quiet: bool, **options: Any) -> int:
    """Label every image the policy covers, once.

    Each reference a pattern matches gets io.cri-containerd.pinned=pinned, plus
    io.pinctl.managed=true to record that sync put it there. --prune removes pins carrying
    that mark when no pattern covers them any more; a pin set by anyone else is never removed.
    """
    from pinctl import commands

    cfg = load_config(ctx)
    policy = load_policy(cfg)
    if watch:
        if pull_first:
            raise UsageError("--watch and --pull do not go together", "run sync --pull once, then sync --watch")
        if dry_run:
            raise UsageError("--watch and --dry-run do not go together", "use sync --dry-run once to see the plan")
        commands.refuse_empty_prune(policy, prune, allow_empty_policy, cfg.files)
        return _watch(ctx, prune, log_format, check_interval, kubelet_config)
    if pull_first:
        return _sync_pull(cfg, policy, prune, allow_empty_policy, dry_run, fmt, quiet,
                          {**options, "kubelet_config": kubelet_config})
    report = commands.sync(open_node(cfg), policy, prune, dry_run, allow_empty_policy, cfg.files)
    return _print_change(report, fmt, quiet)


def _any_namespaces(cfg: Config) -> Config:
    """The node as pull needs it: -n names where images go, and may name a namespace the first
    pull creates, so the node is opened on the namespaces present."""
    import dataclasses

    return dataclasses.replace(cfg, settings=dataclasses.replace(cfg.settings, namespaces=()))


def _sync_pull(cfg: Config, policy: Policy, prune: bool, allow_empty_policy: bool, dry_run: bool,
               fmt: OutputFormat, quiet: bool, options: Mapping[str, Any]) -> int:
    from pinctl.render import output, pull as pull_output
    from pinctl import commands
    from pinctl.node import sources

    if dry_run:
        raise UsageError("--pull and --dry-run do not go together", "use sync --dry-run to see the label plan")
    request = _pull_request((), False, options)
    with pull_output.pull_progress() as (progress, finished):
        report = commands.sync_pull(open_node(_any_namespaces(cfg)), lambda: open_node(cfg), policy,
                                    cfg.settings.namespaces,
                                    lambda: sources.open_runtime(cfg, output.warn), request,
                                    options["registry_config"], prune, allow_empty_policy, cfg.files, progress,
                                    finished)
    pull_output.print_sync_pull(report, fmt, quiet)
    return report.exit_code


def _watch(ctx: click.Context, prune: bool, log_format: str, check_interval: float,
           kubelet_config: Optional[str]) -> int:
    from pinctl.node import sources
    from pinctl.render.log import Log
    from pinctl.watch import watcher as watch

    log = Log(log_format)

    def load() -> watch.WatchSetup:
        cfg = load_config(ctx)
        return watch.WatchSetup(
            lambda: open_node(cfg), load_policy(cfg), cfg.settings.containerd_address,
            cfg.settings.docker_pinned_image_labels,
            lambda: sources.open_runtime(cfg, lambda note: log("info", note)),
            lambda: _gc_settings(kubelet_config, None, None, None, None))

    watcher = watch.Watcher(load, log, prune)
    if kubelet_config:
        _gc_settings(kubelet_config, None, None, None, None)  # a file named but unreadable is exit 2, now
    from pinctl.metrics import serve

    cfg = load_config(ctx)
    with serve.watcher_metrics(cfg.settings.metrics_address, cfg.sources.get("metrics_address", ""), watcher, log,
                                check_interval):
        watcher.install_signal_handlers()
        return watcher.run()


@cli.command("check", epilog="Exit codes: 0 pinctl and the runtime agree, 1 they differ (or an error), "
                               "2 usage or config error.")
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
    from pinctl.render import output
    from pinctl import commands
    from pinctl.node import sources

    cfg = load_config(ctx)
    policy = load_policy(cfg)
    if textfile:
        _check_textfile(textfile, refs)
    runtime, version = sources.open_runtime(cfg, output.warn)
    node = open_node(cfg)
    rules = cfg.settings.docker_pinned_image_labels
    with output.check_progress(active=wait > 0) as progress:
        report = commands.check(node, policy, rules, runtime, version, refs, wait, progress)
    output.print_check(report.result, fmt, waited=report.waited)
    if textfile:
        from pinctl.metrics import exposition as metrics

        metrics.write_textfile(textfile, metrics.check_textfile(report.rows, report.namespaces, report.result))
    return report.exit_code


def _check_textfile(path: str, refs: Sequence[str] = ()) -> None:
    from pinctl.metrics import exposition as metrics

    if refs:
        raise UsageError("--textfile counts the whole node: give no REF with it",
                         "run check REF... and check --textfile PATH separately")
    metrics.check_textfile_target(path)


@cli.command("cri-proxy", epilog="Exit codes: 0 stopped by SIGTERM or SIGINT, 1 error, 2 usage or config error "
                                   "(no --runtime-endpoint, --listen or --metrics-address in use).")
@click.option("--listen", metavar="SOCKET", required=True, type=click.Path(dir_okay=False),
              help="Serve the CRI on this unix socket (mode 0660), e.g. /run/pinctl/cri-proxy.sock; point the "
                   "kubelet's --container-runtime-endpoint at it. A stale socket there is replaced.")
@click.option("--relay", metavar="auto|python|PATH", default="auto", show_default=True,
              help="What forwards the calls: pinctl-cri-relay, the compiled relay (auto: when installed, beside "
                   "pinctl or on PATH), or Python's gRPC (python: adds about 1 ms to a ListImages of 1,000 images "
                   "and waits for each pin read).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="One log line per event on stderr, as text or JSON.")
@common_options
@click.pass_context
def cri_proxy_command(ctx: click.Context, listen: str, relay: str, log_format: str, **_: Any) -> int:
    """Serve the CRI to the kubelet, forwarding every call to the runtime (--runtime-endpoint).

    Requests, answers, metadata, deadlines and status codes pass through unchanged, except
    that ListImages and ImageStatus report pinned: true for every image pinctl wants kept (the
    pin label in the namespace the runtime reads, a policy pattern, a Docker config label, the
    sandbox image), so runtimes that ignore the label keep them too. Nothing is ever unpinned.
    The pins are read again at most every 2 seconds, when an image call comes; if they cannot
    be read, answers pass through unchanged. SIGHUP reloads the config; SIGTERM stops it.
    --metrics-address serves Prometheus metrics, /healthz and /readyz (ready while the pins
    can be read).
    """
    from pinctl.backends.cri import socket_path
    from pinctl.criproxy import proxy as criproxy, relay as crirelay, stats as proxystats
    from pinctl.watch import watcher as watch

    relay_binary = crirelay.find_relay(relay)
    cfg = load_config(ctx)
    load_policy(cfg)  # a bad policy is exit 2 now, not a logged failure later
    endpoint = cfg.settings.runtime_endpoint
    if endpoint is None:
        raise UsageError("cri-proxy needs the runtime to forward to",
                         "give --runtime-endpoint unix:///run/containerd/containerd.sock (or the runtime's socket)")
    from pinctl.render.log import Log

    log = Log(log_format)

    def load() -> criproxy.ProxySetup:
        fresh = load_config(ctx)
        return criproxy.ProxySetup(lambda: open_node(fresh), load_policy(fresh),
                                   fresh.settings.docker_pinned_image_labels)

    proxy = criproxy.Proxy(listen, socket_path(endpoint), load, log, relay=relay_binary)
    from pinctl.metrics import serve

    with serve.proxy_metrics(cfg.settings.metrics_address, cfg.sources.get("metrics_address", ""), proxy, log):
        return proxy.run()


@cli.command("namespaces", epilog=EXIT_CODES_HELP)
@click.option("-q", "--quiet", is_flag=True, help="Names only (what shell completion reads).")
@common_options
@click.pass_context
def namespaces_command(ctx: click.Context, quiet: bool, **_: Any) -> int:
    """List containerd's namespaces; those pinctl reads by default are marked."""
    from pinctl.render import output
    from pinctl import commands

    found = commands.namespaces(open_node(load_config(ctx)))
    output.print_namespaces(found, quiet)
    return EXIT_OK


def kubelet_options(func: F) -> F:
    """Where the kubelet's image GC settings come from: its config file, else flags, else its defaults."""
    percent = Percent(whole=True)
    options = [
        click.option("--kubelet-config", metavar="PATH",
                     help="The kubelet's config file (YAML) to read the GC settings from. "
                          "Default: /var/lib/kubelet/config.yaml when it exists, else the kubelet's defaults."),
        click.option("--high-threshold", type=percent, metavar="PERCENT",
                     help="imageGCHighThresholdPercent: usage at which the GC starts (kubelet default 85)."),
        click.option("--low-threshold", type=percent, metavar="PERCENT",
                     help="imageGCLowThresholdPercent: usage the GC frees down to (kubelet default 80)."),
        click.option("--min-age", type=Duration(), metavar="DURATION",
                     help="imageMinimumGCAge: younger images are never deleted (kubelet default 2m)."),
        click.option("--max-age", type=Duration(), metavar="DURATION",
                     help="imageMaximumGCAge: images unused this long are deleted at any usage (kubelet default "
                          "0, off)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _gc_settings(kubelet_config: Optional[str], high: Optional[int], low: Optional[int], min_age: Any,
                 max_age: Any) -> Any:
    from pinctl.gc.kubelet import GcOverrides, read_gc_settings

    return read_gc_settings(kubelet_config, GcOverrides(high, low, min_age, max_age))


@cli.group("gc", cls=PinctlGroup, context_settings=CONTEXT_SETTINGS)
def gc_group() -> None:
    """What the kubelet's image garbage collector will do on this node."""


@gc_group.command("plan", epilog="Exit codes: 0 nothing pinctl wants kept would be deleted, 1 something would "
                                 "(or an error), 2 usage or config error.")
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
    policy want kept but the runtime does not pin (it ignores labels, wrong namespace, a pattern
    known only to pinctl) are marked at risk with their place in the order.
    """
    from pinctl.render import gc as gc_output, output
    from pinctl import commands
    from pinctl.node import sources

    cfg = load_config(ctx)
    settings = _gc_settings(kubelet_config, high_threshold, low_threshold, min_age, max_age)
    if textfile:
        if usage is not None:
            raise UsageError("--usage simulates a disk: its figures do not belong in a textfile",
                             "give --usage or --textfile, not both")
        _check_textfile(textfile)
    runtime, version = sources.open_runtime(cfg, output.warn)
    rules = list(cfg.settings.docker_pinned_image_labels)
    report = commands.gc_plan(open_node(cfg), load_policy(cfg), rules, runtime, version, settings, usage)
    gc_output.print_gc_plan(report, fmt)
    if textfile:
        from pinctl.metrics import exposition as metrics

        metrics.write_textfile(textfile, metrics.gc_textfile(report))
    return report.exit_code


@cli.command("prune", epilog="Exit codes: 0 done, 1 error or the plan not confirmed, 2 usage or config error "
                             "(or no --yes without a terminal), 3 some deletions failed.")
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
def prune_command(ctx: click.Context, until_usage: Optional[float], all_unused: bool, older_than: Any, dry_run: bool,
                  yes: bool, kubelet_config: Optional[str], high_threshold: Optional[int],
                  low_threshold: Optional[int], min_age: Any, max_age: Any, fmt: OutputFormat, **_: Any) -> int:
    """Delete unused images the way the kubelet's GC would, but never one that must stay.

    Never deleted: an image any container uses (any state) or names, one the runtime pins, one
    pinctl's labels or policy pin (also where the runtime ignores them), the sandbox image, one
    younger than the minimum age. The plan is shown first and confirmed on a terminal; scripts
    pass --yes. Each image is checked again just before its deletion. Images go through the
    runtime that owns them: the CRI's RemoveImage, or Docker's API for Docker's images.
    """
    from pinctl.render import gc as gc_output, output
    from pinctl import commands
    from pinctl.gc import plan as gc
    from pinctl.node import sources

    cfg = load_config(ctx)
    settings = _gc_settings(kubelet_config, high_threshold, low_threshold, min_age, max_age).settings
    request = gc.PruneRequest(until_usage, all_unused, older_than)
    rules = list(cfg.settings.docker_pinned_image_labels)
    with gc_output.prune_progress() as progress:
        report = commands.prune(open_node(cfg), load_policy(cfg), rules, cfg.settings.namespaces,
                                lambda: sources.open_runtime(cfg, output.warn), settings, request, dry_run,
                                lambda plans: _confirm_prune(plans, yes), progress)
    gc_output.print_prune(report.items, dry_run, fmt)
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



@cli.command("completion", epilog="Exit codes: 0 ok, 2 unknown shell.")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]), metavar="SHELL")
def completion_command(shell: str) -> int:
    """Print the completion script for SHELL.

    The script is static: completing commands and options starts no Python. Only image
    references and namespaces are asked of pinctl itself (pinctl ls -q, pinctl namespaces -q).
    """
    from pinctl import completion

    click.echo(completion.render(shell, cli), nl=False)
    return EXIT_OK


@cli.group("config", context_settings=CONTEXT_SETTINGS)
def config_group() -> None:
    """Show and check pinctl's configuration and pin policy."""


@config_group.command("show", epilog=EXIT_CODES_HELP)
@output_options([FORMAT_TABLE, FORMAT_JSON], quiet=False)
@common_options
@click.pass_context
def config_show(ctx: click.Context, fmt: OutputFormat, **_: Any) -> int:
    """Show the effective configuration and where each value came from.

    Sources, lowest to highest: defaults, the config file, its drop-ins (config.d/*.toml in
    lexical order), the environment, flags. pinned_images collects patterns from all of them.
    """
    from pinctl.render import output

    output.print_config(load_config(ctx), fmt)
    return EXIT_OK


@config_group.command("lint", epilog="Exit codes: 0 no problems, 1 problems found, 2 the config cannot be read.")
@click.option("--offline", is_flag=True, help="Only check the patterns themselves; do not ask containerd.")
@output_options([FORMAT_TABLE, FORMAT_JSON], quiet=False)
@common_options
@click.pass_context
def config_lint(ctx: click.Context, offline: bool, fmt: OutputFormat, **_: Any) -> int:
    """Check the pin policy: one line per problem.

    Invalid patterns; patterns that match no image present; patterns shadowed by a broader
    one; globs that CRI-O would match differently (CRI-O does not anchor them).
    """
    from pinctl.render import output
    from pinctl import commands

    cfg = load_config(ctx)
    report = commands.lint(cfg.patterns, None if offline else lambda: open_node(cfg))
    output.print_problems(report.problems, fmt)
    return report.exit_code


@config_group.command("export", epilog=EXIT_CODES_HELP)
@click.option("--for", "target", type=click.Choice(["crio", "containerd", "cri-dockerd"]), required=True,
              help="The runtime whose configuration to write.")
@click.option("--offline", is_flag=True,
              help="Do not ask the engines; patterns a runtime cannot express are then left out.")
@common_options
@click.pass_context
def config_export(ctx: click.Context, target: str, offline: bool, **_: Any) -> int:
    """Write the pin policy as a runtime's own configuration, on stdout.

    crio: a crio.conf.d drop-in with [crio.image] pinned_images. containerd: a containerd 2.x
    pinned_images table (exact references). cri-dockerd: --pinned-images and
    --pinned-image-labels flags. Patterns a runtime cannot express are expanded to the images
    present now, and each such compromise is said on stderr.
    """
    from pinctl.render import output
    from pinctl import commands

    cfg = load_config(ctx)
    node = None if offline else open_node(cfg)
    result = commands.export(target, load_policy(cfg), cfg.settings.docker_pinned_image_labels, node)
    click.echo(result.text, nl=False)
    for note in result.notes:
        output.warn(note)
    return EXIT_OK


def main(argv: Optional[Sequence[str]] = None) -> None:
    from pinctl import streams

    streams.install()
    sys.exit(run(argv))


def run(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI and turn every failure into one line on stderr and a documented exit code."""
    try:
        return _run(argv)
    except OutputClosed as err:  # from a command or from a handler's own message
        return _output_failed(err, quiet=True)
    except OutputError as err:
        return _output_failed(err, quiet=False)


def _run(argv: Optional[Sequence[str]]) -> int:
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="pinctl", standalone_mode=False)
        sys.stdout.flush()  # here, not at exit: a write error must still reach the handlers below
        return code if isinstance(code, int) else EXIT_OK
    except NO_ARGS_IS_HELP as err:
        # A group named without its subcommand: show what it offers, as git does.
        click.echo(err.ctx.get_help() if err.ctx else err.format_message(), err=True)
        return EXIT_USAGE
    except click.UsageError as err:
        return _usage_error(err, err.ctx)
    except click.exceptions.Abort:
        return 130
    except (OutputClosed, OutputError):
        raise
    except PinctlError as err:
        click.echo(f"pinctl: {_visible(str(err))}", err=True)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _discard(sys.stdout)  # stdout without pinctl's guard (run() called in-process)
        return EXIT_PIPE
    except Exception as err:  # noqa: BLE001 - the last net: one line, not a traceback
        if os.environ.get("PINCTL_DEBUG"):
            raise
        click.echo(f"pinctl: internal error: {type(err).__name__}: {err} (rerun with PINCTL_DEBUG=1 and report it)",
                   err=True)
        return EXIT_ERROR


def _usage_error(err: click.UsageError, ctx: Optional[click.Context]) -> int:
    where = ctx.command_path if ctx else "pinctl"
    click.echo(f"pinctl: {_visible(err.format_message())} (see '{where} --help')", err=True)
    return EXIT_USAGE


def _visible(message: str) -> str:
    from pinctl.display import visible

    return visible(message)


def _output_failed(err: OutputClosed | OutputError, quiet: bool) -> int:
    """A closed pipe ends quietly; a failed write says so once, on the other stream when it can."""
    from pinctl import streams

    streams.discard(err.fd)  # what is still buffered for it goes nowhere, and the exit stays quiet
    if not quiet and err.fd != 2:
        try:
            click.echo(f"pinctl: {err}", err=True)
        except (OutputClosed, OutputError, OSError):
            pass
    return err.exit_code


def _discard(stream: TextIO) -> None:
    from pinctl import streams

    try:
        streams.discard(stream.fileno())
    except (OSError, ValueError):
        pass

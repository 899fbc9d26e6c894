"""The options commands share: the settings' own (one per config key), where the settings come
from, output, textfiles, the kubelet's GC settings and pull's; and the value types they take."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Optional, Sequence, TypeVar

import click

from pinctl.config.loader import CONFIG_ENV, CRIO_DEFAULT_PATH, DEFAULT_PATH
from pinctl.config.settings import KEYS, KeySpec, default_sentence
from pinctl.model import FORMAT_TABLE, OUTPUT_FORMATS, OutputFormat

F = TypeVar("F", bound=Callable[..., Any])


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

    env_name and default_text are for docs/configuration.md's table of them: the variable that sets the same
    thing, and what holds when neither is given (`code` in backquotes).
    """

    def __init__(self, param_decls: Optional[Sequence[str]] = None, env_name: Optional[str] = None,
                 default_text: str = "", **attrs: Any) -> None:
        super().__init__(param_decls, **attrs)
        self.env_name = env_name
        self.default_text = default_text


class BorrowedOption(click.Option):
    """An option a command takes as another command does (sync --pull takes pull's): its --help
    names it and points to that command's --help; man pages and completions list it in full."""

    def __init__(self, param_decls: Optional[Sequence[str]] = None, lender: str = "", **attrs: Any) -> None:
        super().__init__(param_decls, **attrs)
        self.lender = lender


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
    _common("--config", "config_path", metavar="PATH", type=click.Path(), env_name=CONFIG_ENV,
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
        help=f"Also write {what} to PATH as Prometheus metrics for node_exporter's textfile collector (a *.prom "
             "file in its directory), written beside it and renamed over it.")


def kubelet_options(func: F) -> F:
    """Where the kubelet's image GC settings come from: its config file, else flags, else its defaults."""
    percent = Percent(whole=True)
    options = [
        click.option("--kubelet-config", metavar="PATH",
                     help="The kubelet's config file, for its GC settings. Default: /var/lib/kubelet/config.yaml "
                          "when it exists."),
        click.option("--high-threshold", type=percent, metavar="PERCENT",
                     help="imageGCHighThresholdPercent: usage at which the GC starts (kubelet default 85)."),
        click.option("--low-threshold", type=percent, metavar="PERCENT",
                     help="imageGCLowThresholdPercent: usage the GC frees down to (kubelet default 80)."),
        click.option("--min-age", type=Duration(), metavar="DURATION",
                     help="imageMinimumGCAge: younger images are never deleted (kubelet default 2m)."),
        click.option("--max-age", type=Duration(), metavar="DURATION",
                     help="imageMaximumGCAge: images unused this long go at any usage (kubelet default 0: off)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def pull_options(func: F) -> F:
    """How pull (and sync --pull) pulls: credentials, budget, parallelism, patience."""
    return _pull_option_list(func, kubelet=True)


def _pull_option_list(func: F, kubelet: bool) -> F:
    # sync --pull borrows them: its --help points to pull's for what they do.
    borrowed = {} if kubelet else {"cls": BorrowedOption, "lender": "pull"}
    options = [
        _option("--registry-config", borrowed=borrowed, metavar="PATH", type=click.Path(dir_okay=False),
                     help="Docker's config.json whose auths are passed with each pull, beside the runtime's own "
                          "credentials."),
        _option("--max-usage", borrowed=borrowed, type=Percent(), metavar="PERCENT",
                     help="Pull nothing that would take the image filesystem past this usage. Default: the "
                          "kubelet's high threshold minus 5."),
        click.option("--kubelet-config", metavar="PATH",
                     help="The kubelet's config file, for its GC high threshold. Default: "
                          "/var/lib/kubelet/config.yaml when it exists.")
        if kubelet else None,
        _option("--parallel", borrowed=borrowed, type=Count(1, 32), default=3, metavar="N",
                     help="Pulls at a time (1 to 32). Default: 3."),
        _option("--pull-timeout", borrowed=borrowed, type=Seconds(1, 86400), default=600.0, metavar="SECONDS",
                     help="Give up on one pull after this long. Default: 600."),
        _option("--retries", borrowed=borrowed, type=Count(0, 10), default=3, metavar="N",
                     help="Retries HTTP 429, 5xx or unavailable, after 1, 2, 4... s, jittered (0 to 10). "
                          "Default: 3."),
        _option("--always", borrowed=borrowed, is_flag=True, help="Pull again even when the image is present (its pin labels "
                                                     "are kept)."),
    ]
    for option in reversed(options):
        func = option(func) if option is not None else func
    return func


def _option(*names: str, borrowed: Mapping[str, Any], **attrs: Any) -> Callable[[F], F]:
    return click.option(*names, **borrowed, **attrs)


def sync_pull_options(func: F) -> F:
    """pull's options, for sync --pull; sync has its own --kubelet-config."""
    return _pull_option_list(func, kubelet=False)

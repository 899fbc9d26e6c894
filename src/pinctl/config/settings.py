"""pinctl's settings, each declared once: the attributes of Settings.

An attribute's annotation is its type, its setting(...) its default and everything else the
key table (KEYS) says of it: the environment variable, the flag and its short name, the metavar,
the help, how the default is described. The loader (pinctl.config.loader), the common click options
(pinctl.cli), config show, pinctl.conf(5) and docs/configuration.md's tables all read KEYS; adding a setting is
one attribute here, then `make generate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Literal, Mapping, Optional, TypeVar, get_args, get_origin, get_type_hints

# A day at most: a far larger deadline overflows gRPC's and fails every call (the backends cap
# their own longest wait with it too).
LONGEST_TIMEOUT = 86400.0

Dialect = Literal["pinctl", "crio"]
# How a value is checked and documented; read from each attribute's annotation (see _key_type).
KeyType = Literal["list", "str", "optional-str", "number", "choice"]
PATTERNS_KEY = "pinned_images"
DEFAULT_SOURCE = "default"

T = TypeVar("T")
_DECLARED = "pinctl.setting"


def setting(
    default: T,
    *,
    help: str,
    example: object,
    env: Optional[str] = None,
    flag: Optional[str] = None,
    short: Optional[str] = None,
    metavar: Optional[str] = None,
    flag_help: str = "",
    default_text: Optional[str] = None,
    env_split: bool = False,
    item_check: Optional[Callable[[str], bool]] = None,
    item_form: str = "",
    bounds: Optional[tuple[float, float]] = None,
) -> T:
    """An attribute of Settings: its default, and what KeySpec says of it beyond its name and type."""
    declared = {"help": help, "example": example, "env": env, "flag": flag, "short": short, "metavar": metavar,
                "flag_help": flag_help, "default_text": default_text, "env_split": env_split,
                "item_check": item_check, "item_form": item_form, "bounds": bounds}
    found: T = field(default=default, metadata={_DECLARED: declared})
    return found


def _is_label(item: str) -> bool:
    return not item.startswith("=")


@dataclass(frozen=True)
class Settings:
    """Every setting, typed, as loaded: the defaults here, then files, environment and flags.

    The order here is the order everywhere: of the options in --help, of the keys in
    pinctl.conf(5) and in docs/configuration.md.

    pinned_images holds the pattern texts of pinctl's own sources; the policy itself, with where
    each pattern came from and CRI-O's patterns, is Config.patterns.
    """

    namespaces: tuple[str, ...] = setting(
        (), help="containerd namespaces to work in; empty means the command's defaults.", example=("k8s.io",),
        env="CONTAINERD_NAMESPACE", flag="--namespace", short="-n", metavar="NS",
        flag_help="containerd namespace, repeatable; 'all' for every one.",
        default_text="`k8s.io` and `moby` where they exist")
    containerd_address: str = setting(
        "/run/containerd/containerd.sock", help="containerd's socket.", example="/run/containerd/containerd.sock",
        env="CONTAINERD_ADDRESS", flag="--address", short="-a", metavar="SOCKET", flag_help="containerd socket.")
    timeout: float = setting(
        2.0, help="Seconds to wait for each answer from the engine.", example=5.0, flag="--timeout", metavar="SECONDS",
        flag_help="Seconds to wait for each answer from the engine.", bounds=(0.05, LONGEST_TIMEOUT))
    containerd_config: Optional[str] = setting(
        None, help="containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from.", example="/etc/containerd/config.toml",
        env="PINCTL_CONTAINERD_CONFIG", flag="--containerd-config", metavar="PATH",
        default_text="`/etc/containerd/config.toml` when readable")
    crio_config: Optional[str] = setting(
        None, help="CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d).",
        example="/etc/crio/crio.conf", env="PINCTL_CRIO_CONFIG", flag="--crio-config", metavar="PATH",
        default_text="what the crio process behind the CRI socket runs with (`/etc/crio/crio.conf`)")
    kubelet_root_dir: str = setting(
        "/var/lib/kubelet", help="The kubelet's --root-dir, where check reads its image pull records "
                                 "(image_manager/pulled and pulling).",
        example="/var/lib/kubelet", env="PINCTL_KUBELET_ROOT_DIR", flag="--kubelet-root-dir", metavar="DIR",
        flag_help="The kubelet's --root-dir: check reads its image pull records there.")
    docker_host: Optional[str] = setting(
        None, help="Docker daemon to talk to, as in DOCKER_HOST.", example="unix:///run/docker.sock",
        env="DOCKER_HOST", flag="--docker-host", metavar="HOST", flag_help="Docker daemon, as in DOCKER_HOST.",
        default_text="`unix:///var/run/docker.sock` when it answers")
    docker_containerd_address: Optional[str] = setting(
        None, help="containerd socket of Docker's containerd image store (namespace moby); "
                   "unset: containerd_address, else Docker's own /run/docker/containerd/containerd.sock.",
        example="/run/docker/containerd/containerd.sock",
        default_text="`containerd_address`, else `/run/docker/containerd/containerd.sock`")
    runtime_endpoint: Optional[str] = setting(
        None, help="CRI runtime endpoint to talk to.", example="unix:///run/containerd/containerd.sock",
        env="CONTAINER_RUNTIME_ENDPOINT", flag="--runtime-endpoint", short="-r", metavar="ENDPOINT",
        flag_help="CRI runtime socket (ls --cri, check).", default_text="the first usual socket that answers")
    pinned_images: tuple[str, ...] = setting(
        (), help="Patterns of images to keep pinned; every source adds to them.", example=("registry.example/team/*",),
        env="PINCTL_PINNED_IMAGES", flag="--pinned-image", metavar="PATTERN", env_split=True,
        flag_help="Add a pinned-image pattern (exact, glob 'repo/*' or keyword '*word*'); repeatable.")
    pattern_dialect: Dialect = setting(
        "pinctl", help="How pinned_images patterns are read: pinctl's or CRI-O's.", example="crio",
        env="PINCTL_PATTERN_DIALECT", flag="--pattern-dialect",
        flag_help="How patterns match: pinctl (strict) or crio (exactly as CRI-O).")
    docker_pinned_image_labels: tuple[str, ...] = setting(
        (), help='Docker labels ("key=value" or "key") that pin an image.', example=("team.example/keep=true",),
        item_check=_is_label, item_form='"key=value" or "key"')
    import_dirs: tuple[str, ...] = setting(
        (), help="Directories of image archives (docker save, OCI layout) that sync imports and pins, each pin "
                 "owned by its archive: sync --prune unpins what an archive no longer gives.",
        example=("/var/lib/pinctl/images",), env="PINCTL_IMPORT_DIRS", env_split=True, flag="--import-dir",
        metavar="DIR", flag_help="A directory of image archives for sync to import and pin (repeatable).",
        default_text="none")
    history_dir: str = setting(
        "/var/lib/pinctl/history", help="Directory of the deletion journal: sync --watch and cri-proxy write it, "
                                        "history reads it.",
        example="/var/lib/pinctl/history", env="PINCTL_HISTORY_DIR", flag="--history-dir", metavar="DIR",
        flag_help="Directory of the deletion journal (sync --watch, cri-proxy, history).")
    kubelet_log: Optional[str] = setting(
        None, help="The kubelet's log file: with no cri-proxy serving, sync --watch names the kubelet as an "
                   "image's deleter when its last 8 MiB say it removed that image ID just before.",
        example="/var/log/kubelet.log", env="PINCTL_KUBELET_LOG", flag="--kubelet-log", metavar="PATH",
        flag_help="The kubelet's log file, read to tell its image GC's deletions (sync --watch).",
        default_text="not read")
    metrics_address: Optional[str] = setting(
        None, help="HOST:PORT where sync --watch or cri-proxy serves /metrics, /healthz and /readyz; unset: not "
                   "served.",
        example="127.0.0.1:9736", env="PINCTL_METRICS_ADDRESS", flag="--metrics-address", metavar="HOST:PORT",
        flag_help="Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST is "
                  "every interface (sync --watch, cri-proxy).",
        default_text="not served")


# -- the key table -----------------------------------------------------------------------


@dataclass(frozen=True)
class KeySpec:
    """One configuration key: what it holds, where else it can be set and how it is documented.

    type is "list" (of strings), "str", "optional-str" (unset is None), "number" (seconds: a
    float > 0, and within bounds (low, high) when given) or "choice" (one of choices).
    env_split says how a list key reads its environment variable: comma-separated items, or one
    item. item_check, when given, accepts a list's items and item_form says what it wants.
    example is a valid value, shown in hints and documentation. flag_help is the option's help
    (help when empty) before the generated "Default: ..." sentence; default_text describes the
    default where the value alone would not (`code` in backquotes, dropped in plain text).
    """

    name: str
    type: KeyType
    default: object
    help: str
    example: object
    env: Optional[str] = None
    flag: Optional[str] = None
    short: Optional[str] = None
    metavar: Optional[str] = None
    flag_help: str = ""
    default_text: Optional[str] = None
    choices: tuple[str, ...] = ()
    env_split: bool = False
    item_check: Optional[Callable[[str], bool]] = None
    item_form: str = ""
    bounds: Optional[tuple[float, float]] = None

    @property
    def type_label(self) -> str:
        """The type as the documentation states it."""
        if self.type == "choice":
            return "one of " + ", ".join(f'"{c}"' for c in self.choices)
        if self.bounds:
            return f"number from {self.bounds[0]:g} to {self.bounds[1]:g}"
        return _TYPE_LABELS[self.type]

    @property
    def accumulates(self) -> bool:
        """Every source adds to this key instead of replacing it."""
        return self.name == PATTERNS_KEY

    @property
    def flag_names(self) -> tuple[str, ...]:
        """The option's names, short first: ("-n", "--namespace"); none without a flag."""
        return tuple(name for name in (self.short, self.flag) if name)

    @property
    def default_markdown(self) -> str:
        """The default as docs/configuration.md states it."""
        if self.default_text is not None:
            return self.default_text
        if self.default is None:
            return "unset"
        if isinstance(self.default, tuple):
            return "`[" + ", ".join(f'"{item}"' for item in self.default) + "]`"
        return f"`{_plain(self.default)}`"

    @property
    def option_help(self) -> str:
        """The help of the flag: its own words, the range when bounded, then where else it is set."""
        text = self.flag_help or self.help
        if self.bounds:
            text = f"{text.rstrip('.')} ({self.bounds[0]:g} to {self.bounds[1]:g})."
        if self.accumulates:
            places = " and ".join([f"${self.env}"] * bool(self.env) + [f"config '{self.name}'"])
            return f"{text} Adds to {places}."
        default = plain_text(self.default_text) if self.default_text is not None else _plain(self.default)
        return f"{text} {default_sentence(self.env, self.name, default)}"


_TYPE_LABELS: dict[str, str] = {
    "list": "list of strings",
    "str": "string",
    "optional-str": "string (optional)",
    "number": "number > 0",
}


def default_sentence(env: Optional[str], key: Optional[str], default: str) -> str:
    """ "Default: $ENV, config 'key', else X." for an option's help."""
    places = [f"${env}"] * bool(env) + [f"config '{key}'"] * bool(key)
    return f"Default: {', '.join([*places, f'else {default}'])}." if places else f"Default: {default}."


def plain_text(markdown: str) -> str:
    """The docs' words for help and man pages: backquotes dropped."""
    return markdown.replace("`", "")


def _plain(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, tuple):
        return ", ".join(value) or "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def key_table(settings: type) -> dict[str, KeySpec]:
    """The KeySpec of every attribute of a Settings class, in the order they are declared."""
    hints = get_type_hints(settings)
    table: dict[str, KeySpec] = {}
    for attribute in fields(settings):
        key_type, choices = _key_type(attribute.name, hints[attribute.name])
        declared: Mapping[str, Any] = attribute.metadata[_DECLARED]
        table[attribute.name] = KeySpec(name=attribute.name, type=key_type, default=attribute.default,
                                        choices=choices, **declared)
    return table


def _key_type(name: str, annotation: Any) -> tuple[KeyType, tuple[str, ...]]:
    """The key type an annotation stands for, and a choice's choices."""
    if get_origin(annotation) is Literal:
        return "choice", tuple(str(choice) for choice in get_args(annotation))
    if get_origin(annotation) is tuple and get_args(annotation) == (str, Ellipsis):
        return "list", ()
    simple: dict[Any, KeyType] = {str: "str", Optional[str]: "optional-str", float: "number"}
    if annotation in simple:
        return simple[annotation], ()
    # A new kind of value needs a check in config._CHECKS and words in the documentation first.
    raise TypeError(f"setting {name}: no key type for {annotation!r}; use tuple[str, ...], str, Optional[str], "
                    f"float or a Literal of strings")


KEYS: dict[str, KeySpec] = key_table(Settings)
DIALECTS: tuple[str, ...] = get_args(Dialect)

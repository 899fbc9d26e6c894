"""pinctl's configuration: defaults, a TOML file with drop-ins, the environment and flags.

Sources, lowest precedence first::

    defaults < main file < drop-ins < environment < flags

The main file is the path given by the caller (``--config``), else ``$PINCTL_CONFIG``, else
``/etc/pinctl/config.toml``. A missing default file is fine; a missing file that was named
is an error. Drop-ins are the ``*.toml`` files of ``config.d`` beside the main file, applied
in lexical order of file name (as CRI-O does with ``crio.conf.d``); they are read even when
the default main file is absent. The file is flat: top-level keys only, no tables.

For every key but one, the highest source that sets it wins with its whole value: a later
drop-in replaces a list set by an earlier one.

``pinned_images`` is the exception: it ACCUMULATES. Each pattern from the main file, every
drop-in, ``$PINCTL_PINNED_IMAGES`` and ``--pinned-image`` is kept, in that order, with the
place it came from. A pattern decides whether an image survives garbage collection, so one
team's drop-in must not silently erase the patterns of another.

When running as root, a config file, drop-in or ``config.d`` that anyone but root could
change is refused, for the same reason; so is one in a directory, or below a directory, that
anyone but root could change (as sshd's StrictModes): whoever can rename ``config.d`` away
can unpin what it holds. A sticky directory owned by root (such as /tmp) is safe for root's
own entries, which nobody else can rename or remove there. A drop-in that cannot be read is
an error, never an absence, and only regular files are read: a FIFO would block forever.

CRI-O's own ``pinned_images`` (``[crio.image]`` in ``crio.conf`` and ``crio.conf.d``) can be
read too; there drop-ins replace the key, as in CRI-O itself.
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Mapping, Optional, Sequence

from pinctl.errors import ConfigError

DEFAULT_PATH = "/etc/pinctl/config.toml"
CRIO_DEFAULT_PATH = "/etc/crio/crio.conf"
CONFIG_ENV = "PINCTL_CONFIG"
DROPIN_DIR = "config.d"
PATTERNS_KEY = "pinned_images"
PATTERNS_FLAG_SOURCE = "flag --pinned-image"
DIALECTS = ("pinctl", "crio")


# -- the key table -----------------------------------------------------------------------

KeyType = Literal["list", "str", "optional-str", "number", "choice"]


@dataclass(frozen=True)
class KeySpec:
    """One configuration key: what it holds and where else it can be set.

    type is one of "list" (of strings), "str", "optional-str" (unset is None), "number"
    (a float > 0, and within bounds (low, high) when given) and "choice" (one of choices).
    env_split says how a list key reads its environment variable: comma-separated items, or
    one item. item_check, when given, accepts a list's items and item_form says what it wants.
    example is a valid value, shown in hints and documentation.
    """

    name: str
    type: KeyType
    default: Any
    help: str
    example: Any
    env: Optional[str] = None
    flag: Optional[str] = None
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


_TYPE_LABELS: dict[str, str] = {
    "list": "list of strings",
    "str": "string",
    "optional-str": "string (optional)",
    "number": "number > 0",
}


def _is_label(item: str) -> bool:
    return not item.startswith("=")


KEYS: dict[str, KeySpec] = {
    spec.name: spec
    for spec in (
        KeySpec("pinned_images", "list", [], "Patterns of images to keep pinned; every source adds to them.",
                ["registry.example/team/*"], "PINCTL_PINNED_IMAGES", "--pinned-image", env_split=True),
        KeySpec("pattern_dialect", "choice", "pinctl", "How pinned_images patterns are read: pinctl's or CRI-O's.",
                "crio", "PINCTL_PATTERN_DIALECT", "--pattern-dialect", choices=DIALECTS),
        KeySpec("namespaces", "list", [], "containerd namespaces to work in; empty means the command's defaults.",
                ["k8s.io"], "CONTAINERD_NAMESPACE", "--namespace"),
        KeySpec("containerd_address", "str", "/run/containerd/containerd.sock", "containerd's socket.",
                "/run/containerd/containerd.sock", "CONTAINERD_ADDRESS", "--address"),
        KeySpec("containerd_config", "optional-str", None, "containerd config to read the CRI sandbox image from.",
                "/etc/containerd/config.toml", "PINCTL_CONTAINERD_CONFIG", "--containerd-config"),
        # A day at most: a far larger deadline overflows gRPC's and fails every call.
        KeySpec("timeout", "number", 2.0, "Seconds to wait for each call to the engine.", 5.0, None, "--timeout",
                bounds=(0.05, 86400.0)),
        KeySpec("docker_host", "optional-str", None, "Docker daemon to talk to, as in DOCKER_HOST.",
                "unix:///run/docker.sock", "DOCKER_HOST", "--docker-host"),
        KeySpec("docker_containerd_address", "optional-str", None,
                "containerd socket of Docker's containerd image store (namespace moby); "
                "unset: containerd_address, else Docker's own /run/docker/containerd/containerd.sock.",
                "/run/docker/containerd/containerd.sock"),
        KeySpec("runtime_endpoint", "optional-str", None, "CRI runtime endpoint to talk to.",
                "unix:///run/containerd/containerd.sock", "CONTAINER_RUNTIME_ENDPOINT", "--runtime-endpoint"),
        KeySpec("docker_pinned_image_labels", "list", [], 'Docker labels ("key=value" or "key") that pin an image.',
                ["team.example/keep=true"], item_check=_is_label, item_form='"key=value" or "key"'),
    )
}


# -- results -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Value:
    """A setting and where it came from: "default", a file path, "env NAME" or "flag"."""

    value: Any
    source: str


@dataclass(frozen=True)
class PatternEntry:
    """One pinned-image pattern, where it came from and how to read it."""

    text: str
    source: str
    dialect: str


@dataclass(frozen=True)
class Config:
    """The merged configuration. values holds every key but pinned_images, which is patterns."""

    values: dict[str, Value]
    patterns: list[PatternEntry]
    files: list[str]

    def get(self, key: str) -> Any:
        """The value of one key."""
        if key == PATTERNS_KEY:
            raise KeyError(f"{PATTERNS_KEY} accumulates from every source: read Config.patterns")
        return self.values[key].value


@dataclass
class _Merge:
    """The configuration while sources are applied, lowest first."""

    values: dict[str, Value]
    patterns: list[tuple[str, str]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


class _Invalid(Exception):
    """A value of the wrong shape; the text completes "key 'x' ..."."""


# -- loading -----------------------------------------------------------------------------


def load(
    flags: Optional[Mapping[str, Any]] = None,
    environ: Optional[Mapping[str, str]] = None,
    config_path: Optional[str] = None,
    from_crio: Optional[str] = None,
) -> Config:
    """Merge defaults, files, environment and flags; add CRI-O's patterns when from_crio is given."""
    env = os.environ if environ is None else environ
    merge = _Merge({name: Value(spec.default, "default") for name, spec in KEYS.items() if name != PATTERNS_KEY})
    for path, data, text in _pinctl_files(config_path, env):
        merge.files.append(path)
        _apply_file(merge, path, data, text)
    _apply_env(merge, env)
    _apply_flags(merge, flags or {})
    dialect = merge.values["pattern_dialect"].value
    patterns = [PatternEntry(text, source, dialect) for text, source in merge.patterns]
    if from_crio is not None:
        crio_patterns, crio_files = _read_crio(from_crio, explicit=None)
        patterns += crio_patterns
        merge.files += crio_files
    return Config(merge.values, patterns, merge.files)


def _main_path(config_path: Optional[str], env: Mapping[str, str]) -> tuple[str, str]:
    """The main file and how it was named: "" for the default, else the option or variable to fix."""
    if config_path is not None:
        return config_path, "--config"
    named = env.get(CONFIG_ENV, "").strip()
    if named:
        return named, CONFIG_ENV
    return DEFAULT_PATH, ""


def _pinctl_files(config_path: Optional[str], env: Mapping[str, str]) -> Iterator[tuple[str, Any, str]]:
    """(path, parsed TOML, text) of the main file, if any, then of each drop-in."""
    path, named_by = _main_path(config_path, env)
    main = _read_toml(path, "config file", missing_ok=not named_by, fix=f"fix {named_by or path}")
    if main is not None:
        yield (path, *main)
    dropins = os.path.join(os.path.dirname(path), DROPIN_DIR)
    for name in _dropin_names(dropins):
        dropin = os.path.join(dropins, name)
        parsed = _read_toml(dropin, "drop-in", missing_ok=False, fix=f"check {dropins}")
        if parsed is not None:
            yield (dropin, *parsed)


def _dropin_names(directory: str) -> list[str]:
    """*.toml names in a drop-in directory, in lexical order; none if it does not exist.

    Every one is read: one that cannot be (a dangling link, a FIFO, a directory) is an error,
    for skipping it would drop its patterns and let a prune unpin what it held.
    """
    try:
        names = _list_directory(directory)
    except NotADirectoryError:
        raise ConfigError(f"{directory} is not a directory", "make it a directory of *.toml drop-ins") from None
    except PermissionError:
        raise ConfigError(f"cannot read the drop-in directory {directory}", "run pinctl as root (sudo)") from None
    except OSError as err:
        raise ConfigError(f"cannot read the drop-in directory {directory}: {_reason(err)}",
                          "make it a directory of *.toml drop-ins") from None
    # Dot files are editors' locks and backups, never something an operator dropped in.
    return sorted(n for n in names or [] if n.endswith(".toml") and not n.startswith("."))


def _apply_file(merge: _Merge, path: str, data: dict[str, Any], text: str) -> None:
    lines = _Lines(text)
    for key, raw in data.items():
        line = _key_line(text, key, lines)
        where = f"{path}:{line}" if line else path
        spec = KEYS.get(key)
        if spec is None:
            raise ConfigError(f"{where}: unknown key '{key}'", _unknown_key_hint(key, raw))
        value = _validated(spec, raw, where, f"e.g. {key} = {_toml_literal(spec.example)}")
        if key == PATTERNS_KEY:
            item_lines = _item_lines(text, key, value, lines)
            merge.patterns += [(item, f"{path}:{n}" if n else path) for item, n in zip(value, item_lines)]
        else:
            merge.values[key] = Value(value, path)


def _apply_env(merge: _Merge, env: Mapping[str, str]) -> None:
    for spec in KEYS.values():
        raw = env.get(spec.env, "").strip() if spec.env else ""
        if not raw:
            continue
        where = f"env {spec.env}"
        value = _validated(spec, _from_env(spec, raw), where, f"e.g. {spec.env}={_env_literal(spec.example)}")
        if spec.name == PATTERNS_KEY:
            merge.patterns += [(item, where) for item in value]
        elif value not in ([], None):  # "," is as empty as ""
            merge.values[spec.name] = Value(value, where)


def _from_env(spec: KeySpec, raw: str) -> Any:
    if spec.type == "list":
        items = raw.split(",") if spec.env_split else [raw]
        return [item.strip() for item in items if item.strip()]
    if spec.type == "number":
        try:
            return float(raw)
        except ValueError:
            return raw  # left for validation to name
    return raw


def _apply_flags(merge: _Merge, flags: Mapping[str, Any]) -> None:
    for key, raw in flags.items():
        spec = _flag_spec(key)
        if raw is None or (spec.type == "list" and not raw):
            continue
        where = f"flag {spec.flag}"
        given = list(raw) if isinstance(raw, tuple) else raw  # click's multiple options are tuples
        value = _validated(spec, given, where, f"e.g. {spec.flag} {_flag_literal(spec.example)}")
        if key == PATTERNS_KEY:
            merge.patterns += [(item, PATTERNS_FLAG_SOURCE) for item in value]
        else:
            merge.values[key] = Value(value, "flag")


def _flag_spec(key: str) -> KeySpec:
    # A wrong key here is a bug in the caller (click names --pinned-image "pinned_image"), so it
    # must be loud rather than silently drop what the operator asked for.
    spec = KEYS.get(key)
    if spec is None or spec.flag is None:
        known = sorted(name for name, spec in KEYS.items() if spec.flag)
        raise ValueError(f"no flag sets config key {key!r}; flag keys are {known}")
    return spec


# -- validation --------------------------------------------------------------------------


def _validated(spec: KeySpec, raw: Any, where: str, example: str) -> Any:
    """The value in its canonical form, or a ConfigError naming where it came from."""
    try:
        return _CHECKS[spec.type](spec, raw)
    except _Invalid as err:
        raise ConfigError(f"{where}: key '{spec.name}' {err}", example) from None


def _check_list(spec: KeySpec, raw: Any) -> list[str]:
    if not isinstance(raw, list):
        raise _Invalid(f"must be a list of strings, got {_shown(raw)}")
    for index, item in enumerate(raw, 1):
        if not isinstance(item, str):
            raise _Invalid(f"must be a list of strings, item {index} is {_shown(item)}")
        if not item.strip():
            raise _Invalid(f"must not have empty items, item {index} is {_shown(item)}")
        if spec.item_check is not None and not spec.item_check(item):
            raise _Invalid(f"items must be {spec.item_form}, item {index} is {_shown(item)}")
    return list(raw)


def _check_str(spec: KeySpec, raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise _Invalid(f"must be a non-empty string, got {_shown(raw)}")
    return raw


def _check_optional_str(spec: KeySpec, raw: Any) -> Optional[str]:
    # TOML has no null: an empty string is how a drop-in unsets what an earlier file set.
    if not isinstance(raw, str):
        raise _Invalid(f"must be a string, got {_shown(raw)}")
    return raw or None


def _check_number(spec: KeySpec, raw: Any) -> float:
    # bool is an int to Python, but "timeout = true" is a mistake, not 1 second.
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) or raw <= 0:
        raise _Invalid(f"must be a number > 0, got {_shown(raw)}")
    if spec.bounds and not spec.bounds[0] <= raw <= spec.bounds[1]:
        raise _Invalid(f"must be a {spec.type_label}, got {_shown(raw)}")
    return float(raw)


def _check_choice(spec: KeySpec, raw: Any) -> str:
    if raw not in spec.choices:
        raise _Invalid(f"must be one of {', '.join(_shown(c) for c in spec.choices)}, got {_shown(raw)}")
    return str(raw)


_CHECKS: dict[str, Callable[[KeySpec, Any], Any]] = {
    "list": _check_list,
    "str": _check_str,
    "optional-str": _check_optional_str,
    "number": _check_number,
    "choice": _check_choice,
}


def _shown(value: Any) -> str:
    """A value as the operator wrote it, near enough: TOML-like."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, (str, list, bool, int, float)):
        return _toml_literal(value)
    return str(value)


def _toml_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_shown(item) for item in value) + "]"
    return repr(value)


def _env_literal(value: Any) -> str:
    return ",".join(value) if isinstance(value, list) else str(value)


def _flag_literal(value: Any) -> str:
    return value[0] if isinstance(value, list) else str(value)


def _unknown_key_hint(key: str, raw: Any) -> str:
    import difflib

    close = difflib.get_close_matches(key, KEYS, n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    flat = "the file is flat, top-level keys only; " if isinstance(raw, dict) else ""
    return f"{flat}valid keys: {', '.join(KEYS)}"


# -- reading files -----------------------------------------------------------------------


def _euid() -> int:
    """The effective uid; tests replace this to act as root or not."""
    return os.geteuid()


def _check_owner(path: str, st: os.stat_result) -> None:
    """As root, refuse what a non-root user could have written: it decides which images survive."""
    if _euid() != 0:
        return
    if st.st_uid != 0 or st.st_mode & 0o022:
        raise ConfigError(
            f"refusing {path}: it is writable by a user other than root "
            f"(owner uid {st.st_uid}, mode {st.st_mode & 0o7777:04o}) and decides which images are kept",
            f"chown root:root {path} && chmod go-w {path}",
        )


# The kernel's limit (MAXSYMLINKS): a walk that follows more is a loop, as open() would say.
_MAX_SYMLINKS = 40


def _look(path: str, guard: bool) -> os.stat_result:
    """stat() of path; FileNotFoundError when nothing is there.

    With guard, as root, path is followed one name at a time as the kernel would, and a
    directory on the way that a user other than root could change is refused, before anything
    is opened: opening is not harmless (a device, a FIFO) and nothing found through such a
    directory can be trusted.
    """
    if not (guard and _euid() == 0):
        return os.stat(path)
    found = _walk(path)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    return found


def _same_file(path: str, looked: os.stat_result, opened: os.stat_result, guard: bool) -> None:
    """As root, what was opened must be what the walk found (only root could swap it)."""
    if guard and _euid() == 0 and (looked.st_dev, looked.st_ino) != (opened.st_dev, opened.st_ino):
        raise ConfigError(f"{path} changed while pinctl read it", "run pinctl again")


def _walk(path: str) -> Optional[os.stat_result]:
    """lstat of what path names after following its symlinks, or None when it does not exist;
    a ConfigError when a directory looked in on the way is not root's alone."""
    here, here_st = "/", os.lstat("/")
    absolute = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    pending = list(reversed(absolute.split("/")))
    found, links = here_st, 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            here = os.path.dirname(here)
            here_st = found = os.lstat(here)
            continue
        entry = os.path.join(here, name)
        try:
            found = os.lstat(entry)
        except FileNotFoundError:
            _check_directory(path, here, here_st, entry, None)
            return None
        _check_directory(path, here, here_st, entry, found)
        if stat.S_ISLNK(found.st_mode):
            links += 1
            if links > _MAX_SYMLINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            target = os.readlink(entry)
            pending += reversed(target.split("/"))
            if target.startswith("/"):
                here, here_st = "/", os.lstat("/")
        elif pending and not stat.S_ISDIR(found.st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        else:
            here, here_st = entry, found
    return found


def _check_directory(path: str, directory: str, st: os.stat_result, entry: str,
                     entry_st: Optional[os.stat_result]) -> None:
    """Refuse looking up entry in a directory someone other than root could change it in.

    sshd refuses every group- or world-writable directory. A sticky one owned by root is
    accepted here for root's entries (and absent ones): nobody else can rename or remove
    those, and anything they add is theirs, which is refused in turn. That keeps /tmp usable.
    """
    if st.st_uid == 0 and not st.st_mode & 0o022:
        return
    if st.st_uid == 0 and st.st_mode & stat.S_ISVTX:
        if entry_st is None or entry_st.st_uid == 0:
            return
        subject = "it" if entry == path else entry
        raise ConfigError(
            f"refusing {path}: {subject} is owned by uid {entry_st.st_uid} in the shared directory {directory}, "
            f"who could replace it",
            f"chown -h root:root {entry}",
        )
    raise ConfigError(
        f"refusing {path}: directory {directory} is writable by a user other than root "
        f"(owner uid {st.st_uid}, mode {st.st_mode & 0o7777:04o}), who could replace what pinctl reads there",
        f"chown root:root {directory} && chmod go-w {directory}",
    )


class NotRegularFile(Exception):
    """A path that names a FIFO, a device, a socket or a directory where a file is wanted."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _require_regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise NotRegularFile(next((kind for test, kind in _KINDS if test(mode)), "not a file"))


# O_NONBLOCK: opening a FIFO must not wait for a writer; it changes nothing for a regular file.
_OPEN_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_OPEN_DIRECTORY = _OPEN_FILE | os.O_DIRECTORY


def read_regular(path: str, guard: bool = False) -> bytes:
    """The bytes of the regular file at path.

    Raises FileNotFoundError, NotRegularFile or another OSError; with guard, a ConfigError when
    running as root and a user other than root could have changed the file or its directories.
    """
    # Looking first spares a device the side effects of an open; the open file's fstat decides.
    looked = _look(path, guard)
    _require_regular(looked.st_mode)
    fd = os.open(path, _OPEN_FILE)
    try:
        opened = os.fstat(fd)
        _require_regular(opened.st_mode)
        if guard:
            _check_owner(path, opened)
        _same_file(path, looked, opened, guard)
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _list_directory(path: str) -> Optional[list[str]]:
    """The names in a directory, root-guarded as the files are; None when nothing is at path."""
    try:
        looked = _look(path, guard=True)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise  # a dangling symlink is something
        return None
    if not stat.S_ISDIR(looked.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
    fd = os.open(path, _OPEN_DIRECTORY)
    try:
        opened = os.fstat(fd)
        _check_owner(path, opened)
        _same_file(path, looked, opened, guard=True)
        return os.listdir(fd)
    finally:
        os.close(fd)


def _reason(err: OSError) -> str:
    """"too many levels of symbolic links": the system's words, lower case, to follow a colon."""
    text = err.strerror or str(err)
    return text[:1].lower() + text[1:]


def unreadable(err: Exception, what: str, path: str, fix: str) -> ConfigError:
    """One line on why `what` (e.g. "config file") at path cannot be read, with a fix."""
    if isinstance(err, NotRegularFile):
        return ConfigError(f"{what} {path} is {err.kind}, not a regular file", fix)
    if isinstance(err, PermissionError):
        return ConfigError(f"cannot read {what} {path}", "run pinctl as root (sudo)")
    if isinstance(err, FileNotFoundError):
        if os.path.islink(path):
            return ConfigError(f"{what} {path} is a symlink to {os.readlink(path)}, which does not exist",
                               "restore the file it points to, or remove the link")
        return ConfigError(f"{what} {path} does not exist", fix)
    if isinstance(err, OSError):
        return ConfigError(f"cannot read {what} {path}: {_reason(err)}", fix)
    return ConfigError(f"cannot read {what} {path}: {err}", fix)


def _read_toml(path: str, what: str, missing_ok: bool, fix: str) -> Optional[tuple[dict[str, Any], str]]:
    """Parsed TOML and text of one file; None when nothing is there and that is fine."""
    try:
        raw = read_regular(path, guard=True)
    except FileNotFoundError as err:
        if missing_ok and not os.path.lexists(path):
            return None  # as root, only after the walk found its directory root's alone
        raise unreadable(err, what, path, fix) from None
    except (OSError, NotRegularFile) as err:
        raise unreadable(err, what, path, fix) from None
    return _parse(path, raw)


def _parse(path: str, raw: bytes) -> tuple[dict[str, Any], str]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text", "TOML files must be UTF-8") from None
    toml = toml_reader()
    try:
        return toml.loads(text), text
    except toml.TOMLDecodeError as err:
        raise ConfigError(_syntax_message(path, text, err), "fix the TOML syntax") from None
    except RecursionError:
        raise ConfigError(f"{path}: {TOO_DEEP}", "pinctl's keys are flat: strings, numbers and lists of strings") from None


# Python's TOML reader recurses once per level of nesting; "a = [[[[..." thousands deep exhausts the stack.
TOO_DEEP = "nested too deeply to read"


def _syntax_message(path: str, text: str, err: Exception) -> str:
    """tomllib's "Reason (at line L, column C)" as "PATH:L: Reason (column C)"."""
    message = str(err)
    found = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    if found:
        return f"{path}:{found.group(1)}: {message[: found.start()]} (column {found.group(2)})"
    found = re.search(r"\s*\(at end of document\)$", message)
    if found:
        last = max(1, len(text.splitlines()))
        return f"{path}:{last}: {message[: found.start()]} (at end of file)"
    return f"{path}: {message}"


def toml_reader() -> Any:
    """tomllib, or tomli where Python (< 3.11) ships no TOML reader."""
    try:
        import tomllib
    except ModuleNotFoundError:
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib


# -- finding lines -----------------------------------------------------------------------
# tomllib reports no positions for values. The file is flat, so a key's line is the line that
# starts with it, and a list's strings are the strings written after it up to the first "]"
# outside a string or comment (the list was checked to hold only strings). Line numbers come
# from one pass over the text, so 10,000 patterns cost no more each than ten.

_STRING_OR_COMMENT: re.Pattern[str] = re.compile(
    r'''"""(?P<multi_basic>(?:\\[\s\S]|[^\\])*?)"""(?P<multi_basic_end>"{0,2})'''
    r"""|'''(?P<multi_literal>[\s\S]*?)'''(?P<multi_literal_end>'{0,2})"""
    r'''|"(?P<basic>(?:\\.|[^"\\\n])*)"'''
    r"""|'(?P<literal>[^'\n]*)'"""
    r"""|\#[^\n]*"""
    r"""|(?P<end>\])"""
)


class _Lines:
    """Line numbers of offsets into one text: its newlines found once, then a bisect each."""

    def __init__(self, text: str) -> None:
        self.newlines = [found.start() for found in re.finditer("\n", text)]

    def at(self, offset: int) -> int:
        return bisect_left(self.newlines, offset) + 1


def _key_match(text: str, key: str) -> Optional[re.Match[str]]:
    name = re.escape(key)
    names = rf"""(?:{name}|"{name}"|'{name}')"""
    pattern = rf"^[ \t]*(?:{names}[ \t]*[=.]|\[\[?[ \t]*{names}[ \t]*[\].])"
    return re.search(pattern, text, re.MULTILINE)


def _key_line(text: str, key: str, lines: Optional[_Lines] = None) -> Optional[int]:
    found = _key_match(text, key)
    return (lines or _Lines(text)).at(found.start()) if found else None


def _item_lines(text: str, key: str, items: Sequence[str], lines: _Lines) -> list[Optional[int]]:
    """The line of each string of a list key; the key's line when a string is written escaped."""
    found = _key_match(text, key)
    if found is None:
        return [None] * len(items)
    key_line = lines.at(found.start())
    strings = _strings(text, found.end())
    if len(strings) != len(items):
        return [key_line] * len(items)  # written in a way this reading does not follow
    # A string written with escapes reads differently from its value: it gets the key's line.
    return [lines.at(at) if written == item else key_line for (at, written), item in zip(strings, items)]


def _strings(text: str, start: int) -> list[tuple[int, str]]:
    """(offset, text between the quotes) of each string of the list that follows start."""
    strings: list[tuple[int, str]] = []
    for found in _STRING_OR_COMMENT.finditer(text, start):
        if found["end"]:
            break
        parts = found.group("basic", "literal", "multi_basic", "multi_literal")
        written = next((part for part in parts if part is not None), None)
        if written is not None:  # else a comment
            strings.append((found.start(), written + (found["multi_basic_end"] or found["multi_literal_end"] or "")))
    return strings


# -- CRI-O -------------------------------------------------------------------------------


def read_crio_patterns(path: str, explicit: Optional[bool] = None) -> list[PatternEntry]:
    """CRI-O's [crio.image] pinned_images from path and the drop-ins in "<path>.d".

    As in CRI-O, drop-ins are every file below that directory in lexical order, and the last
    file that sets the key replaces what came before. A missing main file is an error when it
    was named explicitly, which by default means: when it is not CRIO_DEFAULT_PATH.
    """
    return _read_crio(path, explicit)[0]


def _read_crio(path: str, explicit: Optional[bool]) -> tuple[list[PatternEntry], list[str]]:
    """CRI-O's patterns and the files read for them."""
    named = path != CRIO_DEFAULT_PATH if explicit is None else explicit
    chosen: tuple[str, list[str]] = ("", [])
    files: list[str] = []
    for file, data, text in _crio_files(path, named):
        files.append(file)
        found = _crio_pinned(file, data, text)
        if found is not None:
            chosen = (file, found)
    if not files:
        # Recent CRI-O packages ship only crio.conf.d, so the default main file may well be
        # missing; but finding no CRI-O config at all cannot be what the operator meant.
        raise ConfigError(f"no CRI-O config at {path} or in {path}.d", "give the path of CRI-O's crio.conf")
    source, items = chosen
    return [PatternEntry(item, f"crio {source}", "crio") for item in items], files


def _crio_files(path: str, explicit: bool) -> Iterator[tuple[str, Any, str]]:
    fix = "give the path of CRI-O's crio.conf"
    main = _read_toml(path, "CRI-O config", missing_ok=not explicit, fix=fix)
    if main is not None:
        yield (path, *main)
    for dropin in _crio_dropins(f"{path}.d"):
        parsed = _read_toml(dropin, "CRI-O drop-in", missing_ok=False, fix=f"check {path}.d")
        if parsed is not None:
            yield (dropin, *parsed)


def _crio_dropins(directory: str) -> list[str]:
    """Files below a CRI-O drop-in directory in the order Go's filepath.Walk visits them."""
    try:
        names = _list_directory(directory)
    except NotADirectoryError:
        return []
    except PermissionError:
        raise ConfigError(f"cannot read CRI-O's drop-ins in {directory}", "run pinctl as root (sudo)") from None
    except OSError as err:
        raise ConfigError(f"cannot read CRI-O's drop-ins in {directory}: {_reason(err)}",
                          "give the path of CRI-O's crio.conf") from None
    found: list[str] = []
    for name in sorted(names or []):
        child = os.path.join(directory, name)
        # As filepath.Walk: a symlink is a file, even one to a directory (which is then an error).
        found += _crio_dropins(child) if _is_directory_itself(child) else [child]
    return found


def _is_directory_itself(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False  # read as a file, which names the problem


def _crio_pinned(path: str, data: dict[str, Any], text: str) -> Optional[list[str]]:
    """The pinned_images a CRI-O file sets, or None when it leaves the key alone."""
    image = data.get("crio", {}).get("image", {}) if isinstance(data.get("crio"), dict) else {}
    if not isinstance(image, dict) or PATTERNS_KEY not in image:
        return None
    line = _key_line(text, PATTERNS_KEY)
    where = f"{path}:{line}" if line else path
    example = f"e.g. {PATTERNS_KEY} = {_toml_literal(KEYS[PATTERNS_KEY].example)} under [crio.image]"
    return _validated(KEYS[PATTERNS_KEY], image[PATTERNS_KEY], where, example)

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
read too (pinctl.config.crio); there drop-ins replace the key, as in CRI-O itself, and an empty
or blank item is read as CRI-O reads it (an exact name no image has) with a warning.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, Optional

from pinctl.config import crio
from pinctl.config.files import LineIndex, key_line, list_directory, list_item_lines, os_error_text, read_toml
from pinctl.config.settings import DEFAULT_SOURCE, KEYS, PATTERNS_KEY, KeySpec, Settings
from pinctl.errors import ConfigError

DEFAULT_PATH = "/etc/pinctl/config.toml"
CRIO_DEFAULT_PATH = crio.CRIO_DEFAULT_PATH
CONFIG_ENV = "PINCTL_CONFIG"
DROPIN_DIR = "config.d"
PATTERNS_FLAG_SOURCE = "flag --pinned-image"


# -- results -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Value:
    """A setting as config show prints it, and where it came from: "default", a file path,
    "env NAME" or "flag"."""

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
    """The merged configuration: typed settings and where each came from; the patterns of the
    policy with theirs; the files read.

    sources holds every key but pinned_images, whose patterns each carry their own. warnings
    are what reading found questionable but not wrong (a CRI-O item that pins nothing).
    """

    settings: Settings
    sources: Mapping[str, str]
    patterns: list[PatternEntry]
    files: list[str]
    warnings: tuple[str, ...] = ()

    def defaulted(self, key: str) -> bool:
        """Whether no file, variable or flag set key."""
        if key == PATTERNS_KEY:
            raise KeyError(f"{PATTERNS_KEY} accumulates from every source: read Config.patterns")
        return self.sources[key] == DEFAULT_SOURCE

    def from_file(self, key: str) -> bool:
        """Whether a config file (not a flag, a variable or the default) set key."""
        return self.sources[key] in self.files

    def shown(self) -> dict[str, Value]:
        """What config show prints of each key but pinned_images: its value and where it came from."""
        return {key: Value(getattr(self.settings, key), source) for key, source in self.sources.items()}


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
    warn: Optional[Callable[[str], None]] = None,
) -> Config:
    """Merge defaults, files, environment and flags; add CRI-O's patterns when from_crio is given.

    Each warning goes to warn, else to stderr as pinctl's, and is kept in Config.warnings."""
    env = os.environ if environ is None else environ
    merge = _Merge({name: Value(spec.default, DEFAULT_SOURCE) for name, spec in KEYS.items() if name != PATTERNS_KEY})
    for path, data, text in _pinctl_files(config_path, env):
        merge.files.append(path)
        _apply_file(merge, path, data, text)
    _apply_env(merge, env)
    _apply_flags(merge, flags or {})
    values = {key: value.value for key, value in merge.values.items()}
    settings = Settings(**values, pinned_images=tuple(text for text, _source in merge.patterns))
    patterns = [PatternEntry(text, source, settings.pattern_dialect) for text, source in merge.patterns]
    warnings: tuple[str, ...] = ()
    if from_crio is not None:
        crio_patterns, crio_files, warnings = _read_crio(from_crio, explicit=None)
        patterns += crio_patterns
        merge.files += crio_files
    for warning in warnings:
        (warn or _to_stderr)(warning)
    sources = MappingProxyType({key: value.source for key, value in merge.values.items()})
    return Config(settings, sources, patterns, merge.files, warnings)


def _to_stderr(message: str) -> None:
    sys.stderr.write(f"pinctl: {message}\n")


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
    main = read_toml(path, "config file", missing_ok=not named_by, fix=f"fix {named_by or path}")
    if main is not None:
        yield (path, *main)
    dropins = os.path.join(os.path.dirname(path), DROPIN_DIR)
    for name in _dropin_names(dropins):
        dropin = os.path.join(dropins, name)
        parsed = read_toml(dropin, "drop-in", missing_ok=False, fix=f"check {dropins}")
        if parsed is not None:
            yield (dropin, *parsed)


def _dropin_names(directory: str) -> list[str]:
    """*.toml names in a drop-in directory, in lexical order; none if it does not exist.

    Every one is read: one that cannot be (a dangling link, a FIFO, a directory) is an error,
    for skipping it would drop its patterns and let a prune unpin what it held.
    """
    try:
        names = list_directory(directory)
    except NotADirectoryError:
        raise ConfigError(f"{directory} is not a directory", "make it a directory of *.toml drop-ins") from None
    except PermissionError:
        raise ConfigError(f"cannot read the drop-in directory {directory}", "run pinctl as root (sudo)") from None
    except OSError as err:
        raise ConfigError(f"cannot read the drop-in directory {directory}: {os_error_text(err)}",
                          "make it a directory of *.toml drop-ins") from None
    # Dot files are editors' locks and backups, never something an operator dropped in.
    return sorted(n for n in names or [] if n.endswith(".toml") and not n.startswith("."))


def _apply_file(merge: _Merge, path: str, data: dict[str, Any], text: str) -> None:
    lines = LineIndex(text)
    for key, raw in data.items():
        line = key_line(text, key, lines)
        where = f"{path}:{line}" if line else path
        spec = KEYS.get(key)
        if spec is None:
            raise ConfigError(f"{where}: unknown key '{key}'", _unknown_key_hint(key, raw))
        value = _validated(spec, raw, where, f"e.g. {key} = {_toml_literal(spec.example)}")
        if key == PATTERNS_KEY:
            item_lines = list_item_lines(text, key, value, lines)
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
        elif value not in ((), None):  # "," is as empty as ""
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


def _check_list(spec: KeySpec, raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list):
        raise _Invalid(f"must be a list of strings, got {_shown(raw)}")
    for index, item in enumerate(raw, 1):
        if not isinstance(item, str):
            raise _Invalid(f"must be a list of strings, item {index} is {_shown(item)}")
        if not item.strip():
            raise _Invalid(f"must not have empty items, item {index} is {_shown(item)}")
        if spec.item_check is not None and not spec.item_check(item):
            raise _Invalid(f"items must be {spec.item_form}, item {index} is {_shown(item)}")
    return tuple(raw)


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
    return ",".join(value) if isinstance(value, tuple) else str(value)


def _flag_literal(value: Any) -> str:
    return value[0] if isinstance(value, tuple) else str(value)


def _unknown_key_hint(key: str, raw: Any) -> str:
    import difflib

    close = difflib.get_close_matches(key, KEYS, n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    flat = "the file is flat, top-level keys only; " if isinstance(raw, dict) else ""
    return f"{flat}valid keys: {', '.join(KEYS)}"


# -- CRI-O -------------------------------------------------------------------------------


def read_crio_patterns(path: str, explicit: Optional[bool] = None) -> list[PatternEntry]:
    """CRI-O's [crio.image] pinned_images from path and the drop-ins in "<path>.d".

    As in CRI-O, drop-ins are every file below that directory in lexical order, and the last
    file that sets the key replaces what came before. A missing main file is an error when it
    was named explicitly, which by default means: when it is not CRIO_DEFAULT_PATH.
    """
    return _read_crio(path, explicit)[0]


def _read_crio(path: str, explicit: Optional[bool]) -> tuple[list[PatternEntry], list[str], tuple[str, ...]]:
    """CRI-O's patterns, the files read for them and what to warn of (items that pin nothing)."""
    # This module's CRIO_DEFAULT_PATH, not crio's: tests point it at a sandbox.
    named = path != CRIO_DEFAULT_PATH if explicit is None else explicit
    found = crio.read_crio_config(path, explicit=named)
    if not found.files:
        # Recent CRI-O packages ship only crio.conf.d, so the default main file may well be
        # missing; but finding no CRI-O config at all cannot be what the operator meant.
        raise ConfigError(f"no CRI-O config at {path} or in {path}.d", "give the path of CRI-O's crio.conf")
    patterns = [PatternEntry(entry.text, f"crio {found.pinned_from}", "crio") for entry in found.pinned_images]
    return patterns, list(found.files), found.warnings

"""The kubelet's image GC settings, from its config file, flags or its defaults, each with where
it came from. No engine I/O: one file read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Optional

from pinctl.config.files import NotRegularFile, read_regular, unreadable
from pinctl.errors import ConfigError
from pinctl.gc.eviction import EvictionConfig
from pinctl.gc.model import GcSettings, GcSettingsError

DEFAULT_CONFIG = "/var/lib/kubelet/config.yaml"
# KubeletConfiguration field -> GcSettings attribute.
FIELDS = {
    "imageGCHighThresholdPercent": "high_threshold_percent",
    "imageGCLowThresholdPercent": "low_threshold_percent",
    "imageMinimumGCAge": "min_age",
    "imageMaximumGCAge": "max_age",
}
FLAGS = {
    "high_threshold_percent": "--high-threshold",
    "low_threshold_percent": "--low-threshold",
    "min_age": "--min-age",
    "max_age": "--max-age",
}
KUBELET_DEFAULT = "kubelet default"
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


@dataclass(frozen=True)
class SourcedGcSettings:
    """The settings, and for each attribute where it came from: a file path with its field
    name, a flag, or the kubelet's default; and the file's eviction fields, parsed by gc plan."""

    settings: GcSettings
    sources: dict[str, str] = field(default_factory=dict)
    eviction: EvictionConfig = EvictionConfig()


@dataclass(frozen=True)
class GcOverrides:
    """What flags set; None leaves the config file's value or the default."""

    high_threshold_percent: Optional[int] = None
    low_threshold_percent: Optional[int] = None
    min_age: Optional[timedelta] = None
    max_age: Optional[timedelta] = None


def parse_duration(text: str) -> timedelta:
    """A Go duration as the kubelet's config takes it: 2m, 1h30m, 90s, 0, 1.5h."""
    value = text.strip()
    if value in ("0", "+0", "-0"):
        return timedelta(0)
    sign = -1 if value.startswith("-") else 1
    body = value.lstrip("+-")
    parts = _PART.findall(body)
    if not body or "".join(number + unit for number, unit in parts) != body:
        raise ValueError(f"{text!r} is not a duration; write it like 2m, 1h30m or 90s")
    return timedelta(seconds=sign * sum(float(number) * _UNITS[unit] for number, unit in parts))


def format_duration(value: timedelta) -> str:
    """2m, 1h30m, 45s: the shortest Go-style spelling, as pinctl prints durations."""
    seconds = int(value.total_seconds())
    if seconds == 0:
        return "0s"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    text = "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)
    return ("-" if seconds < 0 else "") + text


def read_gc_settings(path: Optional[str], overrides: GcOverrides = GcOverrides(),
                     default_path: str = DEFAULT_CONFIG) -> SourcedGcSettings:
    """Defaults, then the kubelet's config file (path, else default_path when it exists), then
    flags. The result is validated as the kubelet validates it."""
    values: dict[str, Any] = {name: getattr(GcSettings(), name) for name in FIELDS.values()}
    sources = {name: KUBELET_DEFAULT for name in FIELDS.values()}
    document, where = _read_document(path, default_path)
    for key, name in FIELDS.items():
        if document is not None and key in document:
            values[name] = _field(document[key], key, name, where)
            sources[name] = f"{where} {key}"
            if name == "min_age" and values[name] == timedelta(0):
                # The kubelet's own defaulting turns a zero minimum age in its config into 2m.
                values[name] = GcSettings().min_age
                sources[name] += " (0 means the default)"
    for name, flag in FLAGS.items():
        given = getattr(overrides, name)
        if given is not None:
            values[name], sources[name] = given, f"flag {flag}"
    settings = GcSettings(**values)
    problems = settings.problems()
    if problems:
        named = "; ".join(f"{FLAGS[name]}: {sources[name]}" for name in FIELDS.values())
        raise GcSettingsError(f"invalid image GC settings: {problems[0]}", f"where each came from: {named}")
    return SourcedGcSettings(settings, sources, _eviction_fields(document, where))


def _eviction_fields(document: Optional[dict[str, Any]], where: str) -> EvictionConfig:
    """As written; no file read means the kubelet's defaults (a kubelet started without --config
    has no hard thresholds at all, but nodes run with a config file)."""
    if document is None:
        return EvictionConfig()
    return EvictionConfig(document.get("evictionHard"), document.get("evictionSoft"),
                          document.get("evictionSoftGracePeriod"),
                          document.get("mergeDefaultEvictionSettings", False), where)


def read_kubelet_config(path: str) -> dict[str, Any]:
    """The kubelet's config file as a mapping (ConfigError when it cannot be read or parsed)."""
    return _read_document(path, path)[0] or {}


def _read_document(path: Optional[str], default_path: str) -> tuple[Optional[dict[str, Any]], str]:
    where = path or default_path
    try:
        raw = read_regular(where)
    except FileNotFoundError as err:
        if path is None:
            return None, where  # no kubelet config on this node: the kubelet's defaults apply
        raise unreadable(err, "kubelet config", where, "fix --kubelet-config") from None
    except (NotRegularFile, OSError) as err:
        raise unreadable(err, "kubelet config", where, "fix --kubelet-config") from None
    return _parse(raw, where), where


def _parse(raw: bytes, where: str) -> dict[str, Any]:
    import yaml

    try:
        document = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"kubelet config {where} is not valid YAML: {first}", "fix the file") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError(f"kubelet config {where} is not a KubeletConfiguration mapping", "fix the file")
    return document


def _field(raw: Any, key: str, name: str, where: str) -> Any:
    if name.endswith("_percent"):
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ConfigError(f"kubelet config {where}: {key} must be a whole number, got {raw!r}", "fix the file")
        return raw
    if not isinstance(raw, str):
        raise ConfigError(f"kubelet config {where}: {key} must be a duration like 2m, got {raw!r}", "fix the file")
    try:
        return parse_duration(raw)
    except ValueError as err:
        raise ConfigError(f"kubelet config {where}: {key}: {err}", "fix the file") from None

"""The kubelet's GC settings: its config file, flags over it, its defaults, and where each came from."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from pinctl.errors import ConfigError
from pinctl.gc.kubelet import GcOverrides, format_duration, parse_duration, read_gc_settings
from pinctl.gc.model import GcSettingsError


@pytest.mark.parametrize("text, seconds", [
    ("2m", 120), ("1h30m", 5400), ("90s", 90), ("0", 0), ("1.5h", 5400), ("2m0s", 120), ("500ms", 0.5),
])
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("bad", ["", "2", "m", "2 m", "2x", "1h 2m", "two minutes"])
def test_malformed_durations(bad: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(bad)


def test_format_duration() -> None:
    assert [format_duration(timedelta(seconds=s)) for s in (0, 45, 120, 5400)] == ["0s", "45s", "2m", "1h30m"]


def test_defaults_when_the_node_has_no_kubelet_config(tmp_path: Path) -> None:
    found = read_gc_settings(None, default_path=str(tmp_path / "absent.yaml"))
    assert (found.settings.high_threshold_percent, found.settings.low_threshold_percent) == (85, 80)
    assert set(found.sources.values()) == {"kubelet default"}


def test_file_then_flags_each_with_its_source(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                    "imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 70\nimageMaximumGCAge: 168h\n")
    found = read_gc_settings(str(path), GcOverrides(low_threshold_percent=60))
    s = found.settings
    assert (s.high_threshold_percent, s.low_threshold_percent, s.max_age) == (90, 60, timedelta(hours=168))
    assert found.sources == {
        "high_threshold_percent": f"{path} imageGCHighThresholdPercent",
        "low_threshold_percent": "flag --low-threshold",
        "min_age": "kubelet default",
        "max_age": f"{path} imageMaximumGCAge",
    }


def test_a_zero_minimum_age_in_the_file_is_the_default_as_the_kubelet_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("imageMinimumGCAge: 0s\n")
    found = read_gc_settings(str(path))
    assert found.settings.min_age == timedelta(minutes=2) and "(0 means the default)" in found.sources["min_age"]
    assert read_gc_settings(str(path), GcOverrides(min_age=timedelta(0))).settings.min_age == timedelta(0)


@pytest.mark.parametrize("text, message", [
    ("imageGCHighThresholdPercent: high\n", "must be a whole number"),
    ("imageMinimumGCAge: 5\n", "must be a duration"),
    ("imageMinimumGCAge: soon\n", "not a duration"),
    ("- a list\n", "not a KubeletConfiguration mapping"),
    ("key: [unclosed\n", "not valid YAML"),
])
def test_bad_files_are_one_line_config_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        read_gc_settings(str(path))
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_named_file_that_is_missing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        read_gc_settings(str(tmp_path / "nope.yaml"))


def test_settings_the_kubelet_would_refuse(tmp_path: Path) -> None:
    with pytest.raises(GcSettingsError, match="must be less than"):
        read_gc_settings(None, GcOverrides(high_threshold_percent=70, low_threshold_percent=80),
                         default_path=str(tmp_path / "absent.yaml"))

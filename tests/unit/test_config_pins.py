"""containerd 2.x's own pinned_images, read from its config."""

from __future__ import annotations

import pathlib

import pytest

from pinctl.backends.containerd import read_config_pins, read_sandbox_image
from pinctl.model import ConfigPin


CONFIG = "/etc/containerd/config.toml"
APP = "example.test/app:1"
V3 = """version = 3
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "example.test/pause:3.10"
  app = "example.test/app:1"
  short = "app:1"
  odd = 3
"""


def test_a_v3_config_gives_every_string_entry_and_the_sandbox(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(V3)
    assert read_config_pins(str(path)) == [ConfigPin("sandbox", "example.test/pause:3.10", str(path)),
                                           ConfigPin("app", APP, str(path)), ConfigPin("short", "app:1", str(path))]
    assert read_sandbox_image(str(path)) == "example.test/pause:3.10"
    assert read_config_pins(str(path))[0].is_sandbox and not read_config_pins(str(path))[1].is_sandbox


@pytest.mark.parametrize("text", [
    '[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "p.example/pause:3"\n',  # 1.x: no such table
    "version = 3\n[plugins.'io.containerd.cri.v1.images']\npinned_images = 'not a table'\n",
    "version = 3\nplugins = 1\n",
])
def test_configs_without_the_table_pin_nothing(tmp_path: pathlib.Path, text: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    assert read_config_pins(str(path)) == []


def test_no_default_config_means_no_entries(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setattr("pinctl.backends.containerd.DEFAULT_CONFIG", str(tmp_path / "absent.toml"))
    assert read_config_pins(None) == []

"""pinctl.node.crio_storage: arrival times from containers/storage's records, validated."""

from __future__ import annotations

import json
import pathlib
from datetime import datetime, timezone

import pytest

from pinctl.node import crio_storage

IMAGE_A, IMAGE_B = "a" * 64, "b" * 64
LAYER_1, LAYER_2 = "1" * 64, "2" * 64


def store(root: pathlib.Path, images: object, layers: object, driver: str = "overlay") -> str:
    (root / f"{driver}-images").mkdir(parents=True)
    (root / f"{driver}-layers").mkdir(parents=True)
    (root / f"{driver}-images" / "images.json").write_text(json.dumps(images))
    (root / f"{driver}-layers" / "layers.json").write_text(json.dumps(layers))
    return str(root / f"{driver}-images")


def test_an_image_is_dated_by_its_top_layer_not_by_its_config(tmp_path: pathlib.Path) -> None:
    path = store(tmp_path, [
        {"id": IMAGE_A, "layer": LAYER_2, "created": "2024-01-01T00:00:00Z"},
        {"id": IMAGE_B, "layer": LAYER_1, "created": "2020-01-01T00:00:00Z"},
    ], [
        {"id": LAYER_1, "created": "2026-12-02T00:20:36.669435398Z"},
        {"id": LAYER_2, "parent": LAYER_1, "created": "2026-12-02T01:00:00.5+01:00"},
    ])
    assert crio_storage.arrival_times(path) == {
        IMAGE_A: datetime(2026, 12, 2, 0, 0, 0, 500000, tzinfo=timezone.utc),
        IMAGE_B: datetime(2026, 12, 2, 0, 20, 36, 669435, tzinfo=timezone.utc),
    }


def test_the_driver_comes_from_the_image_stores_name(tmp_path: pathlib.Path) -> None:
    path = store(tmp_path, [{"id": IMAGE_A, "layer": LAYER_1}], [{"id": LAYER_1, "created": "2026-01-01T00:00:00Z"}],
                 driver="vfs")
    assert list(crio_storage.arrival_times(path)) == [IMAGE_A]
    assert crio_storage.arrival_times(str(tmp_path)) == {}  # not a <driver>-images directory
    assert crio_storage.arrival_times(str(tmp_path / "-images")) == {}


@pytest.mark.parametrize("images, layers", [
    ("not a list", [{"id": LAYER_1, "created": "2026-01-01T00:00:00Z"}]),
    ([{"id": IMAGE_A, "layer": LAYER_1}], {"id": LAYER_1}),
    ([{"id": IMAGE_A, "layer": 7}], [{"id": LAYER_1, "created": "2026-01-01T00:00:00Z"}]),
    ([{"id": IMAGE_A, "layer": LAYER_1}], [{"id": LAYER_1, "created": "yesterday"}]),
    ([{"id": IMAGE_A, "layer": LAYER_1}], [{"id": LAYER_1, "created": "2026-13-01T00:00:00Z"}]),
    ([{"id": IMAGE_A}], [{"id": LAYER_1, "created": "2026-01-01T00:00:00Z"}]),  # no layers: no date
    (["x", None, {"id": IMAGE_A, "layer": LAYER_2}], [{"id": LAYER_1, "created": "2026-01-01T00:00:00Z"}]),
])
def test_a_malformed_store_dates_nothing_and_never_raises(tmp_path: pathlib.Path, images: object,
                                                            layers: object) -> None:
    assert crio_storage.arrival_times(store(tmp_path, images, layers)) == {}


def test_missing_or_unreadable_records_date_nothing(tmp_path: pathlib.Path) -> None:
    path = store(tmp_path, [{"id": IMAGE_A, "layer": LAYER_1}], [])
    (tmp_path / "overlay-layers" / "layers.json").unlink()
    assert crio_storage.arrival_times(path) == {}
    (tmp_path / "overlay-layers" / "layers.json").write_text("{truncated")
    assert crio_storage.arrival_times(path) == {}


def test_an_oversized_record_file_is_not_read(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = store(tmp_path, [{"id": IMAGE_A, "layer": LAYER_1}], [{"id": LAYER_1, "created": "2026-01-01T00:00:00Z"}])
    monkeypatch.setattr(crio_storage, "MAX_RECORDS_BYTES", 10)
    assert crio_storage.arrival_times(path) == {}

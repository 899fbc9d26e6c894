"""containerd 2.x's own pinned_images: read from its config, shown in ls as the entry that
labels an image, and named when unpin removes a pin containerd will put back."""

from __future__ import annotations

import io
import json
import pathlib
from typing import Optional

import pytest

from pinctl.config.containerd import read_config_pins, read_sandbox_image
from pinctl.model import PIN_LABEL, ConfigPin, ImageRow, ItemResult, OutputFormat
from pinctl.pins import listing
from pinctl.pins import plans as pinning
from pinctl.pins.policy import Policy
from pinctl.render import cells, output

from .fakes import FakeStore

PIN = {PIN_LABEL: "pinned"}
FORMATS: tuple[OutputFormat, ...] = ("json", "table")
CONFIG = "/etc/containerd/config.toml"
APP = "example.test/app:1"
V3 = """version = 3
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "example.test/pause:3.10"
  app = "example.test/app:1"
  short = "app:1"
  odd = 3
"""


def pin(name: str, ref: str) -> ConfigPin:
    return ConfigPin(name, ref, CONFIG)


def test_a_v3_config_gives_every_string_entry_and_the_sandbox(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(V3)
    assert read_config_pins(str(path)) == [ConfigPin("sandbox", "example.test/pause:3.10", str(path), 3),
                                           ConfigPin("app", APP, str(path), 4), ConfigPin("short", "app:1", str(path), 5)]
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
    monkeypatch.setattr("pinctl.config.containerd.DEFAULT_CONFIG", str(tmp_path / "absent.toml"))
    assert read_config_pins(None) == []


def store_with(*pins: ConfigPin, labelled: bool = True) -> FakeStore:
    store = FakeStore(sandbox="example.test/pause:3.10", pins=pins)
    store.add("k8s.io", APP, "a", PIN if labelled else None)
    store.add("k8s.io", "sha256:" + "a" * 64, "a")
    store.add("k8s.io", "docker.io/library/app:1", "b", PIN)
    store.add("k8s.io", "example.test/pause:3.10", "p", PIN)
    store.add("moby", APP, "a")
    return store


def rows(store: FakeStore, namespace: str = "k8s.io", policy: Optional[Policy] = None) -> dict[str, ImageRow]:
    return {row.ref: row for row in listing.list_images(store, [namespace], policy).rows}


def test_ls_names_the_entry_on_every_ref_of_the_image_it_labels() -> None:
    store = store_with(pin("sandbox", "example.test/pause:3.10"), pin("app", APP), pin("short", "app:1"))
    found = rows(store)
    for ref in (APP, "sha256:" + "a" * 64):
        row = found[ref]
        assert row.pinned and row.drift is None
        assert [r.as_dict() for r in row.reasons] == [
            {"kind": "label", "detail": APP},
            {"kind": "containerd-config", "detail": f"pinned_images.app in {CONFIG}"},
        ]
    why = cells.why(found["sha256:" + "a" * 64])
    assert why == f"label on {APP}; pinned_images.app in {CONFIG}"
    # containerd compares as a plain string: the short entry names no record, not even app:1's.
    assert [r.kind for r in found["docker.io/library/app:1"].reasons] == ["label"]
    # The sandbox entry is the sandbox, said once.
    assert [r.kind for r in found["example.test/pause:3.10"].reasons] == ["label", "sandbox"]
    # containerd's CRI applies pinned_images in k8s.io alone.
    assert rows(store, "moby")[APP].reasons == []


def test_an_entry_alone_pins_nothing_until_containerd_labels_the_image() -> None:
    from pinctl.config.loader import PatternEntry
    from pinctl.pins.policy import compile_policy

    policy = compile_policy([PatternEntry(APP, "test", "pinctl")])
    row = rows(store_with(pin("app", APP), labelled=False), policy=policy)[APP]
    assert row.pinned is False
    assert [r.kind for r in row.reasons] == ["containerd-config", "pattern"]
    # containerd will label it itself: not pinctl sync's to do, so no drift.
    assert row.drift is None


def unpin(store: FakeStore, *args: str, dry_run: bool = False) -> dict[str, ItemResult]:
    plan = pinning.make_plan([pinning.NamespaceView(store, "k8s.io")], "unpin", list(args))
    return {r.ref: r for r in pinning.apply_plan(plan, dry_run)}


def test_unpin_still_unpins_and_says_containerd_will_pin_it_again() -> None:
    store = store_with(pin("app", APP), pin("again", APP))
    results = unpin(store, APP, "docker.io/library/app:1")
    assert {ref: r.action for ref, r in results.items()} == {
        APP: "unpinned", "sha256:" + "a" * 64: "already-unpinned", "docker.io/library/app:1": "unpinned"}
    assert PIN_LABEL not in {img.name: img for img in store.list_images("k8s.io")}[APP].labels
    warning = results[APP].warning or ""
    assert warning.startswith("containerd will pin it again, at once and at its next start:")
    assert f"pinned_images.app in {CONFIG} and pinned_images.again in {CONFIG}" in warning
    # Only the record an entry names: containerd puts no label back on the others.
    assert results["sha256:" + "a" * 64].warning is None and results["docker.io/library/app:1"].warning is None
    assert unpin(store_with(pin("app", APP)), APP, dry_run=True)[APP].warning is not None


def test_unpin_outside_k8s_io_or_without_entries_warns_of_nothing() -> None:
    store = store_with()
    assert unpin(store, APP)[APP].warning is None
    moby = store_with(pin("app", APP))
    moby.add("moby", APP, "a", PIN)
    plan = pinning.make_plan([pinning.NamespaceView(moby, "moby")], "unpin", [APP])
    assert [r.warning for r in pinning.apply_plan(plan, False)] == [None]


def test_the_warning_goes_to_stderr_and_into_that_item_of_the_json(capsys: pytest.CaptureFixture[str]) -> None:
    results = [ItemResult("k8s.io", APP, "unpinned", warning="containerd will pin it again"),
               ItemResult("k8s.io", "example.test/other:1", "unpinned")]
    for fmt in FORMATS:
        buf = io.StringIO()
        output.print_results("unpin", results, "success", False, fmt, False, out=buf)
        err = capsys.readouterr().err
        assert f"pinctl: unpin {APP}: containerd will pin it again" in err
        assert "example.test/other:1: " not in err
        if fmt == "json":
            items = json.loads(buf.getvalue())["results"]
            assert items[0]["warning"] == "containerd will pin it again" and "warning" not in items[1]

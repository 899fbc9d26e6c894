"""The JSON envelope is a public contract (docs/json.md): these tests fail on any change to it."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta
from pathlib import Path

import pytest

from pinctl.model import Descriptor, ImageRow, ItemResult, Reason
from pinctl.render import columns, output

DOC = Path(__file__).resolve().parents[2] / "docs" / "json.md"
ROW = ImageRow(
    namespace="k8s.io",
    ref="example.test/app:1",
    image_id="sha256:" + "a" * 64,
    target=Descriptor("application/vnd.oci.image.manifest.v1+json", "sha256:" + "b" * 64, 400),
    size=1234,
    labels={"io.cri-containerd.pinned": "pinned", "z": "1"},
    pinned=True,
    reasons=[Reason("label", "example.test/app:1"), Reason("pattern", "example.test/*", "/etc/pinctl/config.toml:1")],
    drift="uncovered",
)


def render_ls() -> dict:
    buf = io.StringIO()
    output.print_images([ROW], [{"namespace": "k8s.io", "ref": "x", "message": "m"}], "json", False, out=buf)
    return json.loads(buf.getvalue())


def test_ls_envelope_keys_and_types() -> None:
    doc = render_ls()
    assert sorted(doc) == ["errors", "images", "pinctl_result_version"]
    assert doc["pinctl_result_version"] == 2
    [image] = doc["images"]
    # The keys are the declared columns' (pinctl.render.columns); each must be documented (test below).
    assert sorted(image) == columns.json_keys()
    assert {"id", "ref", "pinned", "reasons", "size"} <= set(image)
    assert image["source"] == "containerd" and image["config_labels"] is None
    assert isinstance(image["size"], int) and isinstance(image["pinned"], bool)
    assert image["reasons"] == [
        {"detail": "example.test/app:1", "kind": "label"},
        {"detail": "example.test/*", "kind": "pattern", "source": "/etc/pinctl/config.toml:1"},
    ]
    assert image["drift"] == "uncovered"
    assert doc["errors"] == [{"message": "m", "namespace": "k8s.io", "ref": "x"}]


def test_change_envelope_keys_and_types() -> None:
    buf = io.StringIO()
    results = [ItemResult("k8s.io", "example.test/app:1", "pinned"), ItemResult("", "x", "failed", "no image x")]
    output.print_results("pin", results, "partial", False, "json", False, out=buf)
    doc = json.loads(buf.getvalue())
    assert sorted(doc) == ["command", "dry_run", "pinctl_result_version", "results", "status"]
    assert doc["command"] == "pin" and doc["dry_run"] is False and doc["status"] == "partial"
    assert doc["results"][1] == {"action": "failed", "error": "no image x", "namespace": "", "ref": "x"}


def test_output_is_sorted_and_stable() -> None:
    buf = io.StringIO()
    output.print_images([ROW], [], "json", False, out=buf)
    text = buf.getvalue()
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"


def render_pin() -> dict:
    buf = io.StringIO()
    results = [ItemResult("k8s.io", "r", "unpinned"),
               ItemResult("k8s.io", "p", "unpinned", warning="containerd will pin it again")]
    output.print_results("unpin", results, "success", True, "json", False, out=buf)
    return json.loads(buf.getvalue())


def render_config() -> dict:
    from pinctl.config.loader import Config, PatternEntry
    from pinctl.config.settings import Settings

    cfg = Config(
        settings=Settings(),
        sources={"timeout": "default"},
        patterns=[PatternEntry("example.test/*", "/etc/pinctl/config.toml:1", "pinctl")],
        files=["/etc/pinctl/config.toml"],
    )
    buf = io.StringIO()
    output.print_config(cfg, "json", out=buf)
    return json.loads(buf.getvalue())


def render_lint() -> dict:
    from pinctl.pins.lint import Problem

    buf = io.StringIO()
    output.print_problems([Problem("unmatched", "x.example/*", "f:1", "matches nothing")], "json", out=buf)
    return json.loads(buf.getvalue())


def render_check() -> dict:
    from pinctl.backends.cri import CriImage, RuntimeVersion
    from pinctl.check.compare import check

    from pinctl.check.compare import judge_kubelet
    from pinctl.check.credentials import KubeletPolicy
    from pinctl.check.pull_records import RecordsRead

    result = check([ROW], [CriImage(ROW.image_id or "", (ROW.ref,), (), 1, False)],
                   RuntimeVersion("containerd", "1.7.24", "v1"), "unix:///run/containerd/containerd.sock")
    judge_kubelet(result, KubeletPolicy("AlwaysVerify", (), True, "/var/lib/kubelet/config.yaml"),
                  "/var/lib/kubelet/config.yaml", [], lambda ids, names: RecordsRead("/var/lib/kubelet/image_manager", True))
    buf = io.StringIO()
    output.print_check(result, "json", out=buf)
    return json.loads(buf.getvalue())


def test_check_envelope() -> None:
    doc = render_check()
    assert sorted(doc) == ["agree", "images", "kubelet", "pinctl_result_version", "runtime"]
    assert doc["agree"] is False and doc["runtime"]["name"] == "containerd"
    assert sorted(doc["kubelet"]) == ["allowlist", "feature_gate", "kubelet_config", "kubelet_problems", "policy",
                                      "policy_source", "records_dir", "warned_images"]
    [item] = doc["images"]
    assert sorted(item) == ["agrees", "cause", "cri_pinned", "fix", "id", "kubelet_checks", "reasons", "refs", "wanted"]
    assert item["wanted"] is True and item["cri_pinned"] is False and "not caught up" in item["cause"]
    [judged] = item["kubelet_checks"]
    assert sorted(judged) == ["fix", "image_name", "reason", "verdict", "why"]
    assert judged["verdict"] == "pulls" and judged["reason"] == "no-record"


def test_config_and_lint_envelopes() -> None:
    config = render_config()
    assert config["config"] == {"timeout": {"source": "default", "value": 2.0}}
    assert config["pinned_images"] == [{"dialect": "pinctl", "pattern": "example.test/*", "source": "/etc/pinctl/config.toml:1"}]
    assert render_lint()["problems"] == [{"kind": "unmatched", "message": "matches nothing", "pattern": "x.example/*", "source": "f:1"}]


def keys_of(value: object) -> set[str]:
    """Every key in a document, except inside the label maps, whose keys are the engine's data."""
    if isinstance(value, list):
        return set().union(*map(keys_of, value)) if value else set()
    if not isinstance(value, dict):
        return set()
    found = set(value)
    for key, child in value.items():
        if key not in ("labels", "config_labels"):
            found |= keys_of(child)
    return found


def test_every_emitted_key_is_documented_and_back() -> None:
    documented = set(re.findall(r"^\| `([a-z_]+)`", DOC.read_text(), flags=re.M))
    # `config` maps key names to their values: those names are the config keys, not contract keys.
    config_keys = {key for entry in render_config()["config"].values() for key in entry} | {"config"}
    emitted = keys_of(render_ls()) | keys_of(render_pin()) | keys_of(render_lint()) | keys_of(render_check()) | config_keys
    emitted |= keys_of({k: v for k, v in render_config().items() if k != "config"})
    emitted |= keys_of(render_gc_plan()) | keys_of(render_prune()) | keys_of(render_pull())
    emitted |= keys_of(render_import()) | keys_of(render_fleet_status())
    emitted |= keys_of(render_history())
    assert emitted == documented


def render_history() -> dict:
    from .test_history_table import render_history_json

    return render_history_json()


def render_import() -> dict:
    from pinctl.imports.run import ImportItem, ImportReport
    from pinctl.render import imports as import_output

    buf = io.StringIO()
    items = [ImportItem("/srv/images/app.tar", "example.test/app:1", "k8s.io", "imported", None, "pinned",
                        "sha256:" + "b" * 64, ("linux/amd64",), 4096),
             ImportItem("/srv/images/bad.tar", "", "k8s.io", "failed", "/srv/images/bad.tar: ../x: names a path "
                        "outside the archive root", size=10240)]
    import_output.print_import(ImportReport("containerd", items, 80.0), "json", buf)
    return json.loads(buf.getvalue())


def test_import_envelope() -> None:
    found = render_import()
    assert sorted(found) == ["command", "imports", "interrupted", "max_usage", "pinctl_result_version", "runtime",
                             "status"]
    assert found["command"] == "import" and found["status"] == "partial"
    assert found["imports"][0] == {"archive": "/srv/images/app.tar", "ref": "example.test/app:1", "namespace": "k8s.io",
                                   "action": "imported", "why": None, "pin": "pinned", "digest": "sha256:" + "b" * 64,
                                   "platforms": ["linux/amd64"], "size": 4096}
    assert found["imports"][1]["ref"] is None and found["imports"][1]["action"] == "failed"


def render_pull() -> dict:
    from pinctl.pull.run import PullItem, PullReport
    from pinctl.render import pull as pull_output

    buf = io.StringIO()
    items = [PullItem("example.test/app:1", "k8s.io", "pulled", None, "pinned", "sha256:" + "a" * 64, 10, 1)]
    pull_output.print_pull(PullReport("containerd", items, 80.0), "json", buf)
    return json.loads(buf.getvalue())


def test_pull_envelope() -> None:
    found = render_pull()
    assert found["command"] == "pull" and found["status"] == "success" and found["interrupted"] is False
    assert found["pulls"][0] == {"ref": "example.test/app:1", "namespace": "k8s.io", "action": "pulled", "why": None,
                                 "pin": "pinned", "image": "sha256:" + "a" * 64, "size": 10, "attempts": 1}


def render_gc_plan() -> dict:
    from pinctl.gc import plan as gc
    from pinctl.gc.kubelet import SourcedGcSettings
    from pinctl.gc.model import GcSettings
    from pinctl.render import gc as gc_output

    from .test_gc_refusals import RefusingDomain
    from .test_gc_service import NOW, node_images, row_for

    images, containers = node_images()
    rows = [row_for(images[0], Reason("label", images[0].refs[0]))]
    # A maximum age and a delete the runtime refuses: skipped_threshold and refused_because are set.
    domain = RefusingDomain({images[1].id: "Docker refuses to delete it"}, images, containers, 90)
    report = gc.gc_plan(domain, rows, SourcedGcSettings(GcSettings(max_age=timedelta(hours=1)), {}), NOW)
    buf = io.StringIO()
    gc_output.print_gc_plan(report, "json", buf)
    return json.loads(buf.getvalue())


def test_gc_plan_eviction_is_an_addition_without_a_version_change() -> None:
    """docs/json.md: new keys appear without a version change; `eviction` was one."""
    doc = render_gc_plan()
    assert doc["pinctl_result_version"] == 2
    evicting = doc["gc"]["eviction"]
    assert sorted(evicting) == ["at_risk", "config_source", "dedicated_imagefs", "deletes_now", "freed_bytes",
                                "kept_by_dead_containers", "met", "order", "signals"]
    assert sorted(evicting["signals"][0]) == ["available", "capacity", "filesystem", "fs_source",
                                              "grace_period_seconds", "hard", "met", "reclaims_images", "signal",
                                              "source", "threshold", "threshold_value"]
    # Its order entries are the plan's own.
    assert sorted(evicting["order"][0]) == sorted(doc["gc"]["order"][0])


def render_prune() -> dict:
    from pinctl.gc import plan as gc
    from pinctl.render import gc as gc_output

    buf = io.StringIO()
    gc_output.print_prune([gc.PruneItem("r", "sha256:" + "a" * 64, ("x",), "kept", 1, "why")], False, "json", buf)
    return json.loads(buf.getvalue())


def test_a_new_column_is_one_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = columns.Column("team", "TEAM", lambda row: row.labels.get("z"), lambda row, cell: row.labels.get("z", "-"))
    monkeypatch.setattr(columns, "LS_COLUMNS", (*columns.LS_COLUMNS, extra))
    assert render_ls()["images"][0]["team"] == "1"
    for fmt in ("table", "wide"):
        buf = io.StringIO()
        output.print_images([ROW], [], fmt, False, out=buf)
        header, line = buf.getvalue().splitlines()[:2]
        assert header.split()[-1] == "TEAM" and line.split()[-1] == "1", fmt


@pytest.mark.parametrize("fields", [
    {"images": [], "errors": []},
    {"images": [{"b": [1, {"c": "two\nlines"}], "a": {}}, {"q": []}], "errors": [{"m": "\u00e9"}],
     "status": "ok", "nothing": None, "nested": {"k": [1, 2]}},
])
def test_streamed_envelope_is_byte_for_byte_what_json_dumps_writes(fields: dict) -> None:
    """write_envelope writes lists an item at a time (memory at 10,000 images); the text must not
    change by it, from a list or from an iterator."""
    expected = json.dumps({"pinctl_result_version": output.RESULT_VERSION, **fields}, sort_keys=True, indent=2) + "\n"
    for images in (fields["images"], iter(fields["images"])):
        buf = io.StringIO()
        output.write_envelope(buf, **{**fields, "images": images})
        assert buf.getvalue() == expected


def render_fleet_status() -> dict:
    from datetime import datetime, timezone

    from pinctl.commands.fleet import FleetStatusReport
    from pinctl.fleet.condition import CONDITION_TYPE
    from pinctl.fleet.status import judge
    from pinctl.render.fleet import print_fleet_status

    now = datetime(2026, 12, 5, 12, 0, 0, tzinfo=timezone.utc)
    applied = {"metadata": {"name": "worker-1"}, "status": {
        "nodeInfo": {"containerRuntimeVersion": "containerd://1.7.24"},
        "conditions": [{"type": CONDITION_TYPE, "status": "True", "reason": "PolicyApplied",
                        "message": "revision 4be1c09d2f7a: 3 wanted, 2 pinned, 1 absent, 0 not kept",
                        "lastHeartbeatTime": "2026-12-05T11:59:20Z"}]}}
    bare = {"metadata": {"name": "worker-9"}, "status": {"nodeInfo": {"containerRuntimeVersion": "cri-o://1.34.0"}}}
    buf = io.StringIO()
    print_fleet_status(FleetStatusReport(judge([bare, applied], "4be1c09d2f7a", now), None, False), "json", out=buf)
    return json.loads(buf.getvalue())


def test_fleet_status_envelope() -> None:
    found = render_fleet_status()
    assert sorted(found) == ["all_applied", "nodes", "pinctl_result_version", "revision", "waited_seconds"]
    assert found["all_applied"] is False and found["revision"] == "4be1c09d2f7a" and found["waited_seconds"] is None
    assert found["nodes"][0] == {"node": "worker-1", "runtime": "containerd://1.7.24", "state": "applied",
                                 "applied": True, "revision": "4be1c09d2f7a", "why": None,
                                 "heartbeat_age_seconds": 40.0,
                                 "images": {"wanted": 3, "pinned": 2, "absent": 1, "not_kept": 0}}
    assert found["nodes"][1]["state"] == "no agent" and found["nodes"][1]["images"] is None

"""gc plan and prune in-process over a fake runtime: what is planned, kept, re-checked and
reported. The real runtimes and pods are in tests/integration/test_gc.py."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Optional, Sequence

import pytest

from pinctl.backends.cri import CriContainer, CriImage, RuntimeVersion
from pinctl.backends.cri import ImageFs as CriImageFs
from pinctl.commands.gc import PruneReport, prune_exit_code
from pinctl.errors import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, EngineError
from pinctl.gc import plan as gc
from pinctl.gc.estimate import ObservedContainer, ObservedImage
from pinctl.gc.kubelet import SourcedGcSettings
from pinctl.gc.model import GcImage, GcSettings, ImageFs
from pinctl.display import human_size
from pinctl.model import Descriptor, ImageRow, OutputFormat, Reason
from pinctl.render import gc as gc_output

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
OLD = NOW - timedelta(days=3)
MiB = 1024 * 1024


def image(name: str, size: int, created: datetime = OLD, pinned: bool = False) -> ObservedImage:
    return ObservedImage(f"sha256:{name * 8}"[:71], size, (f"example.test/{name}:1",), pinned, created)


class FakeDomain:
    name = "fake runtime"

    def __init__(self, images: list[ObservedImage], containers: list[ObservedContainer], used_percent: int) -> None:
        self.images = images
        self.containers = containers
        self.fs = ImageFs(100 * MiB, (100 - used_percent) * MiB)
        self.removed: list[str] = []
        self.fail: set[str] = set()
        self.late_users: dict[str, list[str]] = {}

    def observe(self, rows: Sequence[ImageRow]) -> gc.Observation:
        return gc.Observation(self.images, self.containers, self.fs, "statfs of /fake")

    def users_now(self, target: GcImage) -> list[str]:
        return self.late_users.get(target.id, [])

    def pinned_now(self, target: GcImage) -> Optional[bool]:
        return None if target.id in self.removed else False

    def remove(self, target: GcImage) -> None:
        if target.id in self.fail:
            raise EngineError("the runtime refused")
        self.removed.append(target.id)


def row_for(observed: ObservedImage, *reasons: Reason) -> ImageRow:
    target = Descriptor("m", "sha256:" + "f" * 64, 1)
    return ImageRow("k8s.io", observed.refs[0], observed.id, target, observed.size, {}, reasons=list(reasons))


def node_images() -> tuple[list[ObservedImage], list[ObservedContainer]]:
    images = [image("a", 10 * MiB), image("b", 10 * MiB), image("c", 10 * MiB), image("d", 10 * MiB, NOW),
              image("e", 10 * MiB, pinned=True), image("f", 10 * MiB)]
    containers = [ObservedContainer("c1", images[2].id, "exited", name="job")]
    return images, containers


def test_prune_plan_keeps_what_must_stay_and_deletes_in_the_kubelets_order() -> None:
    images, containers = node_images()
    domain = FakeDomain(images, containers, used_percent=90)
    rows = [row_for(images[1], Reason("pattern", "example.test/b:*", "config.toml:1"))]
    plan = gc.plan_prune(domain, rows, GcSettings(), gc.PruneRequest(all_unused=True), NOW)
    assert [i.id for i in plan.delete] == [images[0].id, images[5].id]
    kept = {i.id: why for i, why in plan.kept}
    assert "pattern example.test/b:*" in kept[images[1].id]
    assert "in use by job" in kept[images[2].id]
    assert "younger than the minimum age" in kept[images[3].id]
    assert "pinned by the runtime" in kept[images[4].id]


def test_an_image_mounted_as_a_volume_is_kept_by_gc_plan_and_prune() -> None:
    images, containers = node_images()
    # Mounted by ID (what the kubelet sets) and by tag (a CRI client may): prune keeps both,
    # gc plan protects the one the kubelet protects.
    containers = [*containers, ObservedContainer("c2", images[1].id, "running", name="reader",
                                                 image_mounts=(images[0].id, images[5].refs[0]))]
    domain = FakeDomain(images, containers, used_percent=90)
    plan = gc.plan_prune(domain, [], GcSettings(), gc.PruneRequest(all_unused=True), NOW)
    assert plan.delete == []
    kept = {i.id: why for i, why in plan.kept}
    assert "in use by reader" in kept[images[0].id] and "named by a container" in kept[images[5].id]
    sourced = SourcedGcSettings(GcSettings(), {})
    report = gc.gc_plan(domain, [], sourced, NOW)
    assert [e.image.id for e in report.plan.deletions] == [images[5].id]
    assert {p.image.id: [c.name for c in p.containers] for p in report.plan.protected}[images[0].id] == ["reader"]


def test_until_usage_stops_once_reached() -> None:
    images, containers = node_images()
    domain = FakeDomain(images, containers, used_percent=90)
    plan = gc.plan_prune(domain, [], GcSettings(), gc.PruneRequest(until_usage=85), NOW)
    assert [i.id for i in plan.delete] == [images[0].id]  # 10 MiB of 100 takes usage from 90% to 80%


def test_older_than_raises_the_minimum_age() -> None:
    images, containers = node_images()
    images[0] = image("a", 10 * MiB, NOW - timedelta(hours=1))
    domain = FakeDomain(images, containers, used_percent=90)
    plan = gc.plan_prune(domain, [], GcSettings(), gc.PruneRequest(all_unused=True, older_than=timedelta(days=1)), NOW)
    assert images[0].id not in [i.id for i in plan.delete]


def test_apply_rechecks_each_image_and_reports_every_item() -> None:
    images, containers = node_images()
    domain = FakeDomain(images, containers, used_percent=90)
    plan = gc.plan_prune(domain, [], GcSettings(), gc.PruneRequest(all_unused=True), NOW)
    domain.late_users[images[0].id] = ["late-container"]  # created after planning
    domain.fail.add(images[5].id)
    items = gc.apply_prune([plan], lambda _image: None, dry_run=False)
    actions = {item.image_id: (item.action, item.why) for item in items}
    assert actions[images[0].id] == ("kept", "in use since planning by late-container")
    assert actions[images[5].id][0] == "failed" and "refused" in (actions[images[5].id][1] or "")
    assert actions[images[1].id][0] == "removed" and domain.removed == [images[1].id]
    assert PruneReport(items, False).exit_code == EXIT_PARTIAL


@pytest.mark.parametrize(("actions", "policy_code", "named_code"), [
    (["removed", "removed"], EXIT_OK, EXIT_OK),
    (["would-remove"], EXIT_OK, EXIT_OK),  # a dry run exits as the prune would
    (["kept"], EXIT_OK, EXIT_ERROR),  # too young, pinned, in use: named, it is an item not done
    (["removed", "kept"], EXIT_OK, EXIT_PARTIAL),
    (["would-remove", "kept"], EXIT_OK, EXIT_PARTIAL),
    (["removed", "failed"], EXIT_PARTIAL, EXIT_PARTIAL),
    (["failed"], EXIT_PARTIAL, EXIT_ERROR),
    (["kept", "failed"], EXIT_PARTIAL, EXIT_ERROR),
    ([], EXIT_OK, EXIT_ERROR),  # nothing due is no failure; a name that led to no image is
])
def test_a_named_image_not_deleted_makes_the_exit_code(actions: list[gc.PruneAction], policy_code: int,
                                                       named_code: int) -> None:
    assert prune_exit_code(actions, named=False) == policy_code
    assert prune_exit_code(actions, named=True) == named_code


def test_a_named_prune_shows_each_kept_image_and_its_status_follows_the_exit_code(
        capsys: pytest.CaptureFixture[str]) -> None:
    images, containers = node_images()
    domain = FakeDomain(images, containers, used_percent=90)
    young, free = images[3], images[1]  # d is too young; b nothing keeps
    plan = gc.plan_prune(domain, [], GcSettings(), gc.PruneRequest(images=(young.id, free.id)), NOW)
    items = gc.apply_prune([plan], lambda _image: None, dry_run=False)
    report = PruneReport(items, False, [plan], named=True)
    assert {i.image_id: i.action for i in items} == {young.id: "kept", free.id: "removed"}
    assert report.exit_code == EXIT_PARTIAL
    out = io.StringIO()
    gc_output.print_prune(items, False, "table", out, plans=[plan], named=True)
    [kept] = [line for line in out.getvalue().splitlines() if line.startswith("kept")]
    assert "younger than the minimum age" in kept
    assert "-o wide says why" not in capsys.readouterr().err
    out = io.StringIO()
    gc_output.print_prune([i for i in items if i.action == "kept"], False, "json", out, named=True)
    assert json.loads(out.getvalue())["status"] == "error"


def test_a_label_found_at_recheck_keeps_the_image() -> None:
    images, containers = node_images()
    domain = FakeDomain(images, containers, used_percent=90)
    plan = gc.plan_prune(domain, [], GcSettings(), gc.PruneRequest(all_unused=True), NOW)
    items = gc.apply_prune([plan], lambda target: "pin label since planning" if target.id == images[0].id else None,
                           dry_run=False)
    assert ("kept", "pin label since planning") in {(i.action, i.why) for i in items if i.image_id == images[0].id}
    assert images[0].id not in domain.removed


def test_dry_run_deletes_nothing() -> None:
    images, containers = node_images()
    domain = FakeDomain(images, containers, used_percent=90)
    plan = gc.plan_prune(domain, [], GcSettings(), gc.PruneRequest(all_unused=True), NOW)
    items = gc.apply_prune([plan], lambda _image: None, dry_run=True)
    assert domain.removed == [] and {i.action for i in items} == {"kept", "would-remove"}


def test_gc_plan_flags_a_wanted_image_the_runtime_would_delete() -> None:
    images, containers = node_images()
    domain = FakeDomain(images, containers, used_percent=90)
    rows = [row_for(images[0], Reason("label", images[0].refs[0]))]
    sourced = SourcedGcSettings(GcSettings(), {"high_threshold_percent": "kubelet default"})
    report = gc.gc_plan(domain, rows, sourced, NOW)
    assert [risk.image.id for risk in report.plan.wanted_deleted] == [images[0].id]
    assert report.exit_code == EXIT_ERROR
    calm = gc.gc_plan(domain, rows, sourced, NOW, usage=50)
    assert calm.plan.at_risk and not calm.plan.wanted_deleted and calm.exit_code == EXIT_OK


def test_gc_plan_json_envelope() -> None:
    images, containers = node_images()
    domain = FakeDomain(images, containers, used_percent=90)
    sourced = SourcedGcSettings(GcSettings(), {"high_threshold_percent": "kubelet default"})
    out = io.StringIO()
    gc_output.print_gc_plan(gc.gc_plan(domain, [], sourced, NOW), "json", out)
    doc = json.loads(out.getvalue())
    assert sorted(doc) == ["gc", "pinctl_result_version"]
    body = doc["gc"]
    assert sorted(body) == ["amount_to_free", "at_risk", "eviction", "filesystem", "freed_bytes", "kubelet_started",
                            "kubelet_started_source", "message", "mode", "now", "order", "outcome", "protected",
                            "refusals_source", "runtime", "settings", "simulated", "skipped_threshold", "ties",
                            "usage_percent"]
    assert body["settings"]["high_threshold_percent"] == {"value": 85, "source": "kubelet default"}
    assert sorted(body["order"][0]) == ["deleted", "fate", "first_detected", "first_detected_source", "id",
                                        "last_used", "last_used_source", "position", "refs", "refused_because",
                                        "running_total", "size", "tie", "tie_group"]
    assert sorted(body["protected"][0]) == ["containers", "eligible_at", "id", "reasons", "refs", "size"]


def test_prune_json_envelope() -> None:
    item = gc.PruneItem("fake runtime", "sha256:" + "a" * 64, ("example.test/a:1",), "removed", 10, None)
    out = io.StringIO()
    gc_output.print_prune([item], False, "json", out)
    doc = json.loads(out.getvalue())
    assert sorted(doc) == ["command", "dry_run", "freed_bytes", "pinctl_result_version", "results", "status"]
    assert doc["results"] == [{"action": "removed", "id": item.image_id, "refs": ["example.test/a:1"],
                               "runtime": "fake runtime", "size": 10, "why": None}]
    assert doc["freed_bytes"] == 10 and doc["status"] == "success"


def test_gc_plan_fits_an_80_column_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    from .test_output import Terminal

    monkeypatch.setenv("COLUMNS", "80")
    images, containers = node_images()
    long_why = Reason("pattern", "example.test/a-rather-long-team-name/with-a-deep-path/*", "/etc/pinctl/config.d/x.toml:3")
    rows = [row_for(images[0], long_why)]
    domain = FakeDomain(images, containers, used_percent=90)
    sourced = SourcedGcSettings(GcSettings(), {"high_threshold_percent": "/var/lib/kubelet/config.yaml imageGC"
                                                                         "HighThresholdPercent"})
    out = Terminal()
    gc_output.print_gc_plan(gc.gc_plan(domain, rows, sourced, NOW), "table", out)
    lines = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()).splitlines()
    assert lines and all(len(line) <= 80 for line in lines), "\n".join(line for line in lines if len(line) > 80)
    assert any(line.startswith("DELETION ORDER") for line in lines)


def test_wanted_joins_rows_by_image_id_manifest_digest_or_name() -> None:
    digest = "sha256:" + "d" * 64

    def row(ref: str, image_id: Optional[str], target: str, *reasons: Reason) -> ImageRow:
        return ImageRow("k8s.io", ref, image_id, Descriptor("m", target, 1), 1, {}, reasons=list(reasons))

    rows = [row("example.test/a:1", "sha256:aa", "sha256:" + "1" * 64, Reason("label", "example.test/a:1")),
            row("example.test/b:1", None, digest, Reason("pattern", "example.test/b*", "cfg:1")),
            row("example.test/c:1", "sha256:cc", "sha256:" + "3" * 64, Reason("pattern", "*c*", "cfg:2")),
            row("example.test/d:1", "sha256:dd", "sha256:" + "4" * 64, Reason("sandbox", "x"))]
    images = [ObservedImage("sha256:aa", 1, ("example.test/a:1",)),
              ObservedImage("sha256:bb", 1, (f"example.test/b@{digest}",)),
              ObservedImage("sha256:other", 1, ("example.test/c:1",)),
              ObservedImage("sha256:none", 1, ("example.test/z:1",))]
    assert gc.wanted_by_pinctl(images, rows) == {
        "sha256:aa": "pin label on example.test/a:1",
        "sha256:bb": "pattern example.test/b*",
        "sha256:other": "pattern *c*",
    }


# -- prune --dry-run says why nothing goes, and lists in the plan's order ----------------------


def test_a_dry_run_lists_what_goes_then_what_stays_in_the_kubelets_order() -> None:
    images, containers = node_images()
    domain = FakeDomain(images, containers, used_percent=90)
    plan = gc.plan_prune(domain, [], GcSettings(), gc.PruneRequest(all_unused=True), NOW)
    items = gc.apply_prune([plan], lambda _image: None, dry_run=True)
    actions = [item.action for item in items]
    assert actions == sorted(actions, key=lambda action: action != "would-remove")  # what goes first
    kept = [item.image_id for item in items if item.action == "kept"]
    by_id = {p.image.id: p for p in plan.plan.protected}
    keys = [gc.gcmodel.eviction_key(by_id[k].image) for k in kept]
    assert keys == sorted(keys) and len(kept) == 3


def prune_summary(capsys: pytest.CaptureFixture[str], used_percent: int, request: gc.PruneRequest,
                  images: Optional[list[ObservedImage]] = None) -> str:
    found, containers = node_images()
    domain = FakeDomain(images if images is not None else found, containers, used_percent=used_percent)
    plan = gc.plan_prune(domain, [], GcSettings(), request, NOW)
    items = gc.apply_prune([plan], lambda _image: None, dry_run=True)
    gc_output.print_prune(items, True, "table", io.StringIO(), plans=[plan])
    return capsys.readouterr().err


def test_a_dry_run_below_the_target_says_so_and_names_what_could_go(capsys: pytest.CaptureFixture[str]) -> None:
    said = prune_summary(capsys, 71, gc.PruneRequest())
    lines = said.splitlines()
    assert lines[0] == "pinctl: prune (dry run): nothing would go (3 kept): usage is 71%, at or below the target of 80%"
    assert lines[1].startswith("pinctl: 3 images could go with --all-unused: example.test/")
    assert len(lines[0]) <= 100 and len(lines) == 2


def test_a_dry_run_where_everything_is_protected_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    pinned = [image("p", MiB, pinned=True), image("q", MiB, pinned=True)]
    said = prune_summary(capsys, 95, gc.PruneRequest(), pinned)
    assert said == "pinctl: prune (dry run): nothing would go (2 kept; -o wide says why): every image is protected\n"
    young = [image("y", MiB, NOW)]
    said = prune_summary(capsys, 95, gc.PruneRequest(), young)
    assert "what nothing protects is younger than the minimum age (2m)" in said


# -- prune: what goes in the table, what stays in one line; the confirmation fits the window ---


def pruned(capsys: pytest.CaptureFixture[str], fmt: OutputFormat, dry_run: bool = False) -> tuple[list[str], str]:
    found, containers = node_images()
    domain = FakeDomain(found, containers, used_percent=90)
    plan = gc.plan_prune(domain, [], GcSettings(), gc.PruneRequest(all_unused=True), NOW)
    items = gc.apply_prune([plan], lambda _image: None, dry_run=dry_run)
    out = io.StringIO()
    gc_output.print_prune(items, dry_run, fmt, out, plans=[plan])
    return out.getvalue().splitlines(), capsys.readouterr().err


def test_a_prune_lists_what_went_and_counts_what_stayed(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30: a prune that removed one image printed fourteen 'kept' lines. The table holds what
    went; the kept images are a count, and -o wide (or JSON) lists each with its reason."""
    lines, err = pruned(capsys, "table")
    actions = [line.split()[0] for line in lines[1:]]
    assert actions and set(actions) == {"removed"}, lines
    assert len(actions) == 3  # a, b and f; c is used, d too young, e pinned
    assert err == f"pinctl: prune: 3 images removed, {human_size(30 * MiB)} freed; 3 kept; -o wide says why\n"
    wide, err = pruned(capsys, "wide")
    assert [line.split()[0] for line in wide[1:]].count("kept") == 3
    assert err.endswith("; 3 kept\n")
    _, err = pruned(capsys, "table", dry_run=True)
    assert err.startswith(f"pinctl: prune (dry run): 3 images would go, freeing {human_size(30 * MiB)}; 3 kept")


def test_the_confirmation_names_images_in_the_right_number_and_fits_the_window(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from .test_output import Terminal

    monkeypatch.setenv("COLUMNS", "80")
    found, containers = node_images()
    domain = FakeDomain(found, containers, used_percent=90)
    domain.name = "containerd 1.7.24~ds1 at unix:///tmp/pinctl-sandbox/s/containerd.sock"
    plan = gc.plan_prune(domain, [], GcSettings(), gc.PruneRequest(all_unused=True), NOW)
    err = Terminal()
    gc_output.print_prune_plan([plan], err)
    lines = err.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert len(lines) == 5, lines  # the header folded onto two lines, one line an image
    assert " ".join(line.strip() for line in lines[:2]).endswith(f"every unused image: 3 images, {human_size(30 * MiB)}")
    assert [line.split()[0] for line in lines[2:]] == ["delete"] * 3


def plan_lines(rows: list[ImageRow], images: list[ObservedImage], containers: list[ObservedContainer],
               fmt: str = "table", **settings: object) -> list[str]:
    domain = FakeDomain(images, containers, used_percent=90)
    out = io.StringIO()
    report = gc.gc_plan(domain, rows, SourcedGcSettings(GcSettings(**settings), {}), NOW)  # type: ignore[arg-type]
    gc_output.print_gc_plan(report, fmt, out)  # type: ignore[arg-type]
    return out.getvalue().splitlines()


@pytest.mark.parametrize("fmt", ["table", "wide"])
def test_gc_plan_gives_each_image_one_verdict(fmt: str) -> None:
    """What the run does with an image shows once: in the deletion order (a wanted one marked at
    risk) or under PROTECTED, never both, whatever it is (too young, wanted, in use); the wanted
    table says why pinctl wants it, not again what happens to it."""
    images, containers = node_images()
    sandbox, young = image("s", 10 * MiB, NOW), images[3]
    used = ObservedContainer("c2", images[5].id, "running", name="web")
    rows = [row_for(sandbox, Reason("sandbox", sandbox.refs[0])), row_for(images[5], Reason("pattern", "x/*", "f:1"))]
    lines = plan_lines(rows, [*images, sandbox], [*containers, used], fmt)
    text = "\n".join(lines)
    tables = text.split("\n\n")
    order, protected, wanted = (next(t for t in tables if t.startswith(head)) for head in (
        "DELETION ORDER", "PROTECTED", "WANTED BUT NOT PINNED BY THE RUNTIME"))
    def names(table: str) -> set[str]:
        return {word for line in table.splitlines() for word in line.split()}

    for name in (sandbox.refs[0], young.refs[0], images[5].refs[0], images[2].refs[0]):
        assert (name in names(order)) != (name in names(protected)), (name, text)
    [sandbox_line] = [line for line in order.splitlines() if sandbox.refs[0] in line]
    assert "skipped: too young until 2026-11-30T12:02:00Z" in sandbox_line and sandbox_line.endswith("at risk")
    assert "in use by web" in protected
    assert [line.split()[-1] for line in wanted.splitlines()[2:]] == ["image", "x/*"]
    assert "deleted" not in wanted and "too young" not in wanted


def test_below_the_threshold_the_table_still_shows_what_goes_first_and_protected_by_name() -> None:
    """Nothing goes at 50%: the order's head is shown all the same, and PROTECTED reads the
    same on every run (by name; JSON keeps the kubelet's order)."""
    images = [image(name, 10 * MiB, pinned=name in "zyx") for name in "abcdezyx"]
    domain = FakeDomain(images, [], used_percent=50)
    sourced = SourcedGcSettings(GcSettings(), {})
    out = io.StringIO()
    gc_output.print_gc_plan(gc.gc_plan(domain, [], sourced, NOW), "table", out)
    text = out.getvalue()
    order = text.split("DELETION ORDER", 1)[1].split("\n\n", 1)[0].splitlines()
    assert order[0] == f": {gc_output.FIRST_IN_LINE} of 5 (-o wide lists all)"
    assert [line.split()[1] for line in order[2:]] == ["example.test/a:1", "example.test/b:1", "example.test/c:1"]
    protected = text.split("PROTECTED\n", 1)[1].splitlines()[1:]
    assert [line.split()[0] for line in protected] == ["example.test/x:1", "example.test/y:1", "example.test/z:1"]


def test_prune_of_named_images_deletes_only_those_and_keeps_a_protected_one() -> None:
    images, containers = node_images()
    domain = FakeDomain(images, containers, used_percent=10)  # far below any threshold
    settings = GcSettings()
    named = gc.plan_prune(domain, [], settings, gc.PruneRequest(images=("example.test/b:1", "sha256:0000")), NOW)
    assert [image.refs for image in named.delete] == [("example.test/b:1",)]
    assert named.matched == {"example.test/b:1"} and named.kept == []
    # A pinned one, one a container uses and one too young are named, and kept, each with why.
    kept = gc.plan_prune(domain, [], settings, gc.PruneRequest(images=(
        "example.test/e:1", "example.test/c:1", images[3].id[:19])), NOW)
    assert kept.delete == []
    why = {image.refs[0]: text for image, text in kept.kept}
    assert set(why) == {"example.test/c:1", "example.test/d:1", "example.test/e:1"}
    assert "pinned by the runtime" in why["example.test/e:1"] and "in use by job" in why["example.test/c:1"]
    assert "younger than the minimum age" in why["example.test/d:1"]


class ListingRuntime:
    """A CRI runtime that says which listing it answered, in order."""

    endpoint = "unix:///nonexistent/pinctl-test/cri.sock"  # served by no process: paths stay as given

    def __init__(self, mountpoint: str) -> None:
        self.mountpoint = mountpoint
        self.asked: list[str] = []

    def image_fs_info(self) -> list[CriImageFs]:
        self.asked.append("fs")
        return [CriImageFs(self.mountpoint, 0)]

    def list_images(self) -> list[CriImage]:
        self.asked.append("images")
        return [CriImage("sha256:" + "a" * 64, ("example.test/app:1",), (), 10, False)]

    def list_containers(self) -> list[CriContainer]:
        self.asked.append("containers")
        return [CriContainer("c1", "app", "pod", "example.test/app:1", "example.test/app:1", "sha256:" + "a" * 64,
                             "running", 1.0)]


def test_a_cri_domain_observes_the_lists_it_took_before_the_records(tmp_path: Path) -> None:
    """gc plan takes the CRI's lists before the node's records are read (they come sooner);
    observe then reads the image filesystem alone, and sees what was taken."""
    runtime = ListingRuntime(str(tmp_path))
    domain = gc.CriDomain(runtime, RuntimeVersion("containerd", "v2.4.2", "v1"))  # type: ignore[arg-type]
    domain.take_listings()
    seen = domain.observe([])
    assert runtime.asked == ["images", "containers", "fs"]
    assert [image.id for image in seen.images] == ["sha256:" + "a" * 64]
    assert [c.id for c in seen.containers] == ["c1"]
    # Without a take, observe lists them itself, each time.
    domain.observe([])
    assert runtime.asked[3:] == ["fs", "images", "containers"]

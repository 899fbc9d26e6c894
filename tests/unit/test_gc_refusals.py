"""Deletes the runtime refuses, in the kubelet's GC model: a refusal in the maximum-age step ends
the run before its threshold step; one in the threshold step is passed over and the walk goes on.
Read from kubelet v1.37.2's image_gc_manager.go (freeOldImages, freeSpace, GarbageCollect)."""

from __future__ import annotations

import io
import json
import pathlib
from datetime import datetime, timedelta
from itertools import permutations
from typing import Sequence

import pytest

from pinctl.backends.docker import DockerContainer
from pinctl.gc import plan as gc
from pinctl.gc import refusals
from pinctl.gc.estimate import ObservedImage
from pinctl.gc.kubelet import SourcedGcSettings
from pinctl.gc.model import (
    AGE_REFUSED_MESSAGE,
    Fate,
    GcPlan,
    GcSettings,
    Outcome,
    go_duration,
)
from pinctl.model import ImageRow
from pinctl.node import crio_storage
from pinctl.render import gc as gc_output

from .test_gc_service import NOW as SERVICE_NOW
from .test_gc_service import FakeDomain, image, node_images
from .test_gcmodel import HOUR, MINUTE, fs_used, img, run

WHY = "Docker refuses: container web (exited, not Kubernetes') uses it"
AGED = GcSettings(85, 80, max_age=HOUR)


def fates(plan: GcPlan) -> dict[str, Fate]:
    return {entry.image.id: entry.fate for entry in plan.order}


def test_a_refusal_in_the_age_step_ends_the_run_before_the_threshold_step() -> None:
    images = [img("old-a", 100, used_ago=3 * HOUR), img("old-b", 100, used_ago=2 * HOUR),
              img("recent-c", 3000, used_ago=30 * MINUTE), img("recent-d", 3000, used_ago=20 * MINUTE)]
    plan = run(images, gc=AGED, fs=fs_used(92), refusals={"old-a": WHY})
    # Every image past the maximum age is tried: the refused one fails, the other goes.
    assert fates(plan) == {"old-a": Fate.REFUSED_AGE, "old-b": Fate.DELETED_AGE,
                           "recent-c": Fate.NOT_REACHED, "recent-d": Fate.NOT_REACHED}
    assert plan.outcome is Outcome.AGE_STEP_REFUSED
    # The kubelet logs no usage line: its threshold step does not run this round.
    assert plan.amount_to_free is None and plan.threshold_usage_percent is None
    assert plan.kubelet_message == "wanted to free images older than 1h0m0s, encountered errors in image deletion: "
    assert [entry.image.id for entry in plan.refused] == ["old-a"]
    assert plan.freed_bytes == 100 and plan.enough is False
    # What it would have freed: from the same usage figure, over what the age step left.
    skipped = plan.skipped_threshold
    assert skipped is not None
    assert (skipped.usage_percent, skipped.amount_to_free) == (92, 1200)
    assert skipped.would_delete == ("recent-c",) and skipped.would_free_bytes == 3000 and skipped.enough
    refused = next(entry for entry in plan.order if entry.image.id == "old-a")
    assert refused.refused_because == WHY and refused.sequence is None and not refused.fate.deleted


def test_below_the_high_threshold_a_refused_age_step_skips_nothing_more() -> None:
    plan = run([img("old", used_ago=3 * HOUR), img("new", used_ago=MINUTE)], gc=AGED, fs=fs_used(50),
               refusals={"old": WHY})
    assert plan.outcome is Outcome.AGE_STEP_REFUSED and plan.skipped_threshold is None and plan.enough


def test_the_skipped_threshold_step_would_also_have_fallen_short() -> None:
    plan = run([img("old", 100, used_ago=3 * HOUR), img("recent", 200, used_ago=30 * MINUTE)], gc=AGED,
               fs=fs_used(95), refusals={"old": WHY})
    skipped = plan.skipped_threshold
    assert skipped is not None and skipped.would_delete == ("recent",) and not skipped.enough


def test_without_a_refusal_the_age_step_and_threshold_step_run_as_before() -> None:
    images = [img("old-a", 100, used_ago=3 * HOUR), img("recent-c", 3000, used_ago=30 * MINUTE)]
    plan = run(images, gc=AGED, fs=fs_used(92), refusals={"recent-c": WHY})
    # The refused image is not past the maximum age: the age step deletes old-a, the threshold
    # step tries recent-c, is refused, and has nothing else to walk.
    assert fates(plan) == {"old-a": Fate.DELETED_AGE, "recent-c": Fate.REFUSED_SPACE}
    assert plan.outcome is Outcome.SPACE_STEP_REFUSED and plan.amount_to_free == 1200
    assert plan.kubelet_message == ("wanted to free 1200 bytes, but freed 0 bytes space with errors in image "
                                    "deletion: ")
    assert plan.enough is False


def test_the_threshold_step_walks_past_a_refused_image_and_counts_nothing_for_it() -> None:
    images = [img("a", 500, age=5 * HOUR), img("b", 800, age=4 * HOUR), img("c", 800, age=3 * HOUR),
              img("d", 800, age=2 * HOUR)]
    plan = run(images, fs=fs_used(90), refusals={"b": WHY})
    # amountToFree 1000: a (500) and, b refused, c (800) reach it; d is not reached.
    assert fates(plan) == {"a": Fate.DELETED_SPACE, "b": Fate.REFUSED_SPACE, "c": Fate.DELETED_SPACE,
                           "d": Fate.NOT_REACHED}
    assert [e.image.id for e in plan.deletions] == ["a", "c"] and plan.space_freed_bytes == 1300
    # Enough was freed, but the run still ends in the error, not in success (and never in
    # FreeDiskSpaceFailed): the kubelet returns freeSpace's error before its shortfall check.
    assert plan.outcome is Outcome.SPACE_STEP_REFUSED and plan.enough
    assert plan.kubelet_message is not None and plan.kubelet_message.startswith("wanted to free 1000 bytes, but freed 1300")
    # A refused image not reached still says why a delete would fail.
    assert next(e for e in plan.order if e.image.id == "b").refused_because == WHY


def test_a_refused_image_the_walk_never_reaches_changes_nothing() -> None:
    images = [img("a", 2000, age=5 * HOUR), img("b", 800, age=4 * HOUR)]
    plain, refused = run(images, fs=fs_used(90)), run(images, fs=fs_used(90), refusals={"b": WHY})
    assert refused.outcome is plain.outcome is Outcome.FREED_ENOUGH
    assert fates(refused) == fates(plain) and refused.kubelet_message is None
    assert next(e for e in refused.order if e.image.id == "b").refused_because == WHY


def test_delete_unused_images_passes_a_refused_image_and_deletes_the_rest() -> None:
    images = [img("a", 100, age=5 * HOUR), img("b", 100, age=4 * HOUR), img("c", 100, age=3 * HOUR)]
    plan = run(images, fs=fs_used(50), mode="all_unused", refusals={"b": WHY})
    assert fates(plan) == {"a": Fate.DELETED_SPACE, "b": Fate.REFUSED_SPACE, "c": Fate.DELETED_SPACE}
    assert plan.outcome is Outcome.ALL_UNUSED
    assert plan.kubelet_message == (f"wanted to free {(1 << 63) - 1} bytes, but freed 200 bytes space with errors in "
                                    "image deletion: ")


def test_a_refused_image_too_young_for_the_threshold_step_is_skipped_before_any_delete() -> None:
    plan = run([img("young", 5000, age=MINUTE), img("old", 100, age=5 * HOUR)], fs=fs_used(90),
               refusals={"young": WHY})
    assert fates(plan)["young"] is Fate.TOO_YOUNG and plan.outcome is Outcome.SHORTFALL


def test_a_tie_with_a_refused_member_frees_only_what_its_other_members_hold() -> None:
    # Four never-used images the kubelet ranks equal; amountToFree 1000; one of them refused.
    images = [img(name, 400, age=5 * HOUR) for name in ("t1", "t2", "t3", "t4")]
    plan = run(images, fs=fs_used(90), refusals={"t1": WHY})
    (tie,) = plan.ties
    assert tie.straddled and (tie.deleted_min, tie.deleted_max) == (3, 3)
    assert (tie.freed_min, tie.freed_max) == (1200, 1200)
    # Brute force: in every order the kubelet may walk, three go and t1 stays; whether the walk
    # tries t1 before it stops (and so ends in an error) depends on the order: hence straddled.
    tried = set()
    for order in permutations(["t1", "t2", "t3", "t4"]):
        freed, gone, attempted = 0, [], False
        for name in order:
            if name == "t1":
                attempted = True
                continue
            gone.append(name)
            freed += 400
            if freed >= 1000:
                break
        assert len(gone) == 3 and "t1" not in gone
        tried.add(attempted)
    assert tried == {True, False}


@pytest.mark.parametrize(("value", "text"), [
    (timedelta(minutes=4), "4m0s"), (HOUR, "1h0m0s"), (timedelta(seconds=90), "1m30s"), (timedelta(seconds=30), "30s"),
    (timedelta(hours=168), "168h0m0s"), (timedelta(seconds=1.5), "1.5s"), (timedelta(milliseconds=250), "250ms"),
    (timedelta(0), "0s"),
])
def test_durations_read_as_go_prints_them(value: timedelta, text: str) -> None:
    assert go_duration(value) == text


def test_the_age_message_names_the_maximum_age_as_the_kubelet_does() -> None:
    assert AGE_REFUSED_MESSAGE.format(max_age=go_duration(timedelta(minutes=4))).startswith(
        "wanted to free images older than 4m0s, encountered errors in image deletion")


# --- gc plan and prune over a fake runtime that refuses ------------------------------------------


class RefusingDomain(FakeDomain):
    """FakeDomain whose runtime refuses to delete some images, as cri-dockerd does."""

    def __init__(self, refused: dict[str, str], *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.refused = refused

    def observe(self, rows: Sequence[ImageRow]) -> gc.Observation:
        seen = super().observe(rows)
        return gc.Observation(seen.images, seen.containers, seen.fs, seen.fs_source, refusals=self.refused,
                              refusals_source="Docker's containers at unix:///run/docker.sock, outside the CRI's")


def refusing_node() -> tuple[RefusingDomain, list[ObservedImage]]:
    images, containers = node_images()
    # a (the oldest, in the order first) is refused; usage 90% calls for the threshold step.
    domain = RefusingDomain({images[0].id: WHY}, images, containers, 90)
    return domain, images


def planned(settings: GcSettings, now: datetime = SERVICE_NOW) -> tuple[gc.GcReport, list[ObservedImage]]:
    domain, images = refusing_node()
    return gc.gc_plan(domain, [], SourcedGcSettings(settings, {}), now), images


def test_gc_plan_says_the_threshold_step_is_skipped_in_the_table_wide_and_json(
        capsys: pytest.CaptureFixture[str]) -> None:
    report, images = planned(GcSettings(85, 80, max_age=HOUR))
    plan = report.plan
    assert plan.outcome is Outcome.AGE_STEP_REFUSED and plan.skipped_threshold is not None
    table = io.StringIO()
    gc_output.print_gc_plan(report, "table", table)
    text = table.getvalue()
    assert "before its threshold step" in text and "Skipped:" in text and "does not run this round" in text
    assert "delete refused (past the maximum age)" in text and WHY in text
    assert "its threshold step does not run this round" in capsys.readouterr().err
    wide = io.StringIO()
    gc_output.print_gc_plan(report, "wide", wide)
    assert "Refusals:    Docker's containers at unix:///run/docker.sock" in wide.getvalue()
    out = io.StringIO()
    gc_output.print_gc_plan(report, "json", out)
    doc = json.loads(out.getvalue())["gc"]
    assert doc["outcome"] == "age_step_refused" and doc["amount_to_free"] is None
    entry = next(e for e in doc["order"] if e["id"] == images[0].id)
    assert (entry["fate"], entry["deleted"], entry["refused_because"]) == ("refused_age", False, WHY)
    skipped = doc["skipped_threshold"]
    assert skipped["usage_percent"] == 90 and skipped["would_free_bytes"] == sum(
        e["size"] for e in doc["order"] if e["id"] in skipped["would_delete"])
    # pinctl counts every unused image as never used: past the maximum age, taken by the age step.
    assert skipped["would_delete"] == [] and skipped["enough"] is False
    assert "pinctl sees nothing it would free beyond the age step" in text
    assert doc["message"].startswith("wanted to free images older than 1h0m0s")
    assert doc["refusals_source"].startswith("Docker's containers")


def test_gc_plan_without_a_maximum_age_walks_past_the_refused_image() -> None:
    report, images = planned(GcSettings(85, 80))
    plan = report.plan
    assert plan.outcome is Outcome.SPACE_STEP_REFUSED and plan.skipped_threshold is None
    fate = {entry.image.id: entry.fate for entry in plan.order}
    assert fate[images[0].id] is Fate.REFUSED_SPACE
    assert images[0].id not in {entry.image.id for entry in plan.deletions} and plan.deletions


def test_prune_keeps_what_the_runtime_refuses_and_frees_the_rest_instead() -> None:
    domain, images = refusing_node()
    plan = gc.plan_prune(domain, [], GcSettings(), gc.PruneRequest(), SERVICE_NOW)
    assert images[0].id not in [i.id for i in plan.delete] and plan.delete
    kept = dict((i.id, why) for i, why in plan.kept)
    assert WHY in kept[images[0].id]
    items = gc.apply_prune([plan], lambda _image: None, dry_run=True)
    assert {item.image_id: item.action for item in items}[images[0].id] == "kept"
    # Nothing it claims to free is the refused image's.
    assert images[0].id not in {item.image_id for item in items if item.action == "would-remove"}


def test_docker_refuses_images_of_containers_outside_kubernetes_in_any_state() -> None:
    images = [image("a", 10), image("b", 10), image("c", 10), image("d", 10)]
    outside = [DockerContainer("1" * 64, "web", "example.test/a:1", images[0].id, "exited", None),
               DockerContainer("2" * 64, "cron", "example.test/a:1", images[0].id, "running", None),
               DockerContainer("3" * 64, "old", "example.test/b:1", "", "created", None),  # no ID: by name
               DockerContainer("4" * 64, "gone", "example.test/x:1", "sha256:" + "9" * 64, "exited", None)]
    found, source = refusals.predicted("docker", images, docker=outside, where="unix:///run/docker.sock")
    assert set(found) == {images[0].id, images[1].id}
    assert found[images[0].id] == ("Docker refuses to delete it: containers cron (running), web (exited) use it "
                                   "and are none of the CRI's containers (cri-dockerd does not force)")
    assert "container old (created)" in found[images[1].id]
    assert source.startswith("Docker's containers at unix:///run/docker.sock")
    assert refusals.predicted("docker", images)[1].startswith("not read")
    assert refusals.predicted("containerd", images) == ({}, refusals.CONTAINERD_NONE)


def test_crio_refuses_images_of_storage_containers_the_cri_does_not_list(tmp_path: pathlib.Path) -> None:
    images = [ObservedImage("a" * 64, 10, ("example.test/a:1",), False, None),
              ObservedImage("b" * 64, 10, ("example.test/b:1",), False, None)]
    root = tmp_path / "storage"
    (root / "overlay-images").mkdir(parents=True)
    (root / "overlay-containers").mkdir()
    (root / "overlay-containers" / "containers.json").write_text(json.dumps([
        {"id": "1" * 64, "names": ["k8s_main_pod_default_uid_0"], "image": "a" * 64, "layer": "x"},
        {"id": "2" * 64, "names": ["build-box"], "image": "b" * 64, "layer": "y"},
        {"id": "3" * 64, "image": ""},  # a container of no image (buildah from scratch)
        "not a record"]))
    (root / "overlay-containers" / "volatile-containers.json").write_text(json.dumps([
        {"id": "4" * 64, "names": ["k8s_POD_pod_default_uid_0"], "image": "b" * 64}]))
    stored = crio_storage.storage_containers(str(root / "overlay-images"))
    assert stored is not None and [c.id[0] for c in stored] == ["1", "2", "4"]
    # The CRI lists container 1 (it protects its image, as in the kubelet); 2 and 4 it does not.
    outside = [c for c in stored if c.id != "1" * 64]
    found, source = refusals.predicted("cri-o", images, storage=outside, where=str(root))
    assert set(found) == {"b" * 64}
    assert "storage containers build-box, k8s_POD_pod_default_uid_0 use it" in found["b" * 64]
    assert source == f"containers/storage's containers in {root}, outside the CRI's"
    assert crio_storage.storage_containers(str(tmp_path / "elsewhere")) is None
    assert refusals.predicted("cri-o", images) == ({}, refusals.NO_CRIO_STORE)

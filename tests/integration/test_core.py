"""pinctl ls / pin / unpin against real containerd 1.7, 2.1 and 1.6, checked with ctr and the CRI."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from pinctl import refs
from tests.conftest import one_containerd
from tests.harness import cri, images
from tests.harness.containerd import ContainerdDaemon
from tests.integration.pinctl_runner import assert_one_line_error, pinctl, pinctl_json

PIN = "io.cri-containerd.pinned"
LoadImages = Callable[..., list[images.ImageInfo]]

APP = ("example.test/app:1", "example.test/app:latest", "registry.example/mirror/app:1")


@pytest.fixture
def ctd(modern_containerd: ContainerdDaemon) -> ContainerdDaemon:
    """containerd 1.7, then 2.1 (each test runs on both), k8s.io holding only the sandbox image."""
    return modern_containerd


def ctr_labels(daemon: ContainerdDaemon, namespace: str = "k8s.io") -> dict[str, dict[str, str]]:
    return {row.ref: row.labels for row in daemon.images(namespace)}


def ls_by_ref(daemon: ContainerdDaemon, *args: str) -> dict[str, dict[str, Any]]:
    return {img["ref"]: img for img in pinctl_json(daemon, "ls", *args)["images"]}


def cri_pinned(daemon: ContainerdDaemon, image_id: str, want: bool) -> bool:
    """What the kubelet would be told, waiting briefly for the CRI to see a label change."""
    listed = cri.wait_for(daemon.address, lambda imgs: any(i.id == image_id and i.pinned == want for i in imgs), 60)
    return next(i.pinned for i in listed if i.id == image_id)


def test_ls_shows_every_ref_pinned_by_one_label(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    app, other = load_images(ctd, [images.recipe(*APP, seed="app"), images.recipe("example.test/other:1", seed="o")])
    ctd.label_image(APP[1], {PIN: "pinned"})
    rows = ls_by_ref(ctd, "-n", "k8s.io")
    for ref in (*APP, app.image_id):
        assert rows[ref]["pinned"] is True, ref
        assert {"kind": "label", "detail": APP[1]} in rows[ref]["reasons"]
        assert rows[ref]["id"] == app.image_id
    assert rows["example.test/other:1"]["pinned"] is False
    listed = {i.id: i for i in cri.list_images(ctd.address)}
    assert rows[APP[0]]["size"] == listed[app.image_id].size
    assert listed[app.image_id].pinned and not listed[other.image_id].pinned


def test_index_image_id_is_the_host_platform_config(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    (multi,) = load_images(ctd, [images.recipe("example.test/multi:1", seed="m", platforms=("linux/amd64", "linux/arm64"))])
    row = ls_by_ref(ctd)["example.test/multi:1"]
    assert row["id"] == multi.image_id and row["digest"] == multi.digest
    assert row["size"] == {i.id: i.size for i in cri.list_images(ctd.address)}[multi.image_id]


def test_pin_writes_one_label_and_the_cri_reports_it(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    (app,) = load_images(ctd, [images.recipe(*APP, seed="app", labels={"org.example.team": "payments"})])
    ctd.label_image(APP[0], {"org.example.owner": "ops"})
    assert not cri_pinned(ctd, app.image_id, False)
    doc = pinctl_json(ctd, "pin", APP[0])
    assert doc["status"] == "success"
    assert doc["results"] == [{"namespace": "k8s.io", "ref": APP[0], "action": "pinned", "error": None}]
    labels = ctr_labels(ctd)
    assert labels[APP[0]][PIN] == "pinned" and labels[APP[0]]["org.example.owner"] == "ops"
    assert labels[APP[0]]["io.cri-containerd.image"] == "managed"
    assert PIN not in labels[APP[1]]
    assert cri_pinned(ctd, app.image_id, True)


@one_containerd  # pinctl's planning reads the label it wrote; writing it is tested on every engine
def test_pin_is_idempotent(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    load_images(ctd, [images.recipe(APP[0], seed="app")])
    assert pinctl(ctd, "pin", APP[0]).returncode == 0
    again = pinctl_json(ctd, "pin", APP[0])
    assert [r["action"] for r in again["results"]] == ["already-pinned"]


def test_unpin_clears_every_ref_of_the_image(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    (app,) = load_images(ctd, [images.recipe(*APP, seed="app")])
    for ref in (APP[0], APP[2], app.image_id):
        ctd.label_image(ref, {PIN: "pinned"})
    assert cri_pinned(ctd, app.image_id, True)
    doc = pinctl_json(ctd, "unpin", APP[1])
    actions = {r["ref"]: r["action"] for r in doc["results"]}
    assert actions == {APP[0]: "unpinned", APP[1]: "already-unpinned", APP[2]: "unpinned", app.image_id: "unpinned"}
    labels = ctr_labels(ctd)
    assert not [ref for ref in (*APP, app.image_id) if PIN in labels[ref]]
    assert not cri_pinned(ctd, app.image_id, False)


def test_pin_by_id_and_by_prefix_selects_every_ref(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    app, other = load_images(ctd, [images.recipe(*APP, seed="app"), images.recipe("example.test/other:1", seed="o")])
    doc = pinctl_json(ctd, "pin", app.image_id)
    assert {r["ref"] for r in doc["results"]} == {*APP, app.image_id}
    labels = ctr_labels(ctd)
    assert all(labels[ref].get(PIN) == "pinned" for ref in (*APP, app.image_id))
    prefix = other.image_id.split(":")[1][:12]
    doc = pinctl_json(ctd, "pin", prefix)
    assert {r["ref"] for r in doc["results"]} == {"example.test/other:1", other.image_id}
    assert cri_pinned(ctd, other.image_id, True)


# Seeds found by search: the image IDs of the first pair share four hex digits, and the ID of
# amb93 starts like the manifest digest of amb368. The test checks that this still holds.
SAME_ID_PREFIX = ("amb740", "amb886")
ID_LIKE_DIGEST = ("amb93", "amb368")


@one_containerd  # the same images have the same IDs on every engine
def test_ambiguous_id_prefix_fails_that_item(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    one, two = load_images(ctd, [images.recipe(f"example.test/{seed}:1", seed=seed) for seed in SAME_ID_PREFIX])
    shared = one.image_id[7:11]
    assert two.image_id[7:11] == shared, "the harness builds other images now: search new seeds"
    result = pinctl(ctd, "pin", f"sha256:{shared}")
    assert result.returncode == 1
    assert f"sha256:{shared} matches 2 images" in result.stderr and "more digits" in result.stderr
    assert result.stderr.count("by its ID") == 2
    assert not any(PIN in labels for ref, labels in ctr_labels(ctd).items() if "amb" in ref)


@one_containerd  # the same images have the same IDs on every engine
def test_ambiguity_through_a_manifest_digest_names_that_digest(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    by_id, by_digest = load_images(ctd, [images.recipe(f"example.test/{s}:1", seed=s) for s in ID_LIKE_DIGEST])
    shared = by_id.image_id[7:11]
    assert by_digest.digest[7:11] == shared, "the harness builds other images now: search new seeds"
    result = pinctl(ctd, "pin", shared)
    assert result.returncode == 1, result.stderr
    assert f"image {by_id.image_id[7:19]} by its ID" in result.stderr
    assert f"by the manifest digest sha256:{by_digest.digest[7:19]} of example.test/{ID_LIKE_DIGEST[1]}:1" in result.stderr


@one_containerd  # pinctl's normalisation
def test_short_names_are_normalised(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    full = refs.normalize("pinctl-short")
    load_images(ctd, [images.recipe(full, seed="short")])
    doc = pinctl_json(ctd, "pin", "pinctl-short")
    assert [r["ref"] for r in doc["results"]] == [full]
    assert ctr_labels(ctd)[full][PIN] == "pinned"


@one_containerd  # pinctl's planning
def test_missing_ref_fails_only_that_item(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    load_images(ctd, [images.recipe(APP[0], seed="app")])
    doc = pinctl_json(ctd, "pin", "example.test/gone:1", APP[0], expect=3)
    assert doc["status"] == "partial"
    assert {r["ref"]: r["action"] for r in doc["results"]} == {APP[0]: "pinned", "example.test/gone:1": "failed"}
    assert ctr_labels(ctd)[APP[0]][PIN] == "pinned"


@one_containerd  # refused before containerd is asked
def test_malformed_ref_changes_nothing(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    load_images(ctd, [images.recipe(APP[0], seed="app")])
    result = pinctl(ctd, "pin", APP[0], "Example.Test/UPPER:1")
    assert_one_line_error(result, 2, "malformed image reference", "UPPER")
    assert PIN not in ctr_labels(ctd)[APP[0]]


@one_containerd  # nothing reaches containerd
def test_dry_run_changes_nothing(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    load_images(ctd, [images.recipe(APP[0], seed="app")])
    doc = pinctl_json(ctd, "pin", "--dry-run", APP[0])
    assert doc["dry_run"] is True and doc["results"][0]["action"] == "pinned"
    assert PIN not in ctr_labels(ctd)[APP[0]]
    table = pinctl(ctd, "pin", "--dry-run", APP[0])
    assert "would be pinned" in table.stdout and "dry run" in table.stderr


def test_ineffective_labels_are_shown_and_do_not_pin(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    load_images(ctd, [images.recipe("example.test/t:1", seed="t"), images.recipe("example.test/k:1", seed="k")])
    ctd.ctr("images", "label", "example.test/t:1", PIN)  # plain ctr stores the value "true"
    ctd.label_image("example.test/k:1", {"io.cri.containerd.pinned": "pinned"})
    rows = ls_by_ref(ctd)
    for ref, needle in (("example.test/t:1", "value must be 'pinned'"), ("example.test/k:1", "misspelt key")):
        assert rows[ref]["pinned"] is False
        [reason] = rows[ref]["reasons"]
        assert reason["kind"] == "ineffective-label" and needle in reason["detail"]
    listed = cri.by_tag(cri.list_images(ctd.address))
    assert not listed["example.test/t:1"].pinned and not listed["example.test/k:1"].pinned


def test_sandbox_image_is_shown_as_sandbox(ctd: ContainerdDaemon) -> None:
    row = ls_by_ref(ctd)[ctd.sandbox_image]
    assert row["pinned"] is True
    assert {"kind": "sandbox", "detail": ctd.sandbox_image} in row["reasons"]
    assert "sandbox" in pinctl(ctd, "ls", ctd.sandbox_image).stdout


@one_containerd  # pinctl's filters
def test_filters_and_quiet(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    load_images(ctd, [images.recipe(*APP, seed="app"), images.recipe("example.test/other:1", seed="o")])
    ctd.label_image(APP[0], {PIN: "pinned"})
    quiet = pinctl(ctd, "ls", "-q", "--unpinned", "example.test/*").stdout.split()
    assert quiet == ["example.test/other:1"]
    assert pinctl(ctd, "ls", "-q", "--pinned", "registry.example/*").stdout.split() == [APP[2]]


@one_containerd  # rendering
def test_table_output_for_a_pipe_is_plain(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    load_images(ctd, [images.recipe(APP[0], seed="app")])
    out = pinctl(ctd, "ls", "-o", "wide", APP[0]).stdout.splitlines()
    assert out[0].split() == ["NAMESPACE", "REF", "IMAGE", "ID", "DIGEST", "SIZE", "PINNED", "WHY", "LABELS"]
    assert "\x1b[" not in "".join(out) and all(line == line.rstrip() for line in out)


@one_containerd  # pinctl's options (-n, all, the env, either side of the command)
def test_namespace_selection(ctd: ContainerdDaemon, load_images: LoadImages, fresh_namespace: Callable[[ContainerdDaemon], str]) -> None:
    other_ns = fresh_namespace(ctd)
    load_images(ctd, [images.recipe("example.test/elsewhere:1", seed="e")], other_ns)
    assert {r["namespace"] for r in pinctl_json(ctd, "ls")["images"]} == {"k8s.io"}
    assert {r["namespace"] for r in pinctl_json(ctd, "ls", "-n", "all")["images"]} >= {"k8s.io", other_ns}
    env_only = pinctl(ctd, "ls", "-q", env={"CONTAINERD_NAMESPACE": other_ns}).stdout.split()
    assert env_only == ["example.test/elsewhere:1"]
    # Global options before the subcommand and after it.
    before = pinctl(ctd, "-n", other_ns, "pin", "example.test/elsewhere:1")
    assert before.returncode == 0, before.stderr
    after = pinctl(ctd, "unpin", "-n", other_ns, "example.test/elsewhere:1")
    assert after.returncode == 0, after.stderr
    assert PIN not in ctr_labels(ctd, other_ns)["example.test/elsewhere:1"]


@one_containerd  # pinctl's message
def test_unknown_namespace_is_one_line(ctd: ContainerdDaemon) -> None:
    result = pinctl(ctd, "ls", "-n", "no-such-ns")
    assert_one_line_error(result, 2, "namespace no-such-ns does not exist", "k8s.io")


def test_containerd_16_takes_the_label_but_its_cri_ignores_it(
    containerd16: ContainerdDaemon, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon], load_images: LoadImages
) -> None:
    daemon = clean_k8s_io(containerd16)
    (app,) = load_images(daemon, [images.recipe(*APP, seed="app")])
    assert pinctl_json(daemon, "pin", APP[0])["status"] == "success"
    assert ctr_labels(daemon)[APP[0]][PIN] == "pinned"
    # 1.6.20 predates CRI label pinning: the kubelet is still told pinned=false, and ls says so.
    assert not {i.id: i for i in cri.list_images(daemon.address)}[app.image_id].pinned
    row = ls_by_ref(daemon)[APP[1]]
    assert row["pinned"] is False
    assert {"kind": "label", "detail": APP[0]} in row["reasons"]
    assert row["reasons"][-1]["kind"] == "ignored" and daemon.version in row["reasons"][-1]["detail"]
    assert pinctl_json(daemon, "unpin", APP[0])["status"] == "success"
    assert PIN not in ctr_labels(daemon)[APP[0]]


def test_quiet_names_match_the_full_listing(ctd: ContainerdDaemon, load_images: LoadImages) -> None:
    load_images(ctd, [images.recipe(*APP, seed="app"), images.recipe("example.test/other:1", seed="o")])
    fast = pinctl(ctd, "ls", "-q").stdout.split()
    full = [img["ref"] for img in pinctl_json(ctd, "ls")["images"]]
    assert fast == full and set(APP) <= set(fast)


def test_unpin_of_the_sandbox_image_holds_on_17_and_is_undone_by_21(ctd: ContainerdDaemon) -> None:
    sandbox = ctd.sandbox_image
    result = pinctl(ctd, "unpin", sandbox, "-o", "json")
    assert result.returncode == 0, result.stderr
    [item] = [i for i in json.loads(result.stdout)["results"] if i["ref"] == sandbox]
    assert item["action"] == "unpinned"
    if ctd.config_version >= 3:
        # 2.x's sandbox is its pinned_images.sandbox entry, which containerd relabels on every
        # change to the record, this unpin's own included: pinctl says so, and it happens.
        assert f"pinned_images.sandbox in {ctd.config_path}" in item["warning"]
        assert "containerd will pin it again" in result.stderr
        assert cri_pinned(ctd, item_image_id(ctd, sandbox), True)
        assert ctr_labels(ctd)[sandbox].get(PIN) == "pinned"
    else:
        # 1.7 labels its sandbox_image when it first adopts it, not on later changes (nor at a
        # restart): the unpin holds, its CRI then tells the kubelet pinned=false, and pinctl says
        # that the GC may now delete it (tests/integration/test_sandbox_image.py has the rest).
        assert "the kubelet's GC may delete it now" in item["warning"] and "pin it again" not in result.stderr
        assert "keeps it anyway" not in result.stderr
        assert not cri_pinned(ctd, item_image_id(ctd, sandbox), False)
        time.sleep(1.0)
        assert PIN not in ctr_labels(ctd)[sandbox]


def item_image_id(daemon: ContainerdDaemon, ref: str) -> str:
    return cri.by_tag(cri.list_images(daemon.address))[ref].id

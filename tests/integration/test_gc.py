"""gc plan and prune against real engines: pods on containerd 1.7 and 2.1, containerd 1.6.20, dockerd 26.

pinctl runs as a subprocess (``pinctl_runner``); results are read back with independent clients:
the harness's CRI calls (encoded by field number), containerd's own image records, ``ctr``,
``docker`` and statvfs of the dedicated tmpfs. The deletion order is checked against
``gcmodel.plan_gc`` fed with the same images, containers, arrival times and settings.

Minimum ages: every image here is seconds old, so a test that needs old and young images at once
loads the old ones, waits ``AGE_GAP_S``, loads the young one and passes a minimum age between the
two, measured from the young image's record time (``min_age_between``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Optional

import pytest

from pinctl.gc import model as gcmodel
from tests.harness import cri, cri_pods, images, pods, runnable
from tests.harness.containerd import ContainerdDaemon
from tests.harness.pod_fixtures import PodNode
from tests.harness.protowire import Reader, encode
from tests.integration.pinctl_runner import pinctl

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
PIN = "io.cri-containerd.pinned"
IMAGES_LIST = "/containerd.services.images.v1.Images/List"
CONTENT_INFO = "/containerd.services.content.v1.Content/Info"
# Old images are at least this much older than the young one. The minimum age passed keeps the
# young one too young for AGE_GAP_S - MARGIN_S (11 s) after it is worked out (pinctl's start-up on a busy
# machine fits in that, with room), while the old ones are past it by MARGIN_S already (the
# model's second-resolution "now" fits in that). The wait costs no CPU, and the suite's other
# workers go on meanwhile.
AGE_GAP_S = 12.0
MARGIN_S = 1.0
LoadImages = Callable[..., list[images.ImageInfo]]


# --- running pinctl ----------------------------------------------------------------------------


def run(daemon: ContainerdDaemon, *args: str, env: Optional[dict[str, str]] = None) -> Any:
    """pinctl against the daemon's containerd and its CRI, reading k8s.io only."""
    return pinctl(daemon, *args, "-r", daemon.address, "-n", "k8s.io", env=env)


def run_json(daemon: ContainerdDaemon, *args: str, expect: int = 0) -> dict[str, Any]:
    result = run(daemon, *args, "-o", "json")
    assert result.returncode == expect, (result.returncode, result.stderr)
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def kubelet_config(tmp_path: Path, **fields: object) -> Path:
    path = tmp_path / "kubelet-config.yaml"
    lines = ["apiVersion: kubelet.config.k8s.io/v1beta1", "kind: KubeletConfiguration"]
    path.write_text("\n".join(lines + [f"{key}: {value}" for key, value in fields.items()]) + "\n")
    return path


def by_action(doc: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """prune results: action -> image id -> item."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for item in doc["results"]:
        found.setdefault(item["action"], {})[item["id"]] = item
    return found


# --- independent views of the node ---------------------------------------------------------------


def record_times(address: str, namespace: str = cri.NAMESPACE) -> dict[str, datetime]:
    """Record name -> creation time, from containerd's Images.List (Image: name 1, created_at 7;
    Timestamp: seconds 1, nanos 2), read by field number rather than through pinctl."""
    import grpc

    with grpc.insecure_channel(f"unix://{address}") as channel:
        call = channel.unary_unary(IMAGES_LIST, request_serializer=None, response_deserializer=None)
        reply = call(b"", timeout=cri.CALL_TIMEOUT_S, metadata=(("containerd-namespace", namespace),))
    times = {}
    for record in Reader(reply).messages(1):
        created = record.message(7)
        times[record.text(1)] = datetime.fromtimestamp(created.integer(1) + created.integer(2) / 1e9, timezone.utc)
    return times


def committed_at(address: str, digest: str, namespace: str = cri.NAMESPACE) -> datetime:
    """When containerd committed a blob, from Content.Info (InfoRequest: digest 1; InfoResponse:
    info 1; Info: committed_at 3), read by field number rather than through pinctl."""
    import grpc

    with grpc.insecure_channel(f"unix://{address}") as channel:
        call = channel.unary_unary(CONTENT_INFO, request_serializer=None, response_deserializer=None)
        reply = call(encode([(1, digest)]), timeout=cri.CALL_TIMEOUT_S, metadata=(("containerd-namespace", namespace),))
    stamp = Reader(reply).message(1).message(3)
    return datetime.fromtimestamp(stamp.integer(1) + stamp.integer(2) / 1e9, timezone.utc)


def first_detected(image: cri.CriImage, times: dict[str, datetime], address: str) -> datetime:
    """When the image's ID came: the sha256:<id> record the CRI adds (its config blob's commit
    without one), but not before its earliest record (its tags and that one)."""
    earliest = min(times[name] for name in (*image.repo_tags, image.id) if name in times)
    arrived = times[image.id] if image.id in times else committed_at(address, image.id)
    return max(arrived, earliest)


def cri_ids(address: str) -> set[str]:
    return {image.id for image in cri.list_images(address)}


def usage_of(fs: pods.DedicatedFs) -> int:
    return gcmodel.ImageFs(fs.capacity, fs.available).usage_percent


def settled_available(fs: pods.DedicatedFs, timeout: float = 10.0) -> int:
    """Available bytes once they stop changing: containerd removes content and snapshots of
    images deleted earlier (the fixture's reset) in the background."""
    deadline = time.monotonic() + timeout
    previous = fs.available
    while time.monotonic() < deadline:
        time.sleep(0.3)
        current = fs.available
        if current == previous:
            return current
        previous = current
    raise AssertionError(f"{fs.path} still changing after {timeout}s")


def min_age_between(young_created: datetime) -> str:
    """A --min-age that keeps the young image (created at ``young_created``) too young for the
    next 11 seconds, while images created AGE_GAP_S earlier are past it."""
    age = (datetime.now(timezone.utc) - young_created).total_seconds()
    return f"{int((age + AGE_GAP_S - MARGIN_S) * 1000)}ms"


def wait_past(moment: datetime, seconds: float) -> None:
    remaining = (moment + timedelta(seconds=seconds) - datetime.now(timezone.utc)).total_seconds()
    if remaining > 0:
        time.sleep(remaining)


def load_one(node: PodNode, ref: str, payload: int) -> images.ImageInfo:
    """One runnable image in an import of its own, so its record time orders it."""
    (info,) = node.load_runnable([runnable.runnable_recipe(ref, payload_bytes=payload)])
    return info


# --- the model, fed with what the engines say --------------------------------------------------


@dataclass
class NodeState:
    """What the model needs, read from the node with the harness's clients."""

    images: list[gcmodel.GcImage]
    containers: list[gcmodel.GcContainer]
    capacity: int


def node_state(node: PodNode) -> NodeState:
    times = record_times(node.address)
    listed = [gcmodel.GcImage(i.id, i.size, first_detected(i, times, node.address), None, i.repo_tags, i.pinned)
              for i in cri.list_images(node.address)]
    containers = [gcmodel.GcContainer(c.id, c.image_ref, c.state, c.image_id, c.image, c.name)
                  for c in cri_pods.list_containers(node.address)]
    return NodeState(listed, containers, node.fs.capacity)


def model_for(doc: dict[str, Any], state: NodeState, wanted: dict[str, str]) -> gcmodel.GcPlan:
    """plan_gc with the settings, filesystem and time pinctl reported (its "now" is whole seconds:
    the middle of that second is within MARGIN_S of the real one)."""
    gc = doc["gc"]
    settings = gc["settings"]
    now = datetime.strptime(gc["now"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc) + timedelta(seconds=0.5)
    fs = gcmodel.ImageFs(gc["filesystem"]["capacity_bytes"], gc["filesystem"]["available_bytes"])
    return gcmodel.plan_gc(
        state.images, state.containers,
        gcmodel.GcSettings(settings["high_threshold_percent"]["value"], settings["low_threshold_percent"]["value"],
                           timedelta(seconds=settings["min_age_seconds"]["value"]),
                           timedelta(seconds=settings["max_age_seconds"]["value"])),
        fs, now, wanted=wanted, simulated_usage=gc["usage_percent"] if gc["simulated"] else None,
    )


def assert_matches_model(doc: dict[str, Any], plan: gcmodel.GcPlan) -> None:
    gc = doc["gc"]
    assert gc["outcome"] == plan.outcome.value
    assert (gc["usage_percent"], gc["amount_to_free"], gc["freed_bytes"]) == (
        plan.usage_percent, plan.amount_to_free, plan.freed_bytes)
    assert [(e["position"], e["id"], e["size"], e["fate"], e["running_total"]) for e in gc["order"]] == [
        (e.position, e.image.id, e.image.size, e.fate.value, e.running_total) for e in plan.order]
    assert {p["id"]: (p["reasons"], p["containers"]) for p in gc["protected"]} == {
        p.image.id: ([r.value for r in p.reasons], [c.name for c in p.containers]) for p in plan.protected}
    assert [(r["id"], r["position"], r["fate"], r["deleted"]) for r in gc["at_risk"]] == [
        (r.image.id, r.position, r.fate.value if r.fate else None, r.deleted) for r in plan.at_risk]


def deleted_ids(doc: dict[str, Any]) -> list[str]:
    return [entry["id"] for entry in doc["gc"]["order"] if entry["deleted"]]


def fates(doc: dict[str, Any]) -> dict[str, str]:
    return {entry["id"]: entry["fate"] for entry in doc["gc"]["order"]}


def reasons(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {item["id"]: item["reasons"] for item in doc["gc"]["protected"]}


# --- a node with every kind of image -----------------------------------------------------------


@dataclass
class Mixed:
    """Images in use (running, exited, created), pinned by label, covered by a policy pattern,
    and unused ones in a known order."""

    running: images.ImageInfo
    exited: images.ImageInfo
    created: images.ImageInfo
    labelled: images.ImageInfo
    unused: list[images.ImageInfo]  # in the order they were loaded: oldest first
    policy: images.ImageInfo  # second in the unused order
    container_names: dict[str, str]  # image id -> container name
    last_old: datetime


def mixed_node(node: PodNode) -> Mixed:
    users = node.load_runnable([runnable.runnable_recipe(f"example.test/gc-{kind}:1", payload_bytes=64 * 1024)
                                for kind in ("running", "exited", "created", "labelled")])
    running, exited, created, labelled = users
    node.daemon.label_image(labelled.refs[0], {PIN: "pinned"})
    made = node.pods()
    pod = made.pod()
    names = {info.image_id: made.container(info.refs[0], state, pod=pod).id  # type: ignore[arg-type]
             for info, state in ((running, "running"), (exited, "exited"), (created, "created"))}
    listed = {c.id: c.name for c in cri_pods.list_containers(node.address)}
    # Sizes not in load order, so an order by size would show.
    first = load_one(node, "example.test/gc-first:1", 1 * MIB)
    policy = load_one(node, "example.test/gc-policy:1", MIB + MIB // 2)
    third = load_one(node, "example.test/gc-third:1", MIB // 2)
    cri.wait_for(node.address, lambda imgs: any(i.id == labelled.image_id and i.pinned for i in imgs), 60)
    last_old = record_times(node.address)[third.refs[0]]
    return Mixed(running, exited, created, labelled, [first, policy, third], policy,
                 {image_id: listed[cid] for image_id, cid in names.items()}, last_old)


def add_young(node: PodNode, mixed: Mixed) -> tuple[images.ImageInfo, datetime]:
    """An image AGE_GAP_S younger than the others, and its record time."""
    wait_past(mixed.last_old, AGE_GAP_S)
    young = load_one(node, "example.test/gc-young:1", 256 * 1024)
    return young, record_times(node.address)[young.refs[0]]


# --- gc plan on real pods ----------------------------------------------------------------------


def test_gc_plan_on_real_pods_follows_the_model(modern_pod_node: PodNode, tmp_path: Path) -> None:
    mixed = mixed_node(modern_pod_node)
    young_image, young_created = add_young(modern_pod_node, mixed)
    # No eviction thresholds: at 99% the kubelet's defaults (imagefs.available<15%) would have its
    # eviction manager delete every unused image, which the last step shows; the rest is the GC.
    config = kubelet_config(tmp_path, imageGCHighThresholdPercent=98, imageGCLowThresholdPercent=97,
                            imageMinimumGCAge="1h", evictionHard="{}")
    common = ["gc", "plan", "--kubelet-config", str(config), "--pinned-image", mixed.policy.refs[0]]

    def young() -> list[str]:
        return ["--min-age", min_age_between(young_created)]

    state = node_state(modern_pod_node)
    sandbox = next(i.id for i in state.images if modern_pod_node.daemon.sandbox_image in i.refs)
    wanted = {mixed.policy.image_id: "pattern", mixed.labelled.image_id: "label", sandbox: "sandbox"}
    first, policy, third = (info.image_id for info in mixed.unused)

    # 99% full, low threshold 97%: the oldest unused image and the policy's go; that is at risk.
    doc = run_json(modern_pod_node.daemon, *common, *young(), "--usage", "99", expect=1)
    assert_matches_model(doc, model_for(doc, state, wanted))
    assert [e["id"] for e in doc["gc"]["order"]] == [first, policy, third, young_image.image_id]
    assert deleted_ids(doc) == [first, policy]
    assert fates(doc)[third] == "not_reached" and fates(doc)[young_image.image_id] == "too_young"
    protected = reasons(doc)
    for info in (mixed.running, mixed.exited, mixed.created):
        assert protected[info.image_id] == ["in_use"]
        assert [p["containers"] for p in doc["gc"]["protected"] if p["id"] == info.image_id] == [
            [mixed.container_names[info.image_id]]]
    assert protected[mixed.labelled.image_id] == ["pinned"] and protected[sandbox] == ["pinned"]
    assert protected[young_image.image_id] == ["too_young"]
    (risk,) = doc["gc"]["at_risk"]
    assert (risk["id"], risk["position"], risk["deleted"]) == (policy, 2, True)
    assert f"pattern {mixed.policy.refs[0]}" in risk["wanted_because"]
    sources = doc["gc"]["settings"]
    assert sources["low_threshold_percent"]["source"] == f"{config} imageGCLowThresholdPercent"
    assert sources["min_age_seconds"]["source"] == "flag --min-age"

    # Low threshold 98%: the oldest image alone frees enough; the policy's is not reached: exit 0.
    doc = run_json(modern_pod_node.daemon, *common, *young(), "--usage", "99", "--high-threshold", "99",
                   "--low-threshold", "98", expect=0)
    assert_matches_model(doc, model_for(doc, state, wanted))
    assert deleted_ids(doc) == [first] and doc["gc"]["at_risk"][0]["fate"] == "not_reached"

    # Low threshold 10%: everything old goes and it is not enough; the young image is skipped.
    doc = run_json(modern_pod_node.daemon, *common, *young(), "--usage", "99", "--low-threshold", "10", expect=1)
    assert_matches_model(doc, model_for(doc, state, wanted))
    assert deleted_ids(doc) == [first, policy, third] and doc["gc"]["outcome"] == "shortfall"
    assert fates(doc)[young_image.image_id] == "too_young"

    # No minimum age: the young image goes too. The config's 1h: nothing goes.
    doc = run_json(modern_pod_node.daemon, *common, "--min-age", "0s", "--usage", "99", "--low-threshold", "10",
                   expect=1)
    assert_matches_model(doc, model_for(doc, state, wanted))
    assert deleted_ids(doc) == [first, policy, third, young_image.image_id]
    doc = run_json(modern_pod_node.daemon, *common, "--usage", "99", expect=0)
    assert_matches_model(doc, model_for(doc, state, wanted))
    assert deleted_ids(doc) == [] and set(fates(doc).values()) == {"too_young"}
    assert doc["gc"]["settings"]["min_age_seconds"] == {"value": 3600, "source": f"{config} imageMinimumGCAge"}

    # The kubelet's default eviction thresholds: at 99% the eviction manager deletes every unused
    # image past the minimum age, the policy's among them, where the GC alone would not reach it.
    (tmp_path / "defaults").mkdir()
    defaults = kubelet_config(tmp_path / "defaults", imageGCHighThresholdPercent=99, imageGCLowThresholdPercent=98)
    doc = run_json(modern_pod_node.daemon, "gc", "plan", "--kubelet-config", str(defaults), "--pinned-image",
                   mixed.policy.refs[0], *young(), "--usage", "99", expect=1)
    assert deleted_ids(doc) == [first]
    evicting = doc["gc"]["eviction"]
    assert evicting["deletes_now"] is True and evicting["config_source"] == str(defaults)
    assert [e["id"] for e in evicting["order"] if e["deleted"]] == [first, policy, third]
    assert [(r["id"], r["deleted"]) for r in evicting["at_risk"]] == [(policy, True)]


def test_gc_plan_reads_the_real_filesystem_and_simulates_a_fuller_one(modern_pod_node: PodNode) -> None:
    mixed = mixed_node(modern_pod_node)
    state = node_state(modern_pod_node)
    settled_available(modern_pod_node.fs)
    args = ["gc", "plan", "--min-age", "0s", "--pinned-image", mixed.policy.refs[0]]
    doc = run_json(modern_pod_node.daemon, *args, expect=0)
    gc = doc["gc"]
    # What the kubelet reads: statfs under the CRI's ImageFsInfo mount point, the dedicated tmpfs.
    mountpoint = cri_pods.image_fs_info(modern_pod_node.address)[0].mountpoint
    assert mountpoint in gc["filesystem"]["source"] and gc["simulated"] is False
    assert gc["filesystem"]["capacity_bytes"] == modern_pod_node.fs.capacity == pods.DEFAULT_FS_BYTES
    assert abs(gc["filesystem"]["available_bytes"] - modern_pod_node.fs.available) < MIB
    assert abs(gc["usage_percent"] - usage_of(modern_pod_node.fs)) <= 1
    assert gc["usage_percent"] < 85 and gc["outcome"] == "below_threshold" and deleted_ids(doc) == []
    assert_matches_model(doc, model_for(doc, state, {mixed.policy.image_id: "pattern"}))
    assert [r["id"] for r in gc["at_risk"]] == [mixed.policy.image_id]

    table = run(modern_pod_node.daemon, *args, "--usage", "95")
    assert table.returncode == 1, table.stderr
    assert "95% (simulated, --usage)" in table.stdout and "at risk" in table.stdout
    assert "WANTED BUT NOT PINNED BY THE RUNTIME" in table.stdout
    assert "would be deleted at the simulated usage of 95%" in table.stderr
    doc = run_json(modern_pod_node.daemon, *args, "--usage", "95", expect=1)
    assert doc["gc"]["filesystem"]["capacity_bytes"] == modern_pod_node.fs.capacity
    assert gcmodel.ImageFs(modern_pod_node.fs.capacity, doc["gc"]["filesystem"]["available_bytes"]).usage_percent == 95
    assert_matches_model(doc, model_for(doc, state, {mixed.policy.image_id: "pattern"}))


# --- containerd 1.6.20: its CRI ignores the pin label ------------------------------------------


@pytest.fixture
def ctd16(containerd16: ContainerdDaemon,
          clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon]) -> ContainerdDaemon:
    return clean_k8s_io(containerd16)


def load_kept_and_spare(daemon: ContainerdDaemon, load_images: LoadImages) -> tuple[images.ImageInfo, images.ImageInfo]:
    kept, spare = load_images(daemon, [images.recipe("example.test/gc16-kept:1", seed="gc16-kept"),
                                       images.recipe("example.test/gc16-spare:1", seed="gc16-spare")])
    assert pinctl(daemon, "pin", "-n", "k8s.io", kept.refs[0]).returncode == 0
    assert {row.ref: row.labels.get(PIN) for row in daemon.images()}[kept.refs[0]] == "pinned"
    listed = {i.id: i for i in cri.list_images(daemon.address)}
    assert listed[kept.image_id].pinned is False, "containerd 1.6.20's CRI was expected to ignore the label"
    return kept, spare


def test_gc_plan_on_containerd16_reports_a_labelled_image_at_risk(ctd16: ContainerdDaemon,
                                                                  load_images: LoadImages) -> None:
    kept, spare = load_kept_and_spare(ctd16, load_images)
    doc = run_json(ctd16, "gc", "plan", "--min-age", "0s", "--usage", "99", expect=1)
    listed = {i.id: i for i in cri.list_images(ctd16.address)}
    sandbox = next(i.id for i in listed.values() if ctd16.sandbox_image in i.repo_tags)
    risks = {r["id"]: r for r in doc["gc"]["at_risk"]}
    assert risks[kept.image_id]["deleted"] is True and risks[kept.image_id]["position"] is not None
    assert "pin label" in risks[kept.image_id]["wanted_because"]
    assert spare.image_id not in risks and spare.image_id in deleted_ids(doc)
    # Wanted (label, sandbox) and not pinned by this CRI is exactly what is at risk.
    wanted = {kept.image_id, sandbox}
    assert set(risks) == {image_id for image_id in wanted if not listed[image_id].pinned}


def test_prune_on_containerd16_keeps_a_labelled_image(ctd16: ContainerdDaemon, load_images: LoadImages) -> None:
    kept, spare = load_kept_and_spare(ctd16, load_images)
    doc = run_json(ctd16, "prune", "--yes", "--all-unused", "--min-age", "0s")
    actions = by_action(doc)
    assert set(actions["removed"]) == {spare.image_id}
    assert "pin label" in actions["kept"][kept.image_id]["why"]
    sandbox = next(i.id for i in cri.list_images(ctd16.address) if ctd16.sandbox_image in i.repo_tags)
    assert "the sandbox image" in actions["kept"][sandbox]["why"]
    assert cri_ids(ctd16.address) == {kept.image_id, sandbox}
    refs = {row.ref for row in ctd16.images()}
    assert kept.refs[0] in refs and spare.refs[0] not in refs and f"sha256:{spare.image_id[7:]}" not in refs


# --- prune on real pods ------------------------------------------------------------------------


def test_prune_deletes_only_what_nothing_protects(modern_pod_node: PodNode) -> None:
    mixed = mixed_node(modern_pod_node)
    policy = ["--pinned-image", mixed.policy.refs[0]]
    before = cri_ids(modern_pod_node.address)
    first, _, third = (info.image_id for info in mixed.unused)

    # Dry run, then no terminal and no --yes: the plan is shown, nothing is deleted.
    doc = run_json(modern_pod_node.daemon, "prune", "--dry-run", "--all-unused", "--min-age", "0s", *policy)
    assert set(by_action(doc)["would-remove"]) == {first, third} and doc["dry_run"] is True
    older = by_action(run_json(modern_pod_node.daemon, "prune", "--dry-run", "--all-unused", "--min-age", "0s",
                               "--older-than", "1h", *policy))
    assert "would-remove" not in older and "younger than the minimum age" in older["kept"][first]["why"]
    refused = run(modern_pod_node.daemon, "prune", "--all-unused", "--min-age", "0s", *policy)
    assert refused.returncode == 2, refused.stderr
    assert "refusing without --yes" in refused.stderr.splitlines()[-1] and "Traceback" not in refused.stderr
    assert "delete  example.test/gc-first:1" in refused.stderr and refused.stdout == ""
    assert cri_ids(modern_pod_node.address) == before

    young_image, young_created = add_young(modern_pod_node, mixed)
    young_age = min_age_between(young_created)
    doc = run_json(modern_pod_node.daemon, "prune", "--yes", "--all-unused", "--min-age", young_age, *policy)
    actions = by_action(doc)
    assert set(actions["removed"]) == {first, third} and "failed" not in actions
    kept = actions["kept"]
    for info in (mixed.running, mixed.exited, mixed.created):
        assert kept[info.image_id]["why"].startswith(f"in use by {mixed.container_names[info.image_id]}")
    assert "pin label" in kept[mixed.labelled.image_id]["why"]
    assert "pinned by the runtime" in kept[mixed.labelled.image_id]["why"]
    assert f"pattern {mixed.policy.refs[0]}" in kept[mixed.policy.image_id]["why"]
    assert "younger than the minimum age" in kept[young_image.image_id]["why"]
    sandbox = next(i.id for i in cri.list_images(modern_pod_node.address)
                   if modern_pod_node.daemon.sandbox_image in i.repo_tags)
    assert "the sandbox image" in kept[sandbox]["why"]
    assert cri_ids(modern_pod_node.address) == before - {first, third} | {young_image.image_id}
    refs = {row.ref for row in modern_pod_node.daemon.images()}
    assert not {ref for info in mixed.unused if info.image_id != mixed.policy.image_id for ref in info.refs} & refs
    # The containers are untouched.
    assert {c.image_ref for c in cri_pods.list_containers(modern_pod_node.address)} == {
        mixed.running.image_id, mixed.exited.image_id, mixed.created.image_id}


def test_prune_of_named_images_deletes_those_alone_and_never_one_that_must_stay(modern_pod_node: PodNode) -> None:
    """prune REF...: the images named are the only candidates, whatever the usage; one a container
    uses is still kept, and a name that matches nothing stops the run before anything goes."""
    mixed = mixed_node(modern_pod_node)
    first, second, third = mixed.unused
    before = cri_ids(modern_pod_node.address)
    missing = run(modern_pod_node.daemon, "prune", "--yes", "--min-age", "0s", first.refs[0], "example.test/gc-none:1")
    assert missing.returncode == 2 and "no image matches example.test/gc-none:1" in missing.stderr, missing.stderr
    assert cri_ids(modern_pod_node.address) == before
    doc = run_json(modern_pod_node.daemon, "prune", "--yes", "--min-age", "0s", first.refs[0], mixed.running.refs[0],
                   expect=3)  # one named image went, one stayed
    assert doc["status"] == "partial"
    actions = by_action(doc)
    assert set(actions["removed"]) == {first.image_id}, actions
    assert set(actions["kept"]) == {mixed.running.image_id}, actions
    assert cri_ids(modern_pod_node.address) == before - {first.image_id}
    assert {second.image_id, third.image_id} <= cri_ids(modern_pod_node.address)


def test_prune_of_a_named_image_exits_non_zero_unless_it_went(containerd17: ContainerdDaemon,
                                                              clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
                                                              load_images: LoadImages) -> None:
    """prune REF...: a script tells from the exit code alone whether the images it named went: 1
    when none did (too young, pinned), each kept one's row saying why; 3 when some did; 0 when
    every one did. A prune without names that finds nothing due still exits 0."""
    daemon = clean_k8s_io(containerd17)
    young, pinned, spare = load_images(daemon, [images.recipe(f"example.test/named-{kind}:1", seed=f"named-{kind}")
                                                for kind in ("young", "pinned", "spare")])
    assert pinctl(daemon, "pin", "-n", "k8s.io", pinned.refs[0]).returncode == 0
    cri.wait_for(daemon.address, lambda listed: any(i.id == pinned.image_id and i.pinned for i in listed), 10)
    everything = cri_ids(daemon.address)

    # Every image here is seconds old: a minimum age of an hour keeps each one too young.
    for dry_run in (["--dry-run"], []):
        doc = run_json(daemon, "prune", "--yes", "--min-age", "1h", *dry_run, young.refs[0], expect=1)
        [item] = doc["results"]
        assert (item["id"], item["action"], doc["status"]) == (young.image_id, "kept", "error"), doc
        assert "younger than the minimum age" in item["why"]
    table = run(daemon, "prune", "--yes", "--min-age", "1h", young.refs[0])
    assert table.returncode == 1, table.stderr
    [row] = [line for line in table.stdout.splitlines() if line.startswith("kept")]
    assert young.refs[0] in row and "younger than the minimum age" in row, table.stdout
    doc = run_json(daemon, "prune", "--yes", "--min-age", "0s", pinned.refs[0], expect=1)
    [item] = doc["results"]
    assert item["action"] == "kept" and "pin label" in item["why"] and "pinned by the runtime" in item["why"], item
    assert cri_ids(daemon.address) == everything

    # Nothing named: nothing due is no failure.
    assert run_json(daemon, "prune", "--yes", "--all-unused", "--min-age", "1h")["status"] == "success"
    assert cri_ids(daemon.address) == everything

    doc = run_json(daemon, "prune", "--yes", "--min-age", "0s", young.refs[0], pinned.refs[0], expect=3)
    actions = by_action(doc)
    assert (set(actions["removed"]), set(actions["kept"]), doc["status"]) == (
        {young.image_id}, {pinned.image_id}, "partial"), doc
    done = run(daemon, "prune", "--yes", "--min-age", "0s", spare.refs[0])
    assert done.returncode == 0, done.stderr
    assert cri_ids(daemon.address) == everything - {young.image_id, spare.image_id}


def test_prune_until_usage_stops_once_the_filesystem_is_there(modern_pod_node: PodNode) -> None:
    available = settled_available(modern_pod_node.fs)
    # Incompressible payloads stored uncompressed and unpacked: each image costs twice its payload.
    big = [load_one(modern_pod_node, f"example.test/gc-big-{n}:1", 12 * MIB) for n in range(4)]
    cost = (available - settled_available(modern_pod_node.fs)) // len(big)

    def usage_after(deleted: float) -> int:
        fs = modern_pod_node.fs
        return gcmodel.ImageFs(fs.capacity, int(fs.available + deleted * cost)).usage_percent

    # Half-way between the usage one and two deletions leave: two are needed, not more.
    target = usage_after(1.5)
    needed = next(k for k in range(1, len(big) + 1) if usage_after(k) <= target)
    assert needed == 2 and usage_after(1) > target, (usage_of(modern_pod_node.fs), cost, target)

    doc = run_json(modern_pod_node.daemon, "prune", "--yes", "--until-usage", str(target), "--min-age", "0s")
    actions = by_action(doc)
    # Oldest first, and no more than the filesystem needed.
    assert list(actions["removed"]) == [info.image_id for info in big[:needed]]
    assert usage_of(modern_pod_node.fs) <= target
    assert cri_ids(modern_pod_node.address) >= {info.image_id for info in big[needed:]}
    # Planned by CRI sizes (half of what an unpacked image frees here), the third was measured
    # out before its turn.
    assert cost > 1.5 * big[0].size
    assert actions["kept"][big[needed].image_id]["why"].startswith("not needed: the image filesystem is at ")


# --- a container created between plan and delete ---------------------------------------------


def test_a_container_created_after_planning_protects_its_image(modern_pod_node: PodNode) -> None:
    from pinctl.backends.containerd import ContainerdStore
    from pinctl.backends.cri import CriRuntime
    from pinctl.gc import plan as gc
    from pinctl.node.sources import ContainerdSource, Node
    from pinctl.pins.policy import Policy

    used, labelled, spare = modern_pod_node.load_runnable(
        [runnable.runnable_recipe(f"example.test/gc-race-{name}:1") for name in ("used", "labelled", "spare")])
    node = Node([ContainerdSource(ContainerdStore(modern_pod_node.address, 10.0, None), ["k8s.io"], ["k8s.io"])])
    runtime = CriRuntime(modern_pod_node.address, 10.0)
    domain = gc.CriDomain(runtime, runtime.version())
    try:
        plan = gc.plan_prune(domain, node.rows(Policy()).rows, gcmodel.GcSettings(min_age=timedelta(0)),
                             gc.PruneRequest(all_unused=True), datetime.now(timezone.utc))
        assert {image.id for image in plan.delete} == {used.image_id, labelled.image_id, spare.image_id}

        container = modern_pod_node.pods().container(used.refs[0], "created")
        modern_pod_node.daemon.label_image(labelled.refs[0], {PIN: "pinned"})
        items = {item.image_id: item for item in gc.apply_prune([plan], gc.wanted_now(node, Policy()), dry_run=False)}
    finally:
        node.close()
    name = next(c.name for c in cri_pods.list_containers(modern_pod_node.address) if c.id == container.id)
    assert (items[used.image_id].action, items[used.image_id].why) == ("kept", f"in use since planning by {name}")
    assert items[labelled.image_id].action == "kept" and "since planning" in (items[labelled.image_id].why or "")
    assert items[spare.image_id].action == "removed"
    assert {used.image_id, labelled.image_id} <= cri_ids(modern_pod_node.address)
    assert spare.image_id not in cri_ids(modern_pod_node.address)

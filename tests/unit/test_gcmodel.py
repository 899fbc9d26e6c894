"""The kubelet image GC model: each rule on its own, the edges, and properties over random nodes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pinctl.errors import EXIT_USAGE
from pinctl.gc.estimate import ESTIMATE_NOTES, ObservedContainer, ObservedImage, TimeSource, estimate_images
from pinctl.gc.model import (
    SHORTFALL_MESSAGE,
    ContainerState,
    Fate,
    GcContainer,
    GcImage,
    GcMode,
    GcPlan,
    GcSettings,
    GcSettingsError,
    ImageFs,
    Outcome,
    Protection,
    format_size,
    plan_gc,
)

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
CAPACITY = 10_000
DEFAULTS = GcSettings()


def img(
    image_id: str,
    size: int = 100,
    *,
    age: timedelta = 10 * HOUR,
    used_ago: Optional[timedelta] = None,
    pinned: bool = False,
    refs: tuple[str, ...] = (),
) -> GcImage:
    """An image first detected ``age`` ago and last used ``used_ago`` ago (None: never)."""
    last_used = None if used_ago is None else NOW - used_ago
    return GcImage(image_id, size, NOW - age, last_used, refs, pinned)


def fs_used(percent: int, capacity: int = CAPACITY) -> ImageFs:
    """A filesystem whose kubelet usage figure is exactly ``percent`` (capacity a multiple of 100)."""
    return ImageFs(capacity, capacity * (100 - percent) // 100)


def run(
    images: list[GcImage],
    containers: tuple[GcContainer, ...] = (),
    gc: GcSettings = DEFAULTS,
    fs: ImageFs = fs_used(90),
    **options: object,
) -> GcPlan:
    return plan_gc(images, containers, gc, fs, NOW, **options)  # type: ignore[arg-type]


def deleted(plan: GcPlan) -> list[str]:
    return [entry.image.id for entry in plan.deletions]


def reasons(plan: GcPlan) -> dict[str, tuple[Protection, ...]]:
    return {item.image.id: item.reasons for item in plan.protected}


# --- settings -----------------------------------------------------------------------------------


def test_defaults_are_the_kubelets() -> None:
    assert (DEFAULTS.high_threshold_percent, DEFAULTS.low_threshold_percent) == (85, 80)
    assert (DEFAULTS.min_age, DEFAULTS.max_age) == (2 * MINUTE, timedelta(0))


@pytest.mark.parametrize(
    "gc, names",
    [
        (GcSettings(80, 80), "imageGCLowThresholdPercent 80 must be less than imageGCHighThresholdPercent 80"),
        (GcSettings(80, 85), "imageGCLowThresholdPercent 85 must be less than imageGCHighThresholdPercent 80"),
        (GcSettings(101, 80), "imageGCHighThresholdPercent 101 must be between 0 and 100"),
        (GcSettings(85, -1), "imageGCLowThresholdPercent -1 must be between 0 and 100"),
        (GcSettings(min_age=-MINUTE), "imageMinimumGCAge"),
        (GcSettings(max_age=-HOUR), "imageMaximumGCAge -1 day"),
        (GcSettings(min_age=HOUR, max_age=HOUR), "imageMaximumGCAge 1:00:00 must be greater than imageMinimumGCAge 1:00:00"),
    ],
    ids=["low-equals-high", "low-above-high", "high-over-100", "negative-low", "negative-min-age",
         "negative-max-age", "max-age-not-above-min-age"],
)
def test_settings_the_kubelet_refuses(gc: GcSettings, names: str) -> None:
    with pytest.raises(GcSettingsError) as caught:
        run([img("a")], gc=gc)
    assert names in str(caught.value)
    assert "\n" not in str(caught.value) and caught.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("gc", [GcSettings(1, 0), GcSettings(100, 99), GcSettings(min_age=timedelta(0), max_age=MINUTE)])
def test_settings_at_the_edges_are_accepted(gc: GcSettings) -> None:
    assert gc.problems() == [] and gc.validate() is gc


def test_high_threshold_100_without_max_age_switches_image_gc_off() -> None:
    plan = run([img("a")], gc=GcSettings(100, 99), fs=ImageFs(CAPACITY, 0))
    assert plan.outcome is Outcome.DISABLED and deleted(plan) == []
    assert [entry.fate for entry in plan.order] == [Fate.NOT_REACHED]


def test_high_threshold_100_with_max_age_still_deletes_by_age() -> None:
    plan = run([img("old", used_ago=3 * HOUR), img("fresh", used_ago=MINUTE)], gc=GcSettings(100, 99, max_age=HOUR))
    assert plan.outcome is Outcome.BELOW_THRESHOLD and deleted(plan) == ["old"]


# --- usage and the threshold step --------------------------------------------------------------


@pytest.mark.parametrize(
    "capacity, available, usage",
    [(10_000, 1500, 85), (10_000, 1501, 85), (10_000, 1599, 85), (10_000, 1600, 84),
     (10_000, 0, 100), (10_000, 10_000, 0), (10_000, 12_000, 0), (10_000, -5, 100), (0, 0, 100), (3, 1, 67)],
)
def test_usage_is_the_kubelets_integer_figure(capacity: int, available: int, usage: int) -> None:
    assert ImageFs(capacity, available).usage_percent == usage


@pytest.mark.parametrize("usage, runs", [(84, False), (85, True), (86, True)])
def test_threshold_gc_starts_at_exactly_the_high_threshold(usage: int, runs: bool) -> None:
    plan = run([img("a", 5000)], fs=fs_used(usage))
    assert (deleted(plan) == ["a"]) is runs
    assert plan.outcome is (Outcome.FREED_ENOUGH if runs else Outcome.BELOW_THRESHOLD)
    assert plan.amount_to_free == (CAPACITY * 20 // 100 - CAPACITY * (100 - usage) // 100 if runs else None)


def test_frees_down_to_the_low_threshold_and_stops_right_after() -> None:
    images = [img(f"i{n}", 400, age=(10 - n) * HOUR) for n in range(5)]
    plan = run(images, fs=fs_used(90))
    # amount = 20% of 10,000 minus 10% available = 1,000: three images of 400 reach it.
    assert plan.amount_to_free == 1000
    assert deleted(plan) == ["i0", "i1", "i2"]
    assert [entry.running_total for entry in plan.deletions] == [400, 800, 1200]
    assert [entry.fate for entry in plan.order[3:]] == [Fate.NOT_REACHED, Fate.NOT_REACHED]
    assert plan.outcome is Outcome.FREED_ENOUGH and plan.enough
    assert ImageFs(CAPACITY, plan.projected_available).usage_percent <= 80


def test_a_deletion_that_reaches_the_amount_exactly_is_the_last() -> None:
    plan = run([img("a", 600, age=3 * HOUR), img("b", 400, age=2 * HOUR), img("c", 1, age=HOUR)], fs=fs_used(90))
    assert deleted(plan) == ["a", "b"]


def test_amount_uses_integer_division_like_the_kubelet() -> None:
    fs = ImageFs(12_345, 1_000)  # usage 92
    plan = run([img("a", 10**6)], fs=fs)
    assert plan.amount_to_free == 12_345 * 20 // 100 - 1_000 == 1_469


def test_an_amount_of_zero_still_deletes_one_image() -> None:
    # The kubelet checks the freed total only after a deletion, so a zero target costs one image.
    plan = run([img("a", 5), img("b", 5, age=HOUR)], fs=ImageFs(1, 0))
    assert plan.amount_to_free == 0 and deleted(plan) == ["a"]


def test_shortfall_deletes_what_it_can_and_says_so_as_the_kubelet_does() -> None:
    plan = run([img("a", 300), img("busy", 5000), img("young", 5000, age=MINUTE)],
               (GcContainer("c1", "busy"),), fs=fs_used(95))
    assert deleted(plan) == ["a"] and plan.outcome is Outcome.SHORTFALL and not plan.enough
    # Word for word what kubelet 1.35+ says (1.37.2 logged it in the tests): usage, formatSize.
    assert plan.kubelet_message == (
        "Insufficient free disk space on the node's image filesystem (95% of 9.8 KiB used). Failed to free "
        "sufficient space by deleting unused images (freed 300 bytes). Investigate disk usage, as it could be "
        "used by active images, logs, volumes, or other data.")
    assert plan.kubelet_message == SHORTFALL_MESSAGE.format(usage=95, capacity="9.8 KiB", freed=300)


@pytest.mark.parametrize(("size", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (192 * 1024 * 1024, "192.0 MiB"),
    (1024**3 - 1, "1024.0 MiB"), (3 * 1024**3 // 2, "1.5 GiB"), (5 * 1024**4, "5.0 TiB"), (2048 * 1024**4, "2048.0 TiB"),
])
def test_sizes_in_the_shortfall_message_are_written_as_the_kubelet_writes_them(size: int, text: str) -> None:
    # Go's %.1f of the float, as the kubelet's formatSize: 1024**3 - 1 bytes is still "MiB".
    assert format_size(size) == text


def test_zero_capacity_stops_the_threshold_step_but_not_the_age_step() -> None:
    plan = run([img("old", used_ago=5 * HOUR), img("other", used_ago=MINUTE)],
               gc=GcSettings(max_age=HOUR), fs=ImageFs(0, 0))
    assert plan.outcome is Outcome.INVALID_CAPACITY
    assert plan.kubelet_message == "invalid capacity 0 on image filesystem"
    assert [(e.image.id, e.fate) for e in plan.deletions] == [("old", Fate.DELETED_AGE)]
    assert plan.amount_to_free is None


def test_simulated_usage_replaces_the_available_bytes() -> None:
    real = ImageFs(CAPACITY, 9_000)
    quiet = run([img("a")], fs=real)
    full = run([img("a")], fs=real, simulated_usage=95)
    assert quiet.outcome is Outcome.BELOW_THRESHOLD and not quiet.simulated
    assert full.simulated and full.usage_percent == 95 and full.fs == ImageFs(CAPACITY, 500)
    assert deleted(full) == ["a"]


@settings(max_examples=300, deadline=None)
@given(st.integers(100, 10**13), st.integers(0, 100))
def test_simulated_usage_is_what_the_kubelet_then_reads(capacity: int, percent: int) -> None:
    assert ImageFs(capacity, 0).at_usage(percent).usage_percent == percent


@pytest.mark.parametrize("percent", [-1, 100.5, 250])
def test_simulated_usage_out_of_range_is_refused(percent: float) -> None:
    with pytest.raises(ValueError, match="between 0 and 100"):
        ImageFs(CAPACITY, 0).at_usage(percent)


def test_fractional_simulated_usage() -> None:
    assert ImageFs(CAPACITY, 0).at_usage(85.5) == ImageFs(CAPACITY, 1450)


# --- what protects an image ---------------------------------------------------------------------


@pytest.mark.parametrize("state", ["created", "running", "exited", "unknown"])
def test_a_container_in_any_state_protects_its_image(state: ContainerState) -> None:
    container = GcContainer("c1", "used", state)
    plan = run([img("used"), img("free")], (container,), fs=fs_used(100))
    assert deleted(plan) == ["free"]
    (protected,) = plan.protected
    assert (protected.image.id, protected.reasons, protected.containers) == ("used", (Protection.IN_USE,), (container,))


def test_the_kubelet_matches_image_id_before_image_ref() -> None:
    container = GcContainer("c1", image_ref="b", image_id="a")
    plan = run([img("a"), img("b")], (container,), fs=fs_used(100))
    assert reasons(plan) == {"a": (Protection.IN_USE,)} and deleted(plan) == ["b"]


def test_a_container_naming_its_image_by_tag_protects_nothing() -> None:
    container = GcContainer("c1", image_ref="example.test/app:1", image="example.test/app:1")
    gone = GcContainer("c2", image_ref="sha256:gone")
    plan = run([img("app", refs=("example.test/app:1",))], (container, gone), fs=fs_used(100))
    assert deleted(plan) == ["app"]
    assert [(u.container.id, u.ref_of) for u in plan.unmatched_containers] == [("c1", "app"), ("c2", None)]


@pytest.mark.parametrize("state", ["created", "running", "exited"])
def test_an_image_a_container_mounts_as_a_volume_is_in_use(state: ContainerState) -> None:
    # ImageVolume (kubelet 1.35+): handleImageVolumes adds every Mount.image that is an image id.
    container = GcContainer("c1", "app", state, image_mounts=("data", "sha256:gone"))
    plan = run([img("app"), img("data"), img("free")], (container,), fs=fs_used(100))
    assert deleted(plan) == ["free"]
    assert reasons(plan) == {"app": (Protection.IN_USE,), "data": (Protection.IN_USE,)}
    assert {p.image.id: p.containers for p in plan.protected}["data"] == (container,)
    assert plan.unmatched_containers == ()


def test_a_mount_naming_an_image_by_tag_protects_nothing_in_the_kubelet() -> None:
    container = GcContainer("c1", "app", image_mounts=("example.test/data:1",))
    plan = run([img("app"), img("data", refs=("example.test/data:1",))], (container,), fs=fs_used(100))
    assert deleted(plan) == ["data"]


def test_pinned_images_are_never_deleted() -> None:
    plan = run([img("pin", pinned=True), img("pin-used", pinned=True), img("x")], (GcContainer("c", "pin-used"),),
               gc=GcSettings(max_age=HOUR), fs=ImageFs(CAPACITY, 0), mode="threshold")
    assert deleted(plan) == ["x"]
    assert reasons(plan) == {"pin": (Protection.PINNED,), "pin-used": (Protection.IN_USE, Protection.PINNED)}
    assert {entry.image.id for entry in plan.order} == {"x"}


@pytest.mark.parametrize("age, young", [(2 * MINUTE, False), (2 * MINUTE - timedelta(microseconds=1), True), (timedelta(0), True)])
def test_minimum_age_is_measured_from_first_detection(age: timedelta, young: bool) -> None:
    plan = run([img("a", 5000, age=age)], fs=fs_used(100))
    assert (deleted(plan) == []) is young
    if young:
        (protected,) = plan.protected
        assert protected.reasons == (Protection.TOO_YOUNG,) and protected.eligible_at == NOW - age + 2 * MINUTE


def test_a_too_young_image_is_skipped_not_a_stop() -> None:
    plan = run([img("old", 100, age=3 * HOUR), img("young", 100, age=MINUTE), img("older-use", 100, used_ago=HOUR)],
               fs=fs_used(100))
    assert deleted(plan) == ["old", "older-use"]
    assert [entry.fate for entry in plan.order] == [Fate.DELETED_SPACE, Fate.TOO_YOUNG, Fate.DELETED_SPACE]


def test_an_image_last_used_at_the_gc_time_is_passed_over() -> None:
    plan = run([img("now", used_ago=timedelta(0)), img("later", used_ago=-MINUTE), img("x")], fs=fs_used(100))
    assert deleted(plan) == ["x"]
    assert reasons(plan) == {"now": (Protection.IN_USE,), "later": (Protection.IN_USE,)}


# --- maximum age ----------------------------------------------------------------------------------


@pytest.mark.parametrize("used_ago, gone", [(HOUR + timedelta(seconds=1), True), (HOUR, False), (MINUTE, False)])
def test_max_age_deletes_by_last_use_whatever_the_usage(used_ago: timedelta, gone: bool) -> None:
    plan = run([img("a", used_ago=used_ago)], gc=GcSettings(max_age=HOUR), fs=fs_used(10))
    assert deleted(plan) == (["a"] if gone else [])
    assert plan.outcome is Outcome.BELOW_THRESHOLD


def test_max_age_takes_never_used_images_even_when_too_young() -> None:
    plan = run([img("new", age=MINUTE)], gc=GcSettings(max_age=HOUR), fs=fs_used(10))
    assert [(e.image.id, e.fate) for e in plan.deletions] == [("new", Fate.DELETED_AGE)]
    assert plan.protected == ()


@pytest.mark.parametrize("uptime, ran", [(HOUR, False), (HOUR + timedelta(seconds=1), True), (None, True)])
def test_max_age_waits_until_the_kubelet_has_run_that_long(uptime: Optional[timedelta], ran: bool) -> None:
    started = None if uptime is None else NOW - uptime
    plan = run([img("a", used_ago=2 * HOUR)], gc=GcSettings(max_age=HOUR), fs=fs_used(10), kubelet_started=started)
    assert (deleted(plan) == ["a"]) is ran


def test_max_age_runs_first_and_the_threshold_step_does_not_see_its_space() -> None:
    images = [img("recent", 200, used_ago=MINUTE), img("stale", 200, used_ago=2 * HOUR)]
    plan = run(images, gc=GcSettings(max_age=HOUR), fs=fs_used(86))
    # 200 freed by age would leave usage at 84, under the high threshold; but the kubelet's
    # figures are cadvisor's sample from before the deletion: 86, so the threshold step runs too.
    assert (plan.usage_percent, plan.threshold_usage_percent) == (86, 86)
    assert deleted(plan) == ["stale", "recent"]
    assert [e.fate for e in plan.deletions] == [Fate.DELETED_AGE, Fate.DELETED_SPACE]


def test_age_deletions_come_before_space_deletions() -> None:
    images = [img("never", 100, age=5 * HOUR), img("stale", 100, used_ago=3 * HOUR), img("recent", 100, used_ago=MINUTE)]
    plan = run(images, gc=GcSettings(max_age=2 * HOUR), fs=fs_used(99))
    assert [(e.image.id, e.fate, e.sequence, e.running_total) for e in plan.deletions] == [
        ("never", Fate.DELETED_AGE, 1, 100), ("stale", Fate.DELETED_AGE, 2, 200), ("recent", Fate.DELETED_SPACE, 3, 300),
    ]


# --- the eviction order ---------------------------------------------------------------------------


def test_order_is_last_used_then_first_detected_oldest_first() -> None:
    images = [
        img("used-1h", used_ago=HOUR, age=20 * HOUR),
        img("used-3h", used_ago=3 * HOUR, age=5 * HOUR),
        img("never-5h", age=5 * HOUR),
        img("never-9h", age=9 * HOUR),
        img("used-3h-older", used_ago=3 * HOUR, age=8 * HOUR),
    ]
    plan = run(images, fs=fs_used(100))
    assert [e.image.id for e in plan.order] == ["never-9h", "never-5h", "used-3h-older", "used-3h", "used-1h"]
    assert [e.position for e in plan.order] == [1, 2, 3, 4, 5]
    assert not any(entry.tie for entry in plan.order)


def test_exact_ties_are_flagged_and_equal_sizes_ordered_by_id() -> None:
    images = [img("b", used_ago=HOUR), img("a", used_ago=HOUR), img("c", used_ago=2 * HOUR)]
    plan = run(images, fs=fs_used(100))
    assert [(e.image.id, e.tie) for e in plan.order] == [("c", False), ("a", True), ("b", True)]


def test_duplicate_image_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        run([img("a"), img("a")])


# --- delete all unused (the eviction manager) ------------------------------------------------------


def test_all_unused_mode_deletes_every_eligible_image_at_any_usage() -> None:
    images = [img("a"), img("b", used_ago=MINUTE), img("young", age=MINUTE), img("used"), img("pin", pinned=True)]
    plan = run(images, (GcContainer("c", "used"),), gc=GcSettings(max_age=HOUR), fs=fs_used(1), mode="all_unused")
    assert plan.outcome is Outcome.ALL_UNUSED and plan.amount_to_free is None
    assert deleted(plan) == ["a", "b"] and {e.fate for e in plan.deletions} == {Fate.DELETED_SPACE}
    assert reasons(plan) == {"young": (Protection.TOO_YOUNG,), "used": (Protection.IN_USE,), "pin": (Protection.PINNED,)}


# --- wanted but not protected by the runtime ------------------------------------------------------


def test_wanted_images_the_runtime_does_not_pin_are_at_risk_with_their_position() -> None:
    images = [img("a", 600, age=5 * HOUR), img("keep", 600, age=4 * HOUR), img("b", 600, age=3 * HOUR),
              img("later", 600, age=2 * HOUR), img("pinned", pinned=True), img("used"), img("young", age=MINUTE)]
    wanted = {"keep": "label", "later": "policy example.test/*", "pinned": "label", "used": "label",
              "young": "label", "absent": "label"}
    plan = run(images, (GcContainer("c", "used"),), fs=fs_used(90), wanted=wanted)
    summary = [(r.image.id, r.wanted_because, r.position, r.fate, r.deleted, r.protected_now_by) for r in plan.at_risk]
    assert summary == [
        ("keep", "label", 2, Fate.DELETED_SPACE, True, ()),
        ("later", "policy example.test/*", 4, Fate.NOT_REACHED, False, ()),
        ("young", "label", 5, Fate.TOO_YOUNG, False, (Protection.TOO_YOUNG,)),
        ("used", "label", None, None, False, (Protection.IN_USE,)),
    ]
    assert [r.image.id for r in plan.wanted_deleted] == ["keep"]
    assert plan.wanted_missing == ("absent",)


def test_a_wanted_image_is_deleted_only_at_a_usage_that_reaches_it() -> None:
    images = [img(f"i{n}", 500, age=(9 - n) * HOUR) for n in range(4)]
    at = {pct: run(images, fs=ImageFs(CAPACITY, 0), simulated_usage=pct, wanted={"i3": "label"}) for pct in (84, 90, 99)}
    assert [at[pct].wanted_deleted != () for pct in (84, 90, 99)] == [False, False, True]
    assert {at[pct].at_risk[0].position for pct in at} == {4}


# --- estimating the kubelet's times ---------------------------------------------------------------


def test_estimate_from_what_the_runtime_shows() -> None:
    started = NOW - 30 * MINUTE
    observed = [
        ObservedImage("used", 10, ("example.test/used:1",), created_at=NOW - 5 * HOUR),
        ObservedImage("idle", 20, created_at=NOW - 5 * HOUR),
        ObservedImage("seen", 30, created_at=NOW - 10 * MINUTE),
        ObservedImage("unknown", 40, pinned=True),
    ]
    container = ObservedContainer("c", "used", "exited", created_at=NOW - 2 * HOUR,
                                  started_at=NOW - HOUR, finished_at=NOW - HOUR - timedelta(seconds=1))
    found = {e.image.id: e for e in estimate_images(observed, [container], NOW, kubelet_started=started,
                                                   history={"seen": NOW - 3 * MINUTE})}
    assert (found["used"].image.last_used, found["used"].last_used_source) == (NOW, TimeSource.IN_USE_NOW)
    assert found["used"].last_container_activity == NOW - HOUR
    assert (found["used"].image.first_detected, found["used"].first_detected_source) == (started, TimeSource.KUBELET_START)
    assert (found["idle"].image.last_used, found["idle"].last_used_source) == (None, TimeSource.UNKNOWN)
    assert (found["seen"].image.last_used, found["seen"].last_used_source) == (NOW - 3 * MINUTE, TimeSource.HISTORY)
    # Created 20 minutes after the kubelet started: its pass at start + 20m saw it.
    assert (found["seen"].image.first_detected, found["seen"].first_detected_source) == (NOW - 10 * MINUTE, TimeSource.DETECTION_PASS)
    assert (found["unknown"].image.first_detected, found["unknown"].first_detected_source) == (NOW, TimeSource.NOW)
    assert found["unknown"].image.pinned and found["used"].image.refs == ("example.test/used:1",)


def test_without_the_kubelets_start_the_record_time_stands_in() -> None:
    (found,) = estimate_images([ObservedImage("a", 1, created_at=NOW - 7 * MINUTE)], [], NOW)
    assert (found.image.first_detected, found.first_detected_source) == (NOW - 7 * MINUTE, TimeSource.IMAGE_CREATED)


def test_an_image_is_first_detected_at_the_kubelets_next_pass_after_it_arrived() -> None:
    started = NOW - 12 * MINUTE  # passes at start, +5m, +10m; the next at NOW + 3m
    observed = [
        ObservedImage("before", 1, created_at=started - HOUR),
        ObservedImage("at-start", 1, created_at=started),
        ObservedImage("early", 1, created_at=started + timedelta(seconds=1)),
        ObservedImage("on-the-pass", 1, created_at=started + 5 * MINUTE),
        ObservedImage("also-early", 1, created_at=started + 4 * MINUTE),
        ObservedImage("late", 1, created_at=started + 11 * MINUTE),
    ]
    found = {e.image.id: (e.image.first_detected, e.first_detected_source)
             for e in estimate_images(observed, [], NOW, kubelet_started=started)}
    assert found == {
        "before": (started, TimeSource.KUBELET_START),
        "at-start": (started, TimeSource.KUBELET_START),
        "early": (started + 5 * MINUTE, TimeSource.DETECTION_PASS),
        "on-the-pass": (started + 5 * MINUTE, TimeSource.DETECTION_PASS),
        "also-early": (started + 5 * MINUTE, TimeSource.DETECTION_PASS),
        # No pass has seen it: the run itself is its first detection.
        "late": (NOW, TimeSource.NOT_DETECTED),
    }


def test_images_one_pass_saw_first_tie_and_the_minimum_age_counts_from_the_pass() -> None:
    # "late" arrived 7 minutes ago, past the minimum age, but the pass that saw it was 2 minutes ago.
    started = NOW - 12 * MINUTE
    observed = [ObservedImage(name, 1, created_at=started + offset) for name, offset in
                (("old-a", -HOUR), ("old-b", -2 * HOUR), ("mid-a", 2 * MINUTE), ("mid-b", 4 * MINUTE),
                 ("late", 5 * MINUTE + timedelta(seconds=1)))]
    images = [e.image for e in estimate_images(observed, [], NOW, kubelet_started=started)]
    plan = run(images, gc=GcSettings(min_age=4 * MINUTE), fs=fs_used(100), kubelet_started=started)
    order = [(e.image.id, e.fate, e.tie) for e in plan.order]
    assert order == [("old-a", Fate.DELETED_SPACE, True), ("old-b", Fate.DELETED_SPACE, True),
                     ("mid-a", Fate.DELETED_SPACE, True), ("mid-b", Fate.DELETED_SPACE, True),
                     ("late", Fate.TOO_YOUNG, False)]
    assert [e.image.first_detected for e in plan.order][1:3] == [started, started + 5 * MINUTE]


def test_estimates_feed_the_model() -> None:
    observed = [ObservedImage("used", 10, created_at=NOW - 5 * HOUR), ObservedImage("idle", 20, created_at=NOW - 5 * HOUR),
                ObservedImage("new", 30)]
    containers = [ObservedContainer("c", "used", "created")]
    estimates = estimate_images(observed, containers, NOW)
    plan = run([e.image for e in estimates], tuple(c.as_gc_container() for c in containers), fs=fs_used(100))
    assert deleted(plan) == ["idle"]
    assert reasons(plan) == {"used": (Protection.IN_USE,), "new": (Protection.TOO_YOUNG,)}


def test_the_estimate_notes_say_where_pinctl_and_the_kubelet_differ() -> None:
    for topic in ("restart", "5 minutes", "any state", "minimum age", "maximum age"):
        assert topic in ESTIMATE_NOTES


# --- properties over random nodes ------------------------------------------------------------------

Node = tuple[list[GcImage], list[GcContainer], GcSettings, ImageFs, dict[str, object]]
image_ids = st.sampled_from([f"sha256:{n:02d}" for n in range(12)])
offsets = st.integers(-120, 24 * 60).map(lambda minutes: timedelta(minutes=minutes))


@st.composite
def nodes(draw: st.DrawFn) -> Node:
    ids = draw(st.lists(image_ids, unique=True, max_size=10))
    images = [
        GcImage(image_id, draw(st.integers(1, 5_000)), NOW - draw(offsets),
                draw(st.one_of(st.none(), offsets.map(lambda ago: NOW - ago))), (), draw(st.booleans()))
        for image_id in ids
    ]
    states: st.SearchStrategy[ContainerState] = st.sampled_from(["created", "running", "exited", "unknown"])
    containers = [GcContainer(f"c{n}", image_id, draw(states)) for n, image_id in enumerate(draw(st.lists(image_ids, max_size=6)))]
    high = draw(st.integers(1, 100))
    min_age = timedelta(minutes=draw(st.integers(0, 30)))
    max_age = draw(st.sampled_from([timedelta(0), min_age + HOUR, min_age + 10 * HOUR]))
    gc = GcSettings(high, draw(st.integers(0, high - 1)), min_age, max_age)
    capacity = draw(st.integers(0, 60_000))
    fs = ImageFs(capacity, draw(st.integers(0, capacity + 1_000)))
    options: dict[str, object] = {"mode": draw(st.sampled_from(["threshold", "all_unused"]))}
    if capacity and draw(st.booleans()):
        options["simulated_usage"] = draw(st.integers(0, 100))
    return images, containers, gc, fs, options


def _plan(node: Node) -> GcPlan:
    images, containers, gc, fs, options = node
    mode: GcMode = options["mode"]  # type: ignore[assignment]
    simulated = options.get("simulated_usage")
    return plan_gc(images, containers, gc, fs, NOW, mode=mode, simulated_usage=simulated,  # type: ignore[arg-type]
                   wanted={image.id: "wanted" for image in images})


PROPERTY_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(nodes())
def test_never_deletes_a_protected_image(node: Node) -> None:
    images, containers, gc, _, _ = node
    plan = _plan(node)
    gone = {entry.image.id for entry in plan.deletions}
    assert not gone & {c.kubelet_image_id for c in containers}
    assert not gone & {image.id for image in images if image.pinned}
    assert not gone & {item.image.id for item in plan.protected}
    for entry in plan.deletions:
        if entry.fate is Fate.DELETED_SPACE:
            assert NOW - entry.image.first_detected >= gc.min_age
            assert entry.image.last_used is None or entry.image.last_used < NOW
    assert {r.image.id for r in plan.wanted_deleted if r.deleted} <= gone
    # The rest of what the plan calls lost is in the tie the walk stops inside.
    tie = plan.straddled_tie
    assert {r.image.id for r in plan.wanted_deleted if not r.deleted} <= set(tie.image_ids if tie else ())


@PROPERTY_SETTINGS
@given(nodes())
def test_running_total_grows_with_every_deletion(node: Node) -> None:
    plan = _plan(node)
    totals = [entry.running_total or 0 for entry in plan.deletions]
    assert [entry.sequence for entry in plan.deletions] == list(range(1, len(totals) + 1))
    assert all(later > earlier for earlier, later in zip(totals, totals[1:]))
    assert totals[-1:] == ([plan.freed_bytes] if totals else [])
    availables = [entry.available_after or 0 for entry in plan.deletions]
    assert availables == sorted(availables) and all(a <= plan.fs.capacity_bytes for a in availables)


@PROPERTY_SETTINGS
@given(nodes())
def test_enough_means_usage_at_or_below_the_low_threshold(node: Node) -> None:
    plan = _plan(node)
    gc, capacity = plan.settings, plan.fs.capacity_bytes
    if plan.outcome is Outcome.FREED_ENOUGH:
        assert plan.projected_available >= capacity * (100 - gc.low_threshold_percent) // 100
        used_after = capacity - plan.projected_available
        assert used_after * 100 <= gc.low_threshold_percent * capacity + 100  # within the kubelet's 1-byte rounding
    if plan.outcome is Outcome.SHORTFALL:
        # Nothing that could go was kept: every survivor in the order was too young or used now.
        assert {e.fate for e in plan.order if not e.fate.deleted} <= {Fate.TOO_YOUNG, Fate.USED_NOW}
        assert plan.space_freed_bytes < (plan.amount_to_free or 0)
    if any(e.fate is Fate.DELETED_SPACE for e in plan.order) and plan.mode == "threshold":
        assert (plan.threshold_usage_percent or 0) >= gc.high_threshold_percent


@PROPERTY_SETTINGS
@given(nodes())
def test_every_image_is_deleted_protected_or_waiting(node: Node) -> None:
    images = node[0]
    plan = _plan(node)
    gone = {e.image.id for e in plan.deletions}
    kept = {p.image.id for p in plan.protected}
    waiting = {e.image.id for e in plan.order if e.fate is Fate.NOT_REACHED}
    assert gone | kept | waiting == {image.id for image in images}
    assert not gone & kept and not gone & waiting

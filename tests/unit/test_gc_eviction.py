"""The eviction manager's disk signals (pinctl.gc.eviction) and how gc plan reports them."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from fractions import Fraction
from pathlib import Path

import pytest

from pinctl.errors import ConfigError
from pinctl.gc import eviction
from pinctl.gc import plan as gc
from pinctl.gc.eviction import EvictionConfig, FsFigures
from pinctl.gc.kubelet import SourcedGcSettings, parse_duration, read_gc_settings
from pinctl.gc.model import GcSettings
from pinctl.model import Reason
from pinctl.render import gc as gc_output

from .test_gc_service import MiB, NOW, FakeDomain, node_images, row_for


def thresholds(**fields: object) -> dict[str, str]:
    found = eviction.thresholds(EvictionConfig(**fields), parse_duration)  # type: ignore[arg-type]
    return {t.signal + ("" if t.hard else " soft"): t.text for t in found}


def test_no_eviction_hard_is_the_linux_defaults_and_a_set_map_replaces_them() -> None:
    assert thresholds() == {"imagefs.available": "15%", "imagefs.inodesFree": "5%", "nodefs.available": "10%",
                            "nodefs.inodesFree": "5%"}
    # cmd/kubelet loadConfigFile: a map that is set, even empty, is used as it is.
    assert thresholds(hard={}) == {}
    assert thresholds(hard={"imagefs.available": "100Mi", "memory.available": "1Gi"}) == {"imagefs.available": "100Mi"}
    merged = thresholds(hard={"imagefs.available": "20%"}, merge_defaults=True)
    assert merged["imagefs.available"] == "20%" and merged["nodefs.available"] == "10%"


def test_soft_thresholds_need_a_grace_period_and_zero_and_hundred_percent_are_ignored() -> None:
    found = eviction.thresholds(EvictionConfig(hard={"imagefs.available": "0%", "nodefs.available": "100%"},
                                               soft={"imagefs.available": "30%"},
                                               grace={"imagefs.available": "1m30s"}, where="k.yaml"), parse_duration)
    [soft] = found
    assert (soft.signal, soft.hard, soft.grace, soft.source) == ("imagefs.available", False, timedelta(seconds=90),
                                                                 "k.yaml evictionSoft")
    with pytest.raises(ConfigError, match="evictionSoft imagefs.available has no evictionSoftGracePeriod"):
        eviction.thresholds(EvictionConfig(hard={}, soft={"imagefs.available": "30%"}, where="k.yaml"), parse_duration)


@pytest.mark.parametrize("hard, message", [
    ({"imagefs.avail": "1Gi"}, "unknown eviction signal 'imagefs.avail'"),
    ({"imagefs.available": "150%"}, "between 0% and 100%"),
    ({"imagefs.available": "-1Mi"}, "must be positive"),
    ({"imagefs.available": "lots"}, "not a quantity"),
    ({"imagefs.available": 15}, "must map signals to strings"),
])
def test_bad_thresholds_are_one_line_naming_the_field(hard: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        eviction.thresholds(EvictionConfig(hard=hard, where="/etc/k.yaml"), parse_duration)
    assert str(caught.value).startswith("kubelet config /etc/k.yaml: evictionHard")


@pytest.mark.parametrize("text, value", [
    ("100Mi", 100 * MiB), ("1.5Gi", 3 * 512 * MiB), ("500M", 500_000_000), ("2e3", 2000), ("1024", 1024),
    ("1k", 1000), ("500m", Fraction(1, 2)),
])
def test_quantities(text: str, value: Fraction) -> None:
    assert eviction.parse_quantity(text) == value


def test_a_percentage_is_the_kubelets_float32_of_the_capacity() -> None:
    [threshold] = eviction.thresholds(EvictionConfig(hard={"imagefs.available": "15%"}), parse_duration)
    # float32(15)/100 is 0.150000006; int64(float64(capacity) * that) for this capacity:
    assert threshold.value(100_000_000_000) == 15_000_000_596
    assert threshold.value(100 * MiB) == 15728640


def check(available: int, *, hard: dict[str, str], nodefs: FsFigures | None = None) -> eviction.EvictionCheck:
    found = eviction.thresholds(EvictionConfig(hard=hard), parse_duration)
    return eviction.check(found, FsFigures(100 * MiB, available, 1000, 900, device=1), nodefs, "not measured")


def test_met_means_available_less_than_the_threshold() -> None:
    at = check(40 * MiB, hard={"imagefs.available": "40Mi"})
    assert not at.met and at.signals[0].headroom == 0
    below = check(40 * MiB - 1, hard={"imagefs.available": "40Mi"})
    assert below.met and below.deletes_now and below.signals[0].headroom == -1


def test_nodefs_deletes_images_only_when_it_is_the_image_filesystem() -> None:
    full_root = FsFigures(100 * MiB, 1 * MiB, device=2)
    dedicated = check(90 * MiB, hard={"nodefs.available": "10%"}, nodefs=full_root)
    assert dedicated.dedicated_imagefs is True and dedicated.signals[0].met and not dedicated.met
    shared = check(90 * MiB, hard={"nodefs.available": "10%"}, nodefs=FsFigures(100 * MiB, 1 * MiB, device=1))
    assert shared.dedicated_imagefs is False and shared.deletes_now
    unknown = check(90 * MiB, hard={"nodefs.available": "10%"})
    assert unknown.dedicated_imagefs is None and not unknown.met and unknown.signals[0].fs_source == "not measured"


def test_inode_signals_read_inodes() -> None:
    assert check(90 * MiB, hard={"imagefs.inodesFree": "91%"}).deletes_now
    assert not check(90 * MiB, hard={"imagefs.inodesFree": "90%"}).met


def test_a_met_soft_threshold_deletes_after_its_grace_period() -> None:
    found = eviction.thresholds(EvictionConfig(hard={}, soft={"imagefs.available": "50%"},
                                               grace={"imagefs.available": "2m"}), parse_duration)
    checked = eviction.check(found, FsFigures(100 * MiB, 40 * MiB), None)
    assert checked.met and not checked.deletes_now and checked.grace == timedelta(minutes=2)


def plan_report(used_percent: int, settings: SourcedGcSettings, usage: float | None = None) -> gc.GcReport:
    images, containers = node_images()
    rows = [row_for(images[0], Reason("label", images[0].refs[0]))]
    return gc.gc_plan(FakeDomain(images, containers, used_percent), rows, settings, NOW, usage)


def sourced(hard: dict[str, str]) -> SourcedGcSettings:
    # GC thresholds at 99/98: the periodic GC deletes nothing at these usages.
    return SourcedGcSettings(GcSettings(99, 98), {}, EvictionConfig(hard=hard, where="k.yaml"))


def test_gc_plan_lists_what_delete_unused_images_deletes_when_the_signal_is_met() -> None:
    report = plan_report(70, sourced({"imagefs.available": "40Mi"}))
    assert report.plan.deletions == () and report.eviction is not None and report.eviction.check.deletes_now
    evicting = report.eviction.plan
    assert evicting is not None and evicting.mode == "all_unused"
    # Every unused, unpinned image past the minimum age: not the in-use c, the pinned e, the young d.
    assert [e.image.refs[0] for e in evicting.deletions] == ["example.test/a:1", "example.test/b:1", "example.test/f:1"]
    # c's one user has exited: DeleteAllUnusedContainers may remove it first, and then c goes too.
    assert [image.refs[0] for image in report.eviction.kept_by_dead_containers] == ["example.test/c:1"]
    # a carries a pin label the fake runtime ignores: at risk from the eviction manager, exit 1.
    assert [r.image.refs[0] for r in report.eviction.wanted_deleted] == ["example.test/a:1"] and report.exit_code == 1
    out = io.StringIO()
    gc_output.print_gc_plan(report, "table", out)
    text = out.getvalue()
    assert ("Eviction:    met: imagefs.available<40Mi (hard, k.yaml evictionHard): 30.0 MiB free, 10.0 MiB below "
            "its 40.0 MiB; now (it checks every 10s) the eviction manager deletes every unused unpinned image past "
            "the minimum age: 3 images, 30.0 MiB") in " ".join(line.strip() for line in text.splitlines())
    assert "EVICTION MANAGER'S DeleteUnusedImages" in text


def test_not_met_says_how_close_and_usage_simulation_applies() -> None:
    report = plan_report(50, sourced({"imagefs.available": "40Mi"}))
    assert report.eviction is not None and not report.eviction.check.met and report.eviction.plan is None
    assert gc_output.eviction_line(report.eviction) == ("not met: imagefs.available<40Mi (hard, k.yaml evictionHard): "
                                                        "50.0 MiB free, 10.0 MiB above its 40.0 MiB")
    assert report.exit_code == 0
    simulated = plan_report(50, sourced({"imagefs.available": "40Mi"}), usage=65)
    assert simulated.eviction is not None and simulated.eviction.check.deletes_now
    out = io.StringIO()
    gc_output.print_gc_plan(simulated, "json", out)
    body = json.loads(out.getvalue())["gc"]["eviction"]
    assert body["met"] is True and body["signals"][0]["available"] == 35 * MiB
    assert [e["refs"][0] for e in body["order"] if e["deleted"]] == ["example.test/a:1", "example.test/b:1",
                                                                       "example.test/f:1"]


def test_the_config_files_eviction_fields_reach_gc_plan(tmp_path: Path) -> None:
    path = tmp_path / "kubelet.yaml"
    path.write_text("evictionHard:\n  imagefs.available: 40Mi\nevictionSoft: {nodefs.available: 20%}\n"
                    "evictionSoftGracePeriod: {nodefs.available: 1m}\n")
    read = read_gc_settings(str(path))
    assert read.eviction == EvictionConfig({"imagefs.available": "40Mi"}, {"nodefs.available": "20%"},
                                           {"nodefs.available": "1m"}, False, str(path))
    assert read_gc_settings(None, default_path=str(tmp_path / "none.yaml")).eviction == EvictionConfig()

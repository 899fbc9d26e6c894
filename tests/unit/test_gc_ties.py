"""Ties in the kubelet's order (gc/ties.py): which images it ranks equal, and what a threshold
step that stops inside a tie can delete, held against every order the kubelet could walk."""

from __future__ import annotations

import io
import json
from itertools import permutations

import pytest

from hypothesis import given
from hypothesis import strategies as st

from pinctl.gc.model import Fate, GcSettings, ImageFs
from pinctl.gc.ties import stop_range
from tests.unit.test_gcmodel import CAPACITY, HOUR, fs_used, img, run

MiB = 1 << 20


def walk(sizes: tuple[int, ...], need: int) -> tuple[int, int]:
    """freeSpace over one order: how many it deletes and what they free."""
    freed = 0
    for count, size in enumerate(sizes, start=1):
        freed += size
        if freed >= need:
            return count, freed
    return len(sizes), freed


@given(st.lists(st.integers(1, 50), min_size=1, max_size=6), st.data())
def test_the_range_holds_every_order_and_its_counts_are_reached(sizes: list[int], data: st.DataObject) -> None:
    need = data.draw(st.integers(1, sum(sizes)))
    fewest, most, freed_min, freed_max = stop_range(sizes, need)
    outcomes = {walk(order, need) for order in permutations(sizes)}
    assert all(fewest <= count <= most and freed_min <= freed <= freed_max for count, freed in outcomes)
    # The counts are exact: some order deletes the fewest, some the most.
    assert min(count for count, _ in outcomes) == fewest and max(count for count, _ in outcomes) == most
    assert freed_min >= need and freed_max < need + max(sizes)


def test_a_tie_the_walk_stops_inside_is_n_of_m_and_the_wanted_ones_in_it_may_go() -> None:
    # Eight never-used images first seen together (a tie), 1 MiB each; 4.5 MiB to free.
    images = [img(f"t{n}", MiB) for n in range(8)] + [img("older", 3 * MiB, age=20 * HOUR, used_ago=15 * HOUR)]
    capacity = 100 * MiB
    fs = ImageFs(capacity, capacity * 20 // 100 - 9 * MiB // 2)  # 85% used; the low threshold 80%
    plan = run(images, gc=GcSettings(85, 80), fs=fs, wanted={"t7": "pin label"})
    (tie,) = plan.ties
    assert tie.straddled and plan.straddled_tie == tie and tie.size == 8 and tie.positions == tuple(range(1, 9))
    assert (tie.deleted_min, tie.deleted_max, tie.freed_min, tie.freed_max) == (5, 5, 5 * MiB, 5 * MiB)
    assert plan.freed_bounds == (plan.freed_bytes, plan.freed_bytes) == (5 * MiB, 5 * MiB)
    # The plan's own pick (prune's) is five of them; t7 is not among them, but the kubelet may take it.
    assert sum(entry.fate is Fate.DELETED_SPACE for entry in plan.order) == 5
    (risk,) = plan.at_risk
    assert not risk.deleted and risk.may_go and plan.wanted_deleted == (risk,)
    # The older, used image comes after the tie: the walk never reaches it whatever the order.
    assert plan.order[-1].image.id == "older" and plan.order[-1].fate is Fate.NOT_REACHED


def test_a_tie_the_walk_passes_or_never_reaches_is_all_or_nothing() -> None:
    images = [img("a"), img("b"), img("c", used_ago=HOUR), img("d", used_ago=HOUR)]
    everything = run(images, fs=fs_used(100))  # 9,000 to free, 400 there: every image goes
    assert [(t.straddled, t.deleted_min, t.deleted_max, t.freed_min) for t in everything.ties] == [
        (False, 2, 2, 200), (False, 2, 2, 200)]
    nothing = run(images, fs=fs_used(50))
    assert [(t.straddled, t.deleted_max) for t in nothing.ties] == [(False, 0), (False, 0)]
    # Exactly the first tie's worth: every order deletes both and stops there.
    exact = run(images, gc=GcSettings(82, 80), fs=ImageFs(CAPACITY, CAPACITY * 20 // 100 - 200))  # 82% used
    assert [(t.straddled, t.deleted_max) for t in exact.ties] == [(False, 2), (False, 0)]


def test_within_a_tie_the_plan_takes_the_largest_first_then_the_id() -> None:
    images = [img("b", 100), img("a", 100), img("small", 50), img("large", 300)]
    plan = run(images, fs=fs_used(100))
    assert [e.image.id for e in plan.order] == ["large", "a", "b", "small"] and all(e.tie for e in plan.order)


def test_gc_plan_says_n_of_these_m_and_json_states_the_tie(capsys: pytest.CaptureFixture[str]) -> None:
    from pinctl.gc import plan as gc
    from pinctl.gc.kubelet import SourcedGcSettings
    from pinctl.model import Reason
    from pinctl.render import gc as gc_output
    from tests.unit.test_gc_service import NOW, FakeDomain, node_images, row_for

    # a, b and f: 10 MiB each, never used, first seen together; 90% used, 10 MiB to free at 85/80.
    images, containers = node_images()
    rows = [row_for(images[1], Reason("pattern", "example.test/b:*", "config.toml:1"))]
    report = gc.gc_plan(FakeDomain(images, containers, 90), rows, SourcedGcSettings(GcSettings(85, 80), {}), NOW)
    table = io.StringIO()
    gc_output.print_gc_plan(report, "table", table)
    text = table.getvalue()
    assert ("Tie:         1 of these 3 (positions 1-3) go, about 10.0 MiB freed; the kubelet ranks them equal and "
            "picks in Go map order") in text
    fates = [line for line in text.splitlines() if "tie: 1 of 3 go" in line]
    assert len(fates) == 3 and any("example.test/b:1" in line and "at risk" in line for line in fates)
    assert "1 image pinctl wants kept may be deleted" in capsys.readouterr().err and report.exit_code == 1
    doc = io.StringIO()
    gc_output.print_gc_plan(report, "json", doc)
    body = json.loads(doc.getvalue())["gc"]
    assert body["ties"] == [{"number": 1, "positions": [1, 2, 3], "image_ids": [images[0].id, images[1].id, images[5].id],
                             "total_bytes": 30 * MiB, "straddled": True, "deleted_min": 1, "deleted_max": 1,
                             "freed_min": 10 * MiB, "freed_max": 10 * MiB}]
    assert [e["tie_group"] for e in body["order"]] == [1, 1, 1, None]  # d, too young, ties with none
    assert [(r["deleted"], r["may_go"]) for r in body["at_risk"]] == [(False, True)]


def test_prune_takes_the_largest_of_a_tie_first_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    from pinctl.gc import plan as gc
    from pinctl.render import gc as gc_output
    from tests.unit.test_gc_service import NOW, FakeDomain, image

    # Never used, all there before any kubelet: one tie. 90% used, down to 80%: 10 MiB to free.
    images = [image("a", 10 * MiB), image("b", 6 * MiB), image("c", 12 * MiB), image("d", 6 * MiB)]
    domain = FakeDomain(images, [], used_percent=90)
    plan = gc.plan_prune(domain, [], GcSettings(85, 80), gc.PruneRequest(), NOW)
    tie = plan.plan.straddled_tie
    assert tie is not None and (tie.deleted_min, tie.deleted_max) == (1, 2)
    assert [i.id for i in plan.delete] == [images[2].id]  # the largest alone reaches the target
    low, high = plan.plan.freed_bounds
    assert low == 10 * MiB <= plan.plan.freed_bytes <= high == 10 * MiB - 1 + 12 * MiB
    gc_output.print_prune_plan([plan])
    shown = capsys.readouterr().err
    assert "example.test/c:1" in shown and "(tie)" in shown
    assert ("tie: the kubelet ranks 4 images equal and would take 1 to 2 of them in no set order; prune takes the "
            "largest first, then by image ID") in " ".join(shown.split())
    items = gc.apply_prune([plan], lambda _image: None, dry_run=False)
    assert domain.removed == [images[2].id] and [i.action for i in items] == ["removed"]
    # The same node planned again picks the same image: nothing in the pick is chance.
    again = gc.plan_prune(FakeDomain(images, [], used_percent=90), [], GcSettings(85, 80), gc.PruneRequest(), NOW)
    assert [i.id for i in again.delete] == [images[2].id]


def test_a_long_tie_is_one_row_without_wide_and_every_member_with_it() -> None:
    from pinctl.gc import plan as gc
    from pinctl.gc.kubelet import SourcedGcSettings
    from pinctl.model import Reason
    from pinctl.render import gc as gc_output
    from tests.unit.test_gc_service import NOW, FakeDomain, image, row_for

    images = [image(f"{n:x}", MiB // 2) for n in range(1, 16)]  # 15 alike, never used
    rows = [row_for(images[3], Reason("label", images[3].refs[0]))]
    report = gc.gc_plan(FakeDomain(images, [], 82), rows, SourcedGcSettings(GcSettings(82, 80), {}), NOW)
    assert report.plan.straddled_tie is not None and report.plan.straddled_tie.size == 15
    short, wide = io.StringIO(), io.StringIO()
    gc_output.print_gc_plan(report, "table", short)
    gc_output.print_gc_plan(report, "wide", wide)
    order = short.getvalue().split("DELETION ORDER")[1].split("\n\n")[0].splitlines()
    # The header, the wanted member on its own row, and one row for the other fourteen.
    assert len(order) == 3 + 1 and any("14 tied images" in line and "1-15" in line for line in order)
    assert any(images[3].refs[0] in line and "at risk" in line for line in order)
    assert sum("tie: 4 of 15 go" in line for line in wide.getvalue().splitlines()) == 15

"""How scripts/test splits the suite over xdist workers (tests/harness/work_units.py), and the
port slices that keep two workers' servers apart (tests/harness/ports.py)."""

from __future__ import annotations

import pathlib

from tests.harness import ports, work_units

TESTS = pathlib.Path(__file__).resolve().parents[1]


def test_a_module_is_one_unit_and_the_fleet_modules_are_one_together() -> None:
    assert work_units.unit_of("tests/unit/test_refs.py::test_normalize[a-b]") == "tests/unit/test_refs.py"
    assert work_units.unit_of("tests/integration/test_fleet.py::test_x") == work_units.FLEET_UNIT
    assert work_units.unit_of("tests/integration/test_fleet_status.py::test_x") == work_units.FLEET_UNIT
    assert work_units.unit_of("tests/integration/test_cluster.py::test_y[ctd17]") == work_units.CONTROL_PLANE_UNIT
    assert work_units.unit_of("tests/integration/test_prometheus3.py::test_y") == work_units.CONTROL_PLANE_UNIT
    assert work_units.unit_of("tests/integration/test_kubelet_gc.py::test_z") == work_units.PERIODIC_UNIT
    # Only the integration modules of those names: a unit test of the same name is its own unit.
    assert work_units.unit_of("tests/unit/test_fleet.py::test_x") == "tests/unit/test_fleet.py"
    # A parameter with :: or @ in it does not move the test to another unit.
    assert work_units.unit_of("tests/unit/test_refs.py::test_a[x::y@z]") == "tests/unit/test_refs.py"


def test_the_fleet_goes_first_then_the_long_ones_and_the_periodic_module_before_the_unit_modules() -> None:
    order = sorted(["tests/unit/test_refs.py", "tests/integration/test_errors.py", work_units.FLEET_UNIT,
                    "tests/unit/test_types.py", "tests/integration/test_kubelet_harness.py", work_units.PERIODIC_UNIT,
                    "tests/integration/test_criproxy.py"], key=work_units.rank)
    assert order == [work_units.FLEET_UNIT, "tests/integration/test_criproxy.py",
                     "tests/integration/test_kubelet_harness.py", "tests/integration/test_errors.py",
                     work_units.PERIODIC_UNIT, "tests/unit/test_types.py", "tests/unit/test_refs.py"]


def test_only_the_periodic_worker_takes_the_periodic_unit_and_it_takes_the_queue_in_order() -> None:
    queue = [work_units.PERIODIC_UNIT, "tests/unit/test_refs.py"]
    assert work_units.pick(queue, "gw0") == 0
    assert work_units.pick(queue, "gw1") == 1
    assert work_units.pick([work_units.PERIODIC_UNIT], "gw2") is None
    assert work_units.pick([], "gw0") is None
    # Another worker stands in when told to (the periodic worker gone).
    assert work_units.pick([work_units.PERIODIC_UNIT], "gw2", periodic_worker="gw2") == 0


def test_every_module_the_order_names_exists() -> None:
    on_disk = {path.name for path in TESTS.rglob("test_*.py")}
    named = {*work_units.LONG_MODULES, *work_units.CLUSTER_MODULES, work_units.PERIODIC_MODULE}
    assert named <= on_disk, f"gone: {sorted(named - on_disk)}"


def test_each_worker_picks_ports_from_a_slice_of_its_own() -> None:
    slices = [ports.worker_slice(20000, 32000, f"gw{index}", "4") for index in range(4)]
    assert slices[0] == (20000, 23000) and slices[3] == (29000, 32000)
    assert all(a[1] <= b[0] for a, b in zip(slices, slices[1:])), slices
    assert ports.worker_slice(20000, 32000, "", "") == (20000, 32000)
    assert ports.worker_slice(20000, 32000, "gw0", "1") == (20000, 32000)


def test_the_durations_table_sums_each_unit_from_a_runs_junit_xml(tmp_path: pathlib.Path) -> None:
    xml = tmp_path / "run.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.integration.test_fleet" name="a" time="10.5"/>'
        '<testcase classname="tests.integration.test_fleet_status" name="b" time="4.5"/>'
        '<testcase classname="tests.unit.test_refs" name="c[x]" time="0.25"/>'
        '<testcase classname="tests.unit.test_refs" name="d" time="0.75"/>'
        '<testcase classname="tests.integration.test_kubelet_gc" name="e" time="300"/>'
        '</testsuite></testsuites>')
    rows = work_units.durations(str(xml))
    assert rows == [(work_units.PERIODIC_UNIT, 1, 300.0), (work_units.FLEET_UNIT, 2, 15.0),
                    ("tests/unit/test_refs.py", 2, 1.0)]
    table = work_units.durations_table(rows, longest=2).splitlines()
    assert table[2] == "| periodic-gc | 1 | 300 |"
    assert table[4] == "| 1 other modules | 2 | 1 |" and table[5] == "| all | 5 | 316 |"


def test_the_xdist_scheduler_still_has_what_ours_overrides() -> None:
    """work_units.make_scheduler overrides and calls these of xdist's scope scheduler: an xdist
    without them would leave ours unused, and the suite's grouping gone, without a word."""
    from xdist.scheduler import LoadScopeScheduling

    for name in ("_split_scope", "_assign_work_unit", "_reschedule", "_pending_of", "workqueue"):
        assert name in LoadScopeScheduling.__dict__ or name in LoadScopeScheduling.__init__.__code__.co_names, name

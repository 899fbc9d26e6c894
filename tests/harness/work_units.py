"""How scripts/test splits the suite over pytest-xdist workers.

Each test module is one unit of work, sent whole to one worker, so its module fixtures start once
and its tests keep their order. The fleet modules are one unit together: they share the fleet of
four nodes, which a second worker would start again; so are the modules of the control plane
alone. Units go out longest first, so that no long one starts last and holds up the end: the fleet, the
LONG_MODULES, the other integration modules. The periodic GC module's scenarios wait five minutes
for the kubelets' second run: one worker (PERIODIC_WORKER) starts them in the background at its
start, goes on with integration units meanwhile, and alone takes the periodic unit, queued after
the integration units; the unit modules come last. docs/testing.md has the durations behind this order.

pytest-xdist's own ``--dist loadgroup`` reads ``xdist_group`` marks by rewriting node ids, which
pytest 9.2 no longer allows, so the grouping is a scheduler of ours (``make_scheduler``): xdist's
scope scheduler with our idea of a scope.
"""

from __future__ import annotations

from typing import Any

# Its scenarios run 20-odd kubelets in the background and wait for their second GC run.
PERIODIC_MODULE = "test_kubelet_gc.py"
# The modules of the session's fleet: four nodes (four kubelets, four runtimes) registered to the
# session's control plane, pinctl's image loaded on each; they run from the first of these modules
# to the end of the worker's session.
FLEET_MODULES = frozenset(("test_fleet.py", "test_fleet_prometheus.py", "test_fleet_status.py"))
# The modules of the control plane alone (no node): a worker of their own starts its own, in seconds.
CONTROL_PLANE_MODULES = frozenset(("test_cluster.py", "test_node_status_rbac.py", "test_prometheus3.py"))
CLUSTER_MODULES = FLEET_MODULES | CONTROL_PLANE_MODULES
PERIODIC_UNIT, FLEET_UNIT, CONTROL_PLANE_UNIT = "periodic-gc", "fleet", "control-plane"
# The longest of the other modules, longest first (a minute or more on a quiet machine), and the
# unit modules that run a tool (mypy, go test -race, a Go build, a wheel build).
LONG_MODULES = ("test_watch_history.py", "test_criproxy.py", "test_metrics.py", "test_terminal_fit.py",
                "test_terminal.py", "test_gc.py", "test_pull.py", "test_slow_engine.py", "test_kubelet_credentials.py",
                "test_crio.py", "test_kubelet_harness.py", "test_kubelet_daemonset.py", "test_core.py",
                "test_import.py", "test_sandbox_image.py", "test_crio_faults.py", "test_shells.py", "test_sandbox.py",
                "test_sizes.py", "test_services_memory.py", "test_watch.py",
                "test_types.py", "test_goexe.py", "test_cri_relay.py", "test_packaging.py")
INTEGRATION_PREFIX = "tests/integration/"


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to, from its node id (``tests/unit/test_x.py::test_y[z]``)."""
    module = nodeid.split("::", 1)[0]
    name = module.rpartition("/")[2]
    if module.startswith(INTEGRATION_PREFIX) and name == PERIODIC_MODULE:
        return PERIODIC_UNIT
    if module.startswith(INTEGRATION_PREFIX) and name in FLEET_MODULES:
        return FLEET_UNIT
    if module.startswith(INTEGRATION_PREFIX) and name in CONTROL_PLANE_MODULES:
        return CONTROL_PLANE_UNIT
    return module


def rank(unit: str) -> int:
    """Where a unit goes in the queue: lower first. The integration units, longest first; then the
    periodic GC module, whose scenarios its worker started at the beginning and which by then have
    had their five minutes; then the unit modules, which some set os.environ in (the scenarios'
    pinctl and daemons would inherit it)."""
    long_count = len(LONG_MODULES)
    name = unit.rpartition("/")[2]
    if unit == FLEET_UNIT:
        return 1
    if unit == CONTROL_PLANE_UNIT:
        return 2 + LONG_MODULES.index("test_terminal.py")
    if unit.startswith(INTEGRATION_PREFIX):
        return 2 + (LONG_MODULES.index(name) if name in LONG_MODULES else long_count)
    if unit == PERIODIC_UNIT:
        return 3 + long_count
    return 4 + long_count + (LONG_MODULES.index(name) if name in LONG_MODULES else long_count)


# The worker that starts the periodic GC scenarios at its session's start (tests/integration/
# conftest.py) and alone takes their unit. It takes the queue strictly in order, so it has taken the
# periodic unit before any unit module.
PERIODIC_WORKER = "gw0"


def pick(queue: list[str], worker: str, periodic_worker: str = PERIODIC_WORKER) -> int | None:
    """The index in the queue of the unit ``worker`` takes next, None when none is for it: any
    worker takes the first unit, except that the periodic unit is only ``periodic_worker``'s."""
    for index, unit in enumerate(queue):
        if unit != PERIODIC_UNIT or worker == periodic_worker:
            return index
    return None


def make_scheduler(config: Any, log: Any) -> Any:
    """xdist's scope scheduler, a scope being :func:`unit_of`; loaded only when xdist runs."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _periodic_worker(self) -> str:
            # Should that worker be gone (crashed), the first left takes the unit, and its
            # fixture starts the scenarios then.
            ids = [node.gateway.id for node in self.assigned_work]
            return PERIODIC_WORKER if PERIODIC_WORKER in ids or not ids else ids[0]

        def _assign_work_unit(self, node: Any) -> None:
            index = pick(list(self.workqueue), node.gateway.id, self._periodic_worker())
            if index is None:
                return  # only the periodic unit is left, and it is another worker's
            scope = list(self.workqueue)[index]
            work_unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(nodeid) for nodeid, done in work_unit.items() if not done])
            if not self.workqueue:
                # A worker left idle while the periodic unit waited for its worker is not asked
                # again: end it now, as xdist ends a worker that finds the queue empty.
                for other in self.assigned_work:
                    if other is not node and not other.shutting_down and not self._pending_of(self.assigned_work[other]):
                        other.shutdown()

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 2:
                return
            self._assign_work_unit(node)

    # The queue keeps the order the workers collected, which tests/conftest.py sorts by rank:
    # xdist's default would sort the units by their number of tests.
    config.option.loadscopereorder = False
    return UnitScheduling(config, log)


def durations(junit_xml: str) -> list[tuple[str, int, float]]:
    """(unit, tests, seconds) of a run's JUnit XML (``pytest --junitxml``), longest first; a
    test's seconds are its setup, call and teardown."""
    import xml.etree.ElementTree as ElementTree

    tests: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for case in ElementTree.parse(junit_xml).iter("testcase"):
        module = (case.get("classname") or "").replace(".", "/") + ".py"
        unit = unit_of(module)
        tests[unit] = tests.get(unit, 0) + 1
        seconds[unit] = seconds.get(unit, 0.0) + float(case.get("time") or 0)
    return sorted(((unit, tests[unit], seconds[unit]) for unit in tests), key=lambda row: -row[2])


def durations_table(rows: list[tuple[str, int, float]], longest: int = 12) -> str:
    """docs/testing.md's table: the longest units, then the rest in one row."""
    lines = ["| unit of work | tests | seconds |", "| --- | ---: | ---: |"]
    lines += [f"| {unit} | {count:,} | {total:.0f} |" for unit, count, total in rows[:longest]]
    rest = rows[longest:]
    if rest:
        lines.append(f"| {len(rest)} other modules | {sum(r[1] for r in rest):,} | {sum(r[2] for r in rest):.0f} |")
    lines.append(f"| all | {sum(r[1] for r in rows):,} | {sum(r[2] for r in rows):.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    # python -m tests.harness.work_units RUN.xml: the table docs/testing.md shows, from a run's
    # `scripts/test --junitxml=RUN.xml`.
    import sys

    print(durations_table(durations(sys.argv[1])))

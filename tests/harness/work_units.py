"""How scripts/test splits the suite over pytest-xdist workers.

Each test module is one unit of work, sent whole to one worker, so its module fixtures start once
and its tests keep their order. The cluster modules are one unit together: they share the
session's control plane and its fleet of four nodes, which a second worker would start again.
Units go out longest first, so that no long one starts last and holds up the end: the periodic GC
module (its scenarios wait five minutes for the kubelets' second run, its worker idle meanwhile),
the cluster, the LONG_MODULES, then the other integration modules and the unit modules in the
order collected. docs/testing.md has the durations behind this order.

pytest-xdist's own ``--dist loadgroup`` reads ``xdist_group`` marks by rewriting node ids, which
pytest 9.2 no longer allows, so the grouping is a scheduler of ours (``make_scheduler``): xdist's
scope scheduler with our idea of a scope.
"""

from __future__ import annotations

from typing import Any

# Its scenarios run 20-odd kubelets in the background and wait for their second GC run.
PERIODIC_MODULE = "test_kubelet_gc.py"
# The modules of the session's control plane: its four processes and the fleet's nodes (four
# kubelets, four runtimes) run from the first of them to the end of the worker's session.
CLUSTER_MODULES = frozenset(("test_cluster.py", "test_fleet.py", "test_fleet_prometheus.py", "test_fleet_status.py",
                             "test_node_status_rbac.py", "test_prometheus3.py"))
PERIODIC_UNIT, CLUSTER_UNIT = "periodic-gc", "cluster"
# The longest of the other modules, longest first (a minute or more on a quiet machine), and the
# unit modules that run a tool (mypy, go test -race, a Go build, a wheel build).
LONG_MODULES = ("test_kubelet_harness.py", "test_criproxy.py", "test_watch.py", "test_metrics.py",
                "test_kubelet_daemonset.py", "test_daemonset_pod.py", "test_watch_history.py", "test_crio.py",
                "test_gc.py", "test_kubelet_eviction.py", "test_slow_engine.py", "test_watch_fleet.py",
                "test_import.py", "test_criproxy_metrics.py", "test_check.py", "test_services_memory.py",
                "test_types.py", "test_goexe.py", "test_cri_relay.py", "test_packaging.py")
INTEGRATION_PREFIX = "tests/integration/"


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to, from its node id (``tests/unit/test_x.py::test_y[z]``)."""
    module = nodeid.split("::", 1)[0]
    name = module.rpartition("/")[2]
    if module.startswith(INTEGRATION_PREFIX) and name == PERIODIC_MODULE:
        return PERIODIC_UNIT
    if module.startswith(INTEGRATION_PREFIX) and name in CLUSTER_MODULES:
        return CLUSTER_UNIT
    return module


def rank(unit: str) -> int:
    """Where a unit goes in the queue: lower first."""
    if unit == PERIODIC_UNIT:
        return 0
    if unit == CLUSTER_UNIT:
        return 1
    name = unit.rpartition("/")[2]
    if name in LONG_MODULES:
        return 2 + LONG_MODULES.index(name)
    return 2 + len(LONG_MODULES) + (0 if unit.startswith(INTEGRATION_PREFIX) else 1)


def make_scheduler(config: Any, log: Any) -> Any:
    """xdist's scope scheduler, a scope being :func:`unit_of`; loaded only when xdist runs."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    # The queue keeps the order the workers collected, which tests/conftest.py sorts by rank:
    # xdist's default would sort the units by their number of tests.
    config.option.loadscopereorder = False
    return UnitScheduling(config, log)

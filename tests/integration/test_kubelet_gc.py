"""The real kubelet's periodic image GC against ``pinctl gc plan``, scenario by scenario.

Each scenario has its own node (a runtime on its own small loop-mounted ext4, its own kubelet
v1.37.2) and all of them run at once, sharing the one 5-minute wait for the kubelet's second
``GarbageCollect`` (tests/harness/kubelet_periodic.py). Shortly before that run each scenario
runs ``pinctl gc plan -o json`` against the socket its kubelet uses; then the kubelet's log says
what it deleted, in order, and the test compares: the same images, in the plan's order, any
order among the images the plan marks as a tie. What else the kubelet showed (its usage and
amountToFree, its shortfall message, which images survived) is compared too.

Scenarios, each in its gc_*_scenario.py or below (docs/testing-kubernetes.md says what each
showed, and how PINCTL_PERIODIC_SCENARIOS runs a few): the threshold step, the ages, a shortfall,
pins directly and through cri-proxy, image volumes, CRIListStreaming, cri-dockerd, CRI-O,
re-pointed tags, ties, a first pass and a restart, deletes Docker or cri-proxy refuse.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import engine_unavailable
from tests.harness import containerd as ctd
from tests.harness import cri, cri_pods, debs, engines, kubernetes_build, pods
from tests.harness import docker as docker_harness
from tests.harness.engine_fixtures import go_binary
from tests.harness.kubelet import GcPolicy, StaticPod
from tests.harness.kubelet_periodic import (
    FILL_AHEAD_S,
    MIB,
    PERIOD_S,
    Outcome,
    PeriodicNode,
    Plan,
    Scenario,
    SecondRun,
    deletions_agree,
    run_all,
    used_at_start,
)
from tests.harness.registry import Registry
from tests.harness.runnable import RunnableRecipe, runnable_recipe
from tests.integration import (
    gc_crio_scenario,
    gc_ctd24_scenario,
    gc_life_scenario,
    gc_proxy_refused_scenario,
    gc_refused_scenario,
    gc_repoint_scenario,
    gc_seed_scenario,
    gc_tie_scenario,
)
from tests.integration.pinctl_runner import pinctl
from tests.integration.test_criproxy import ProxyProcess, built_relay

pytestmark = pytest.mark.integration

PIN = "io.cri-containerd.pinned"
LATE_AT_S = 30.0
LOW = 50


def runnable(ref: str, payload_mib: float = 0.0) -> RunnableRecipe:
    return runnable_recipe(ref, payload_bytes=max(4096, int(payload_mib * MIB)))


def plan_for(node: PeriodicNode, endpoint: str = "", env: dict[str, str] | None = None) -> Plan:
    """``pinctl gc plan -o json`` against the kubelet's runtime socket, with its config file."""
    assert node.daemon is not None and node.kubelet is not None
    daemon, config = node.daemon, str(node.kubelet.config_path)
    target = endpoint or f"unix://{node.address}"
    return lambda: pinctl(daemon, "gc", "plan", "-r", target, "--kubelet-config", config, "-o", "json", env=env)


def label(node: PeriodicNode, ref: str) -> None:
    assert node.daemon is not None
    node.daemon.label_image(ref, {PIN: "pinned"})


# --- the scenarios (each runs in a thread of its own) ----------------------------------------


def threshold_stop(node: PeriodicNode) -> SecondRun:
    """Usage over the high threshold: the walk deletes the never-used images (a tie) and stops
    before the one the kubelet saw in use (pinctl cannot see that use: it ties it with them).
    The labelled image survives on containerd 1.7, whose CRI reports it pinned."""
    daemon = node.containerd("containerd-1.7")
    sleeper, was_used = node.load_runnable(runnable("example.test/sleeper:1"), runnable("example.test/was-used:1", 4))
    unused = node.load_plain(("example.test/unused-6:1", 6), ("example.test/unused-10:1", 10),
                             ("example.test/unused-14:1", 14))
    (pinned,) = node.load_plain(("example.test/pinned:1", 8))
    label(node, pinned.refs[0])
    cri.wait_for(node.address, lambda listed: any(i.id == pinned.image_id and i.pinned for i in listed))
    node.notes["user"] = pods.Pods(daemon).container(was_used.refs[0], "running").pod.id
    pod = StaticPod("sleeper", sleeper.refs[0])
    node.start(GcPolicy(LOW + 1, LOW, min_age="3s"), [pod])
    used_at_start(node, was_used.image_id)
    node.running(pod)
    node.at(PERIOD_S - FILL_AHEAD_S)
    sizes = [info.size for info in unused]
    # Past every pair of never-used images, short of all three: the walk stops after the third.
    node.fill_for(sum(sizes) - min(sizes) // 2, LOW)
    node.notes.update(unused={i.image_id for i in unused}, kept={sleeper.image_id, was_used.image_id, pinned.image_id},
                      was_used=was_used.image_id, pinned=pinned.image_id)
    return node.second_run(plan_for(node))


def exited_containers(node: PeriodicNode) -> SecondRun:
    """A static pod whose container has exited (restartPolicy Never) keeps its image, as a
    running one does; both never-used images go."""
    node.containerd("containerd-1.7")
    sleeper, job = node.load_runnable(runnable("example.test/sleeper:1"), runnable("example.test/job:1", 3))
    unused = node.load_plain(("example.test/unused-6:1", 6), ("example.test/unused-10:1", 10))
    running = StaticPod("sleeper", sleeper.refs[0])
    exited = StaticPod("job", job.refs[0], command=("/bin/busybox", "true"), restart_policy="Never")
    node.start(GcPolicy(LOW + 1, LOW, min_age="3s"), [running, exited])
    node.running(running)
    node.notes["job_container"] = node.container_in(exited, ("exited",)).id
    node.at(PERIOD_S - FILL_AHEAD_S)
    # More than the larger image, less than both: either order deletes both and stops.
    node.fill_for(13 * MIB, LOW)
    node.notes.update(unused={i.image_id for i in unused}, job=job.image_id, sleeper=sleeper.image_id)
    return node.second_run(plan_for(node))


def minimum_age(node: PeriodicNode) -> SecondRun:
    """imageMinimumGCAge 90s counts from the kubelet's detection pass: an image imported 30 s
    after the first run is 4.5 minutes old at the second, but no pass saw it before that run,
    so it is too young there; without it the walk falls short."""
    node.containerd("containerd-1.7")
    (sleeper,) = node.load_runnable(runnable("example.test/sleeper:1"))
    unused = node.load_plain(("example.test/unused-6:1", 6), ("example.test/unused-10:1", 10))
    pod = StaticPod("sleeper", sleeper.refs[0])
    node.start(GcPolicy(LOW + 1, LOW, min_age="90s"), [pod])
    node.at(LATE_AT_S)
    (late,) = node.load_plain(("example.test/late-8:1", 8))
    node.at(PERIOD_S - FILL_AHEAD_S)
    # Beyond the two old images, within reach if the late one counted.
    node.fill_for(20 * MIB, LOW)
    node.notes.update(unused={i.image_id for i in unused}, late=late.image_id)
    return node.second_run(plan_for(node))


def maximum_age(node: PeriodicNode) -> SecondRun:
    """imageMaximumGCAge 4m, usage far below the high threshold: every image not used for 4
    minutes goes, the one first seen at this very run too (the age step ignores the minimum
    age; never used is the zero time); the running pod's and the pinned image stay."""
    node.containerd("containerd-1.7")
    (sleeper,) = node.load_runnable(runnable("example.test/sleeper:1"))
    unused = node.load_plain(("example.test/unused-6:1", 6), ("example.test/unused-10:1", 10))
    (pinned,) = node.load_plain(("example.test/pinned:1", 4))
    label(node, pinned.refs[0])
    pod = StaticPod("sleeper", sleeper.refs[0])
    node.start(GcPolicy(85, 80, min_age="30s", max_age="4m"), [pod])
    node.at(LATE_AT_S)
    (late,) = node.load_plain(("example.test/late-4:1", 4))
    node.notes.update(unused={i.image_id for i in unused}, late=late.image_id, pinned=pinned.image_id,
                      sleeper=sleeper.image_id)
    return node.second_run(plan_for(node))


def age_then_threshold(node: PeriodicNode) -> SecondRun:
    """Maximum age 4m and thresholds 55/50 in one run: the age step deletes both never-used
    images, which would bring usage under 55%; but the threshold step reads cadvisor's sample
    from before them, runs on the run's starting usage, finds nothing left and falls short."""
    node.containerd("containerd-1.7")
    (sleeper,) = node.load_runnable(runnable("example.test/sleeper:1"))
    unused = node.load_plain(("example.test/unused-6:1", 6), ("example.test/unused-10:1", 10))
    pod = StaticPod("sleeper", sleeper.refs[0])
    node.start(GcPolicy(55, LOW, min_age="3s", max_age="4m"), [pod])
    node.running(pod)
    node.at(PERIOD_S - FILL_AHEAD_S)
    node.fill_for(12 * MIB, LOW)  # about 58% used; 16 MiB less would be about 47%
    node.notes.update(unused={i.image_id for i in unused}, sleeper=sleeper.image_id)
    return node.second_run(plan_for(node))


def shortfall(node: PeriodicNode) -> SecondRun:
    """In-use images (a running and an exited pod) hold most of the space: the walk deletes
    every eligible image and falls short; the kubelet's FreeDiskSpaceFailed text is gc plan's."""
    daemon = node.containerd("containerd-1.7")
    sleeper, job, was_used = node.load_runnable(runnable("example.test/sleeper:1", 16), runnable("example.test/job:1", 8),
                                                runnable("example.test/was-used:1", 3))
    (unused,) = node.load_plain(("example.test/unused-6:1", 6))
    node.notes["user"] = pods.Pods(daemon).container(was_used.refs[0], "running").pod.id
    running = StaticPod("sleeper", sleeper.refs[0])
    exited = StaticPod("job", job.refs[0], command=("/bin/busybox", "true"), restart_policy="Never")
    node.start(GcPolicy(41, 40, min_age="3s"), [running, exited])
    used_at_start(node, was_used.image_id)
    node.running(running)
    node.container_in(exited, ("exited",))
    node.at(PERIOD_S - FILL_AHEAD_S)
    node.fill_for(40 * MIB, 40)
    node.notes.update(deleted={unused.image_id, was_used.image_id}, kept={sleeper.image_id, job.image_id})
    return node.second_run(plan_for(node))


POLICY_REF = "example.test/policy-only:1"


def _pins_node(node: PeriodicNode, through_proxy: Callable[[PeriodicNode, pathlib.Path], str],
               engine: str = "containerd-1.6") -> SecondRun:
    """containerd 1.6.20 (its CRI ignores the pin label) unless ``engine`` says otherwise, max age
    4m: every unpinned image goes at the second run. The kubelet talks to the endpoint
    ``through_proxy`` returns."""
    node.containerd(engine)
    (sleeper,) = node.load_runnable(runnable("example.test/sleeper:1"))
    labelled, policy, plain = node.load_plain(("example.test/labelled:1", 4), (POLICY_REF, 4),
                                              ("example.test/plain:1", 4))
    label(node, labelled.refs[0])
    config = node.base_dir / "pinctl.toml"
    config.write_text(f'pinned_images = ["{POLICY_REF}"]\n')
    endpoint = through_proxy(node, config)
    pod = StaticPod("sleeper", sleeper.refs[0])
    made = node.start(GcPolicy(85, 80, min_age="30s", max_age="4m"), [pod], endpoint=endpoint)
    first = node.running(pod)
    listed_at_start = {image.id for image in cri.list_images(node.address)}
    pause = next(i.id for i in cri.list_images(node.address) if ctd.DEFAULT_SANDBOX_IMAGE in i.repo_tags)
    node.notes.update(labelled=labelled.image_id, policy=policy.image_id, plain=plain.image_id, pause=pause,
                      sleeper=sleeper.image_id, sleeper_container=first.id, listed_at_start=listed_at_start)
    run = node.second_run(plan_for(node, endpoint, env={"PINCTL_CONFIG": str(config)}))
    # What the kubelet saw of the runtime all along: every image, and its pod never restarted.
    run.notes["detected"] = {line.split('imageID="')[1].split('"')[0] for line in made.log_text().splitlines()
                             if '"Image ID is new"' in line}
    run.notes["runtime_errors"] = [line for line in made.log_text().splitlines()
                                   if "code = Unavailable" in line or "connection refused" in line]
    run.notes["healthz"] = made.healthz()
    if endpoint:
        run.notes["through_proxy"] = cri.list_images(endpoint.removeprefix("unix://"))
    return run


def pins_direct(node: PeriodicNode) -> SecondRun:
    return _pins_node(node, lambda _node, _config: "")


def pins_through_proxy(relay: str) -> Scenario:
    def scenario(node: PeriodicNode) -> SecondRun:
        def start(node: PeriodicNode, config: pathlib.Path) -> str:
            assert node.daemon is not None
            proxy = ProxyProcess(node.daemon, node.address, "--relay", relay, "--config", str(config))
            node.on_close(proxy.stop)
            proxy.wait_serving()
            return f"unix://{proxy.path}"

        return _pins_node(node, start)

    return scenario


def image_volume(node: PeriodicNode, engine: str = "containerd-2.1") -> SecondRun:
    """containerd 2.1 (or ``engine``) and a static pod that mounts an image as a volume
    (ImageVolume, GA in 1.36): at max age 4m every unused image goes but the mounted one. gc plan
    and a prune's dry run, just before, both keep it."""
    daemon = node.containerd(engine)
    sleeper, data = node.load_runnable(runnable("example.test/sleeper:1"), runnable("example.test/data:1", 2))
    (plain,) = node.load_plain(("example.test/plain:1", 4))
    pod = StaticPod("reader", sleeper.refs[0], image_volumes=(data.refs[0],))
    node.start(GcPolicy(85, 80, min_age="30s", max_age="4m"), [pod])
    container = node.running(pod)
    node.notes.update(data=data.image_id, plain=plain.image_id, sleeper=sleeper.image_id,
                      mounts=_image_mounts(node.address, container.id))
    plan = plan_for(node)

    def plan_and_prune() -> Any:
        # The prune's dry run first: the plan, which is held to the kubelet's run, comes nearer it.
        assert node.kubelet is not None
        pruned = pinctl(daemon, "prune", "-r", f"unix://{node.address}", "--kubelet-config", str(node.kubelet.config_path),
                        "--all-unused", "--dry-run", "-o", "json")
        node.notes["prune"] = json.loads(pruned.stdout) if pruned.returncode == 0 else pruned.stderr
        return plan()

    run = node.second_run(plan_and_prune)
    assert node.kubelet is not None
    run.notes["mount_lines"] = [line for line in node.kubelet.log_text().splitlines()
                                if '"Container uses image as mount"' in line and data.image_id in line]
    return run


def _image_mounts(address: str, container_id: str) -> list[str]:
    """``ContainerStatus.mounts[].image.image`` (fields 1, 14, 9, 1), read by field number."""
    from tests.harness.protowire import Reader, encode

    status = Reader(cri.unary_call(address, cri_pods.RUNTIME + "ContainerStatus", encode([(1, container_id)]))).message(1)
    return [mount.message(9).text(1) for mount in status.messages(14) if mount.all_bytes(9)]


# --- the shared run --------------------------------------------------------------------------


# The periodic run, once per session: started by the first integration test when this module is
# selected with others (tests/integration/conftest.py runs this module's tests last), so the rest of
# the suite fills the kubelets' 5-minute wait; else by this module's fixture.
_STARTED: dict[str, Any] = {}


def start_periodic(request: pytest.FixtureRequest) -> None:
    """Every engine fetched or built, then the scenarios started in the background. An engine
    that cannot be had is kept as the skip (a failure in CI) this module's tests then get."""
    if _STARTED:
        return
    try:
        build: kubernetes_build.KubeletBuild = request.getfixturevalue("kubelet_binary")
        registry: Registry = request.getfixturevalue("crio_registry")
        for engine in ("containerd-1.7", "containerd-1.6", "containerd-2.1", docker_harness.ENGINE):
            try:
                debs.engine_dir(engine)
            except debs.EngineUnavailable as exc:
                engine_unavailable(f"{engine} unavailable: {exc}")
        go_binary(engines.CRI_DOCKERD_OLD)
        go_binary(engines.CRIO)
        go_binary(engines.CONTAINERD_24)
        relay = built_relay()
        base = request.getfixturevalue("tmp_path_factory").mktemp("periodic")
    except (Exception, pytest.skip.Exception, pytest.fail.Exception) as exc:  # raised again by the fixture
        _STARTED["error"] = exc
        return
    scenarios: dict[str, Scenario] = {
        "threshold_stop": threshold_stop, "exited_containers": exited_containers, "minimum_age": minimum_age,
        "maximum_age": maximum_age, "age_then_threshold": age_then_threshold, "shortfall": shortfall,
        "pins_direct": pins_direct,
        "pins_through_proxy": pins_through_proxy(relay), "image_volume": image_volume,
        "pins_direct_24": lambda node: _pins_node(node, lambda _node, _config: "", engines.CONTAINERD_24),
        "image_volume_24": lambda node: image_volume(node, engines.CONTAINERD_24),
        "stream_relay": gc_ctd24_scenario.streamed(relay, plan_for),
        "stream_python": gc_ctd24_scenario.streamed("python", plan_for),
        "seed": gc_seed_scenario.seed_setup(relay), "crio": gc_crio_scenario.crio_pins(registry),
        "repointed": gc_repoint_scenario.repointed(plan_for),
        **{name: gc_tie_scenario.tied_node(plan_for) for name in gc_tie_scenario.NODES},
        "first_pass": gc_life_scenario.first_pass(plan_for), "restart": gc_life_scenario.restarted(plan_for),
        "docker_refused": gc_refused_scenario.docker_refused,
        "refused_age_pass": gc_proxy_refused_scenario.refused_in_age_pass(relay, plan_for),
    }
    only = [name for name in os.environ.get("PINCTL_PERIODIC_SCENARIOS", "").split(",") if name]
    if only:
        scenarios = {name: scenarios[name] for name in only}
    _STARTED.update(began=time.monotonic(), outcomes={})
    thread = threading.Thread(target=lambda: _STARTED["outcomes"].update(run_all(scenarios, base, build)),
                              name="periodic-gc", daemon=True)
    thread.start()
    _STARTED["thread"] = thread


@pytest.fixture(scope="module")
def periodic(request: pytest.FixtureRequest) -> Iterator[dict[str, Outcome]]:
    start_periodic(request)
    if "error" in _STARTED:
        raise _STARTED["error"]
    _STARTED["thread"].join()
    outcomes: dict[str, Outcome] = collections.defaultdict(
        lambda: Outcome(failure="not started: PINCTL_PERIODIC_SCENARIOS names other scenarios"), _STARTED["outcomes"])
    print(f"periodic GC scenarios: {time.monotonic() - _STARTED['began']:.0f}s from their start; "
          + ", ".join(f"{name} {outcome.seconds:.0f}s" for name, outcome in outcomes.items()))
    for outcome in outcomes.values():
        if outcome.run is not None:
            print(summary(outcome.run))
    yield outcomes


def summary(run: SecondRun) -> str:
    """One scenario in a line: what the kubelet deleted and what gc plan said (ties bracketed)."""
    def name(image_id: str) -> str:
        entry = next((e for e in run.plan["order"] if e["id"] == image_id), None)
        return (entry["refs"] or [image_id[:19]])[0].removeprefix("example.test/") if entry else image_id[:19]

    planned = sorted((e for e in run.plan["order"] if e["deleted"]), key=lambda e: e["running_total"])
    said = " ".join(f"{'~' if e['tie'] else ''}{name(e['id'])}" for e in planned)
    return (f"{run.name}: second run {(run.run_at - run.first_run_at).total_seconds():.1f}s after the first, "
            f"{run.outcome}; kubelet usage={run.usage} amountToFree={run.amount_to_free} deleted "
            f"[{' '.join(name(i) for i in run.removed_ids)}]; gc plan usage={run.plan['usage_percent']} "
            f"amount_to_free={run.plan['amount_to_free']} outcome={run.plan['outcome']} deletes [{said}] "
            f"exit {run.plan_code}" + (f"; the run's error: {run.error}" if run.error else ""))


def agreed(run: SecondRun) -> None:
    """The kubelet deleted what gc plan said, in its order (any order within a tie)."""
    difference = deletions_agree(run.plan, run.removed_ids)
    assert difference is None, f"{run.name}: {difference}\nplan: {json.dumps(run.plan['order'], indent=1)}"
    sizes = {entry["id"]: entry["size"] for entry in run.plan["order"]}
    assert all(sizes[r.image_id] == r.size for r in run.removals), "the kubelet's sizes are the CRI sizes"


def same_figures(run: SecondRun) -> None:
    """gc plan's usage and amountToFree are the kubelet's, read from the same statfs (give or
    take what containerd wrote in the 15 s between)."""
    assert run.usage is not None and run.amount_to_free is not None, run
    assert run.plan["usage_percent"] == run.usage
    assert abs(run.plan["amount_to_free"] - run.amount_to_free) < MIB, (run.plan["amount_to_free"], run.amount_to_free)


def left(run: SecondRun) -> set[str]:
    return {image.id for image in run.images_after}


def test_threshold_step_stops_at_the_low_threshold(periodic: dict[str, Outcome],
                                                   record_property: Callable[[str, object], None]) -> None:
    run = periodic["threshold_stop"].get()
    record_property("second_run_after_s", round((run.run_at - run.first_run_at).total_seconds(), 1))
    agreed(run)
    same_figures(run)
    assert run.plan["outcome"] == "freed_enough" and run.outcome == "succeeded"
    # The kubelet deleted the three never-used images and stopped before was-used ...
    assert set(run.removed_ids) == run.notes["unused"]
    assert run.notes["kept"] <= left(run)
    # ... which pinctl ties with them: it cannot know the kubelet saw it in use.
    group = {e["id"] for e in run.plan["order"] if e["tie"]}
    assert group == run.notes["unused"] | {run.notes["was_used"]}
    protected = {p["id"]: p["reasons"] for p in run.plan["protected"]}
    assert protected[run.notes["pinned"]] == ["pinned"]


def test_an_exited_container_keeps_its_image_as_a_running_one_does(periodic: dict[str, Outcome]) -> None:
    run = periodic["exited_containers"].get()
    agreed(run)
    same_figures(run)
    assert set(run.removed_ids) == run.notes["unused"] and run.plan["outcome"] == "freed_enough"
    exited = [c for c in run.containers_after if c.id == run.notes["job_container"]]
    assert [c.state for c in exited] == ["exited"] and {run.notes["job"], run.notes["sleeper"]} <= left(run)
    protected = {p["id"]: p for p in run.plan["protected"]}
    assert protected[run.notes["job"]]["reasons"] == ["in_use"] and protected[run.notes["job"]]["containers"] == ["main"]


def test_the_minimum_age_counts_from_the_kubelets_detection_pass(periodic: dict[str, Outcome]) -> None:
    run = periodic["minimum_age"].get()
    agreed(run)
    same_figures(run)
    assert set(run.removed_ids) == run.notes["unused"] and run.notes["late"] in left(run)
    late = next(e for e in run.plan["order"] if e["id"] == run.notes["late"])
    assert (late["fate"], late["first_detected_source"]) == ("too_young", "not_detected")
    assert run.plan["outcome"] == "shortfall" and run.outcome.startswith("failed")
    assert run.plan["message"] == run.error, (run.plan["message"], run.error)


def test_the_maximum_age_deletes_at_any_usage(periodic: dict[str, Outcome]) -> None:
    run = periodic["maximum_age"].get()
    agreed(run)
    assert run.usage is None and run.plan["outcome"] == "below_threshold" and run.outcome == "succeeded"
    assert set(run.removed_ids) == run.notes["unused"] | {run.notes["late"]}
    assert run.removed_ids[-1] == run.notes["late"]  # first detected last: deleted last
    assert {e["fate"] for e in run.plan["order"] if e["deleted"]} == {"deleted_age"}
    assert {run.notes["pinned"], run.notes["sleeper"]} <= left(run)


def test_the_threshold_step_reads_the_usage_from_before_the_age_step(periodic: dict[str, Outcome]) -> None:
    run = periodic["age_then_threshold"].get()
    agreed(run)
    same_figures(run)  # the kubelet logged the run's starting usage, after deleting by age
    assert set(run.removed_ids) == run.notes["unused"] and run.notes["sleeper"] in left(run)
    assert {e["fate"] for e in run.plan["order"] if e["deleted"]} == {"deleted_age"}
    assert run.amount_to_free is not None and run.amount_to_free > 0  # after the age step, from the old figures
    assert run.plan["outcome"] == "shortfall" and run.outcome.startswith("failed")
    assert run.plan["message"] == run.error, (run.plan["message"], run.error)


def test_a_shortfall_deletes_what_it_can_and_says_what_the_kubelet_says(periodic: dict[str, Outcome]) -> None:
    run = periodic["shortfall"].get()
    agreed(run)
    same_figures(run)
    assert set(run.removed_ids) == run.notes["deleted"] and run.notes["kept"] <= left(run)
    assert run.plan["outcome"] == "shortfall" and run.outcome.startswith("failed")
    assert run.error.startswith("Insufficient free disk space on the node's image filesystem")
    assert run.plan["message"] == run.error, (run.plan["message"], run.error)


def test_on_containerd_1_6_20_the_label_alone_does_not_keep_an_image(periodic: dict[str, Outcome]) -> None:
    run = periodic["pins_direct"].get()
    agreed(run)
    notes = run.notes
    # The kubelet deleted the labelled image: 1.6.20's CRI does not report it pinned. Nor does it
    # pin its sandbox image, which no container uses (sandboxes do not count): gone too.
    assert set(run.removed_ids) == {notes["labelled"], notes["policy"], notes["plain"], notes["pause"]}
    # gc plan said so, and exits 1 for the images pinctl wants kept.
    assert run.plan_code == 1
    doomed = {risk["id"] for risk in run.plan["at_risk"] if risk["deleted"]}
    assert doomed == {notes["labelled"], notes["policy"], notes["pause"]}


def test_through_cri_proxy_the_labelled_and_the_policys_image_survive(periodic: dict[str, Outcome]) -> None:
    run = periodic["pins_through_proxy"].get()
    agreed(run)
    notes = run.notes
    assert run.removed_ids == [notes["plain"]] and run.plan_code == 0
    assert {notes["labelled"], notes["policy"], notes["sleeper"], notes["pause"]} <= left(run)
    protected = {p["id"]: p["reasons"] for p in run.plan["protected"]}
    assert protected[notes["labelled"]] == ["pinned"] and protected[notes["policy"]] == ["pinned"]
    # The kubelet never lost its runtime: its pod ran all along, it saw every image.
    sleeper = [c for c in run.containers_after if c.image_ref == notes["sleeper"] or c.image_id == notes["sleeper"]]
    assert [(c.id, c.state) for c in sleeper] == [(notes["sleeper_container"], "running")]
    assert notes["detected"] >= notes["listed_at_start"]
    assert {i.id for i in notes["through_proxy"]} == left(run)
    assert notes["runtime_errors"] == [] and notes["healthz"] == "ok"


def test_on_containerd_2_4_the_label_keeps_an_image_and_the_policy_alone_does_not(
        periodic: dict[str, Outcome]) -> None:
    run = periodic["pins_direct_24"].get()
    agreed(run)
    gc_ctd24_scenario.assert_pins_direct(run)


@pytest.mark.parametrize("relay", ["relay", "python"])
def test_with_cri_list_streaming_the_kubelet_keeps_what_cri_proxy_pins(periodic: dict[str, Outcome],
                                                                        relay: str) -> None:
    run = periodic[f"stream_{relay}"].get()
    print(f"{relay}: the proxy's calls before gc plan {gc_ctd24_scenario.nonzero(run.notes['calls_before_plan'])}, "
          f"after the second run {gc_ctd24_scenario.nonzero(run.notes['calls_after_run'])}")
    agreed(run)
    gc_ctd24_scenario.assert_outcome(run)


def test_an_image_mounted_as_a_volume_is_in_use(periodic: dict[str, Outcome]) -> None:
    image_volume_kept(periodic["image_volume"].get())


def test_on_containerd_2_4_an_image_mounted_as_a_volume_is_in_use(periodic: dict[str, Outcome]) -> None:
    image_volume_kept(periodic["image_volume_24"].get())


def image_volume_kept(run: SecondRun) -> None:
    agreed(run)
    notes = run.notes
    assert notes["mounts"] == [notes["data"]]  # the kubelet mounts it by image ID
    assert run.removed_ids == [notes["plain"]] and notes["data"] in left(run)
    assert notes["mount_lines"], "the kubelet's detection pass counted the mount"
    protected = {p["id"]: p for p in run.plan["protected"]}
    assert protected[notes["data"]]["reasons"] == ["in_use"] and protected[notes["data"]]["containers"] == ["main"]
    actions = {item["id"]: (item["action"], item["why"]) for item in notes["prune"]["results"]}
    assert actions[notes["data"]][0] == "kept" and "in use by main" in actions[notes["data"]][1]
    assert actions[notes["plain"]][0] == "would-remove"


def test_a_delete_cri_proxy_refuses_ends_the_age_pass_run_before_the_threshold_pass(
        periodic: dict[str, Outcome]) -> None:
    gc_proxy_refused_scenario.assert_outcome(periodic["refused_age_pass"].get())


def test_the_seed_users_labelled_image_survives_through_cri_proxy(periodic: dict[str, Outcome]) -> None:
    run = periodic["seed"].get()
    agreed(run)
    notes = run.notes
    assert notes["pinned_direct"] is False  # cri-dockerd 0.4.3 ignores the label in moby ...
    assert run.removed_ids == [notes["plain"]] and notes["labelled"] in left(run)  # ... the proxy does not
    protected = {p["id"]: p["reasons"] for p in run.plan["protected"]}
    assert protected[notes["labelled"]] == ["pinned"] and run.plan_code == 0
    assert [(c.id, c.state) for c in run.containers_after if c.id == notes["sleeper_container"]] == [
        (notes["sleeper_container"], "running")]
    assert notes["runtime_errors"] == []


def test_on_crio_what_pinctl_and_the_site_pinned_survives_and_prune_agrees(periodic: dict[str, Outcome]) -> None:
    run = periodic["crio"].get()
    gc_crio_scenario.assert_outcome(run)
    agreed(run)
    same_figures(run)


def test_a_tag_repointed_by_import_and_by_pull_dates_the_new_image_by_its_arrival(
        periodic: dict[str, Outcome]) -> None:
    run = periodic["repointed"].get()
    gc_repoint_scenario.assert_outcome(run)
    agreed(run)
    same_figures(run)


def test_a_tie_is_n_of_m_and_two_kubelets_picking_differently_both_keep_to_it(periodic: dict[str, Outcome]) -> None:
    runs = [periodic[name].get() for name in gc_tie_scenario.NODES]
    for run in runs:
        gc_tie_scenario.assert_within_the_claim(run)
        agreed(run)
        same_figures(run)
    gc_tie_scenario.assert_chose_differently(runs)


def test_a_static_pods_image_no_pass_saw_in_use_ties_with_the_never_used(periodic: dict[str, Outcome]) -> None:
    run = periodic["first_pass"].get()
    gc_life_scenario.assert_first_pass(run)
    agreed(run)
    same_figures(run)


def test_a_restarted_kubelet_dates_every_image_from_its_new_start(periodic: dict[str, Outcome]) -> None:
    run = periodic["restart"].get()
    gc_life_scenario.assert_restart(run)
    agreed(run)
    same_figures(run)


def test_an_image_docker_refuses_fails_the_age_step_and_the_threshold_step_does_not_run(
        periodic: dict[str, Outcome]) -> None:
    run = periodic["docker_refused"].get()
    gc_refused_scenario.assert_outcome(run)
    agreed(run)

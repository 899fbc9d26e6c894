"""The kubelet's life against the real kubelet: two scenarios of the shared periodic run.

``first_pass``: a fresh kubelet runs its first GC pass and its first image detection before it
creates any static pod's container (docs/gc-model.md, "The kubelet's life"), and the next pass
comes 5 minutes later. The static pod ``mover`` runs ``mover-old:1`` from the start; 30 s after
the first run its manifest moves to ``mover-new:1`` and the old pod goes. No pass saw
``mover-old`` in use, so to the kubelet it is never used: at the second run it ties with the two
never-used images and goes with them, before ``was-used``, which a harness container used while
the first pass looked. Had any pass seen mover-old in use, the walk would have reached was-used
instead (it is larger than mover-old). ``gc plan`` ties mover-old with them too.

``restart``: the kubelet is restarted 25 s after its first run. Its GC records are in memory, so
the new process detects every image anew at its first pass and sets lastUsed only for the images
of containers the runtime lists then, in any state (the running sleeper's, the exited job's). So
``was-used`` (seen in use by the old process), ``gone`` (pulled by the old kubelet for a static
pod removed before the restart) and ``late`` (imported 10 s after the first run) are never used
and first detected at the new start: at the new second run, 300 s on, they are past the 90 s
minimum age and go with ``unused-6``, where without the restart ``gone`` and ``late`` would have
been too young (no pass of the old process had seen them). ``gc plan`` reads the new process's
start from /proc and says the same. The kubelet pulled ``sleeper`` and ``gone`` from a loopback
registry: its pull records (``<root-dir>/image_manager/pulled``) survive the restart, and the
second run's threshold step removes both, the in-use sleeper's too.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import re
import time
from typing import Callable, Optional

from tests.harness import cri, cri_pods, pods
from tests.harness import registry as reg
from tests.harness.kubelet import GcPolicy, Kubelet, StaticPod
from tests.harness.kubelet_periodic import (
    FILL_AHEAD_S,
    GC_DONE,
    MIB,
    PERIOD_S,
    PeriodicNode,
    Plan,
    Scenario,
    SecondRun,
    remove_pod,
    used_at_start,
)
from tests.harness.runnable import RunnableRecipe, runnable_recipe

LOW = 50
MOVE_AT_S = 30.0
LATE_AT_S = 10.0
RESTART_AT_S = 25.0
# A pull and a pod start, with the rest of the suite running beside them.
POD_TIMEOUT_S = 120.0
ROOT = "example.test/life"
PlanFor = Callable[[PeriodicNode], Plan]


class PullingPodsDaemon(reg.RegistryContainerd, pods.PodsDaemon):
    """A pod-capable containerd whose CRI pulls from the hosts in its certs.d: the kubelet's pulls."""


def runnable(ref: str, payload_mib: float = 0.0) -> RunnableRecipe:
    return runnable_recipe(ref, payload_bytes=max(4096, int(payload_mib * MIB)))


def logged_ids(text: str, message: str) -> set[str]:
    """The imageIDs of the kubelet's log lines with this message (level 5: each detection pass)."""
    return set(re.findall(r'"%s" imageID="([^"]+)"' % re.escape(message), text))


def fill_past(node: PeriodicNode, image_ids: set[str]) -> None:
    """Usage that the images together free, and no fewer of them: amountToFree is their CRI sizes
    less half the smallest."""
    sizes = [image.size for image in cri.list_images(node.address) if image.id in image_ids]
    assert len(sizes) == len(image_ids), f"{node.name}: not every image is listed"
    node.fill_for(sum(sizes) - min(sizes) // 2, LOW)


def running_image(node: PeriodicNode, pod: StaticPod, image_id: str, timeout: float = POD_TIMEOUT_S
                  ) -> cri_pods.CriContainer:
    """The static pod's running container of this image (an old and a new pod share the name)."""
    assert node.kubelet is not None
    name = node.kubelet.static_pod_name(pod)
    deadline = time.monotonic() + timeout
    while True:
        sandboxes = {s.id: s.name for s in cri_pods.list_pod_sandboxes(node.address)}
        for found in cri_pods.list_containers(node.address):
            if (sandboxes.get(found.pod_sandbox_id) == name and found.state == "running"
                    and image_id in (found.image_id, found.image_ref)):
                return found
        assert time.monotonic() < deadline, f"{node.name}: no running {name} of {image_id[:19]} after {timeout}s"
        time.sleep(0.2)


# --- a fresh kubelet's first pass ------------------------------------------------------------


def first_pass(plan_for: PlanFor) -> Scenario:
    def scenario(node: PeriodicNode) -> SecondRun:
        daemon = node.containerd("containerd-1.7")
        old, new, was_used = node.load_runnable(runnable(f"{ROOT}/mover-old:1", 3), runnable(f"{ROOT}/mover-new:1"),
                                                runnable(f"{ROOT}/was-used:1", 6))
        unused = node.load_plain((f"{ROOT}/unused-6:1", 6), (f"{ROOT}/unused-10:1", 10))
        node.notes["user"] = pods.Pods(daemon).container(was_used.refs[0], "running").pod.id
        mover = StaticPod("mover", old.refs[0])
        made = node.start(GcPolicy(LOW + 1, LOW, min_age="3s"), [mover])
        used_at_start(node, was_used.image_id)
        first = running_image(node, mover, old.image_id)
        node.at(MOVE_AT_S)
        made.add_static_pod(dataclasses.replace(mover, image=new.refs[0]))
        running_image(node, mover, new.image_id)
        remove_pod(node, first.pod_sandbox_id)  # the old pod gone, should the kubelet not have removed it yet
        tie = {image.image_id for image in unused} | {old.image_id}
        node.notes.update(tie=tie, old=old.image_id, new=new.image_id, was_used=was_used.image_id,
                          old_created_after_first_run_s=first.created_at / 1e9 - node.first_run_at.timestamp())
        node.at(PERIOD_S - FILL_AHEAD_S)
        fill_past(node, tie)
        run = node.second_run(plan_for(node))
        run.notes["used_lines"] = logged_ids(made.log_text(), "Setting Image ID lastUsed")
        return run

    return scenario


def assert_first_pass(run: SecondRun) -> None:
    notes = run.notes
    # The kubelet never saw mover-old in use: no pass ran while its container did.
    assert notes["old"] not in notes["used_lines"], "a detection pass saw the static pod's first container"
    assert notes["was_used"] in notes["used_lines"]
    # So it went with the never-used images, and the walk stopped before was-used.
    assert set(run.removed_ids) == notes["tie"], "the kubelet deleted the never-used tie, mover-old in it"
    left = {image.id for image in run.images_after}
    assert {notes["was_used"], notes["new"]} <= left
    assert run.plan["outcome"] == "freed_enough" and run.outcome == "succeeded"
    entries = {entry["id"]: entry for entry in run.plan["order"]}
    for image_id in notes["tie"] | {notes["was_used"]}:
        entry = entries[image_id]
        assert (entry["last_used"], entry["last_used_source"], entry["tie"]) == (None, "unknown", True), entry
        assert entry["first_detected_source"] == "kubelet_start", entry
    assert len({(entries[i]["first_detected"], entries[i]["last_used"]) for i in notes["tie"]}) == 1


# --- a restart mid-window --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Records:
    """The kubelet's image pull records (``<root-dir>/image_manager/pulled``): image ref -> file."""

    by_ref: dict[str, str]

    @classmethod
    def read(cls, kubelet: Kubelet) -> Records:
        pulled = kubelet.root_dir / "image_manager" / "pulled"
        found = {}
        for path in sorted(pulled.iterdir()) if pulled.is_dir() else []:
            found[json.loads(path.read_text())["imageRef"]] = path.name
        return cls(found)


def wait_for_records(kubelet: Kubelet, refs: set[str], timeout: float = 60.0) -> Records:
    deadline = time.monotonic() + timeout
    while not refs <= (records := Records.read(kubelet)).by_ref.keys():
        assert time.monotonic() < deadline, f"no pull records of {refs - records.by_ref.keys()} after {timeout}s"
        time.sleep(0.2)
    return records


def first_run_text(kubelet: Kubelet, position: int) -> str:
    """The log of the new process up to the end of its first GC run."""
    text = kubelet.log_text()
    done = GC_DONE.search(text, position)
    assert done is not None
    return text[position:done.end()]


def restarted(plan_for: PlanFor) -> Scenario:
    def scenario(node: PeriodicNode) -> SecondRun:
        daemon = node.containerd("containerd-1.7", daemon_class=PullingPodsDaemon)
        assert isinstance(daemon, PullingPodsDaemon)
        registry = reg.Registry(node.base_dir / "registry").start()
        node.on_close(registry.stop)
        daemon.add_host(registry.host)
        work = node.base_dir / "push"
        sleeper = registry.push_runnable(work, runnable(f"{registry.host}/life/sleeper:1"))
        gone = registry.push_runnable(work, runnable(f"{registry.host}/life/gone:1", 3))
        job, was_used = node.load_runnable(runnable(f"{ROOT}/job:1"), runnable(f"{ROOT}/was-used:1", 4))
        (unused,) = node.load_plain((f"{ROOT}/unused-6:1", 6))
        node.notes["user"] = pods.Pods(daemon).container(was_used.refs[0], "running").pod.id
        sleeper_pod = StaticPod("sleeper", sleeper.refs[0], pull_policy="IfNotPresent")
        gone_pod = StaticPod("gone", gone.refs[0], pull_policy="IfNotPresent")
        job_pod = StaticPod("job", job.refs[0], command=("/bin/busybox", "true"), restart_policy="Never")
        made = node.start(GcPolicy(LOW + 1, LOW, min_age="90s"), [sleeper_pod, gone_pod, job_pod])
        used_at_start(node, was_used.image_id)
        running_image(node, sleeper_pod, sleeper.image_id)
        gone_container = running_image(node, gone_pod, gone.image_id)
        node.container_in(job_pod, ("exited",), POD_TIMEOUT_S)
        node.at(LATE_AT_S)
        (late,) = node.load_plain((f"{ROOT}/late-8:1", 8))
        made.remove_static_pod(gone_pod.name)
        remove_pod(node, gone_container.pod_sandbox_id)
        records_before = wait_for_records(made, {sleeper.image_id, gone.image_id})
        node.at(RESTART_AT_S)
        old_pid, old_first_run = made.pid, node.first_run_at
        listed = {image.id for image in cri.list_images(node.address)}
        states = {c.image_ref: c.state for c in cri_pods.list_containers(node.address)}
        began_since_boot = _since_boot()
        position = node.restart()
        restarted_since_boot = _since_boot()
        assert made.pid is not None
        text = first_run_text(made, position)
        tie = {gone.image_id, was_used.image_id, late.image_id, unused.image_id}
        node.notes.update(
            tie=tie, sleeper=sleeper.image_id, job=job.image_id, gone=gone.image_id, late=late.image_id,
            was_used=was_used.image_id, listed_at_restart=listed, states_at_restart=states,
            old_pid=old_pid, new_pid=made.pid, old_first_run=old_first_run,
            began_since_boot=began_since_boot, restarted_since_boot=restarted_since_boot,
            new_start_since_boot=_start_since_boot(made.pid),
            new_ids=logged_ids(text, "Image ID is new"), new_used=logged_ids(text, "Setting Image ID lastUsed"),
            records_before=records_before, records_after_restart=Records.read(made))
        node.at(PERIOD_S - FILL_AHEAD_S)
        fill_past(node, tie)
        run = node.second_run(plan_for(node))
        run.notes["btime_after_plan"] = _btime()
        run.notes["records_after_run"] = Records.read(made)
        return run

    return scenario


def _since_boot() -> float:
    with open("/proc/uptime", encoding="ascii") as handle:
        return float(handle.read().split()[0])


def _start_since_boot(pid: int) -> float:
    """When the process started, in seconds since boot (the clock no one sets)."""
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        stat = handle.read()
    return int(stat[stat.rfind(")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")


def _btime() -> int:
    """The boot time in whole seconds of the wall clock, as the kernel reckons it now."""
    with open("/proc/stat", encoding="ascii") as handle:
        return int(next(line for line in handle if line.startswith("btime ")).split()[1])


def _when(text: Optional[str]) -> datetime.datetime:
    assert text is not None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def assert_restart(run: SecondRun) -> None:
    notes = run.notes
    # The new process's first pass: every image is new to it, lastUsed only from the containers
    # the runtime listed then, the exited job's among them.
    assert notes["listed_at_restart"] <= notes["new_ids"], "the new process detected every image anew"
    assert notes["states_at_restart"].get(notes["job"]) == "exited", notes["states_at_restart"]
    assert {notes["sleeper"], notes["job"]} <= notes["new_used"]
    assert not notes["tie"] & notes["new_used"], "no container used the tie's images at the restart"
    # Its second run: all four never-used images past the minimum age, counted from the new start.
    assert set(run.removed_ids) == notes["tie"]
    assert {notes["sleeper"], notes["job"]} <= {image.id for image in run.images_after}
    assert run.plan["outcome"] == "freed_enough" and run.outcome == "succeeded"
    # gc plan read the new process's start from /proc.
    assert notes["new_pid"] != notes["old_pid"]
    assert run.plan["kubelet_started_source"] == f"kubelet process {notes['new_pid']}"
    # The new process started after the restart began and before its first run ended, on the
    # clock since boot; gc plan's wall time for it agrees with btime's (each truncated to the
    # second, so within a second either way). The wall clock is not compared across the run: a
    # VM's clock may be stepped (CI failed once on such a comparison at stop 42).
    started = _when(run.plan["kubelet_started"]).timestamp()
    expected = notes["btime_after_plan"] + notes["new_start_since_boot"]
    times = {key: notes[key] for key in ("began_since_boot", "new_start_since_boot", "restarted_since_boot")}
    assert times["began_since_boot"] <= times["new_start_since_boot"] <= times["restarted_since_boot"], times
    assert abs(started - expected) < 1.05, (run.plan["kubelet_started"], expected, times)
    entries = {entry["id"]: entry for entry in run.plan["order"]}
    for image_id in notes["tie"]:
        entry = entries[image_id]
        assert (entry["deleted"], entry["first_detected_source"], entry["last_used_source"], entry["tie"]) == (
            True, "kubelet_start", "unknown", True), entry
    # The pull records: files that outlive the process; the threshold step's hook then removed
    # every record of an image it did not skip, the image that stays in use included.
    pulled = {notes["sleeper"], notes["gone"]}
    assert set(notes["records_before"].by_ref) == pulled == set(notes["records_after_restart"].by_ref)
    for ref, name in notes["records_before"].by_ref.items():  # named as fs_pullrecords.go cacheFilename says
        assert name == f"sha256-{hashlib.sha256(ref.encode()).hexdigest()}", (ref, name)
    assert notes["records_after_run"].by_ref == {}, notes["records_after_run"]


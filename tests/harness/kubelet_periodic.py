"""Several kubelets over one shared 5-minute image GC period, each on a node of its own.

The kubelet's periodic ``GarbageCollect`` runs when it starts and then every 5 minutes
(``ImageGCPeriod``, a constant), and the first run never deletes: it is the pass that first
detects every image. So a test of the real periodic GC waits 5 minutes whatever it does, and
the scenarios share that wait: :func:`run_all` runs each scenario in a thread of its own, each
with its own containerd (or other runtime) on its own small loop-mounted ext4 and its own
kubelet, all started together.

A scenario is a function of a :class:`PeriodicNode`. It loads images and writes static pods,
starts the kubelet (:meth:`PeriodicNode.start`, which returns once the first GC run has
logged its end), does what it needs at given times after that run (:meth:`PeriodicNode.at`),
and ends with :meth:`PeriodicNode.second_run`: shortly before the second run it calls the
scenario's ``plan`` (``pinctl gc plan -o json`` against the kubelet's runtime socket), then
waits for the run to end and returns what the kubelet did (:class:`SecondRun`), read from its
log and the CRI, never from pinctl. A scenario that restarts its kubelet (:meth:`PeriodicNode.restart`)
counts from the new process's first run: restarted early in the window, it ends that much later.

The order check, :func:`deletions_agree`, accepts any order among images the plan marks as a
tie: the kubelet sorts them with Go's unstable sort over a map, and pinctl cannot see what
would order them (the kubelet's in-memory lastUsed of images whose containers are gone).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import pathlib
import re
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Optional

from tests.harness import cri, cri_pods, images, kubelet, kubernetes_build, pods, runnable
from tests.harness import crio as crio_harness

PERIOD_S = 300.0
# gc plan runs this long before the second GC run: after every change, before any deletion.
PLAN_AHEAD_S = 15.0
# The filler is written this long before it: the kubelet reads cadvisor's statfs figures,
# refreshed every 10 s or so, and containerd has long settled by then.
FILL_AHEAD_S = 40.0
# From the first run's end to the second's: 5 minutes, plus what the run itself takes.
RUN_TIMEOUT_S = PERIOD_S + 90.0
FIRST_RUN_TIMEOUT_S = 180.0  # generous: the rest of the suite runs beside it
GC_DONE = re.compile(r'"Image garbage collection (?P<how>succeeded|failed once[^"]*|failed multiple times in a row)"'
                     r'(?: err="(?P<err>(?:[^"\\]|\\.)*)")?')
OVER = re.compile(
    r'"Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low '
    r'threshold" usage=(?P<usage>\d+) highThreshold=\d+ amountToFree=(?P<amount>-?\d+)'
)
MIB = 1024 * 1024
NODE_FS_BYTES = 160 * MIB


@dataclasses.dataclass
class SecondRun:
    """One kubelet's second GC run, and what ``pinctl gc plan`` said just before it."""

    name: str
    plan: dict[str, Any]  # gc plan's "gc" object
    plan_code: int
    removals: list[kubelet.Removal]  # in the kubelet's order
    usage: Optional[int]  # the kubelet's "over the high threshold" figures; None below it
    amount_to_free: Optional[int]
    outcome: str  # "succeeded", "failed once", ...
    error: str  # the run's err="..." text, unescaped
    first_run_at: datetime.datetime
    run_at: datetime.datetime
    images_after: list[cri.CriImage]
    containers_after: list[cri_pods.CriContainer]
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)  # the scenario's own observations

    @property
    def removed_ids(self) -> list[str]:
        return [removal.image_id for removal in self.removals]


Plan = Callable[[], "subprocess.CompletedProcess[str]"]


class PeriodicNode:
    """One scenario's node: a runtime on its own :class:`kubelet.LoopFs`, and its kubelet."""

    def __init__(self, name: str, base_dir: pathlib.Path, build: kubernetes_build.KubeletBuild) -> None:
        self.name = name
        self.base_dir = base_dir
        self.build = build
        self.daemon: Optional[pods.PodsDaemon] = None
        self.crio_daemon: Optional[crio_harness.CrioDaemon] = None
        self.fs: Optional[kubelet.LoopFs] = None
        self.kubelet: Optional[kubelet.Kubelet] = None
        self.first_run_at = datetime.datetime.now(datetime.timezone.utc)
        self.notes: dict[str, Any] = {}
        self._cleanups: list[Callable[[], object]] = []

    # --- the runtime ---------------------------------------------------------------------------

    def containerd(self, engine: str, fs_bytes: int = NODE_FS_BYTES,
                   daemon_class: type[pods.PodsDaemon] = pods.PodsDaemon) -> pods.PodsDaemon:
        """A pod-capable containerd of ``engine`` whose root is on a fresh loop fs of ``fs_bytes``."""
        context = kubelet.node_daemon(self.base_dir / "node", fs_bytes, engine, daemon_class)
        self.daemon, self.fs = context.__enter__()
        self._cleanups.append(lambda: context.__exit__(None, None, None))
        return self.daemon

    def crio(self, registry_host: str, fs_bytes: int = NODE_FS_BYTES) -> crio_harness.CrioDaemon:
        """A CRI-O pulling from ``registry_host``, its storage root on a fresh loop fs of ``fs_bytes``.

        The loop fs is mounted before CRI-O starts, so its mount namespace has it; pods the
        kubelet left are removed through the CRI before CRI-O stops (conmon would outlive it).
        """
        runnable.busybox_path()
        fs = kubelet.LoopFs(self.base_dir / "node" / "imagefs", fs_bytes).open()
        self._cleanups.append(fs.close)
        made = crio_harness.CrioDaemon(fs.path / "crio", registry_host)
        self._cleanups.append(made.stop)
        made.start()
        self._cleanups.append(lambda: remove_all_pods(made.address))
        self.crio_daemon, self.fs = made, fs
        return made

    def on_close(self, cleanup: Callable[[], object]) -> None:
        """Run ``cleanup`` when the node closes, before the runtime stops (last in, first out)."""
        self._cleanups.append(cleanup)

    @property
    def address(self) -> str:
        if self.crio_daemon is not None:
            return self.crio_daemon.address
        assert self.daemon is not None
        return self.daemon.address

    def load_runnable(self, *recipes: runnable.RunnableRecipe) -> list[images.ImageInfo]:
        assert self.daemon is not None
        return runnable.load_runnable(self.daemon, self.base_dir / "work", list(recipes))

    def load_plain(self, *sizes_mib: tuple[str, int]) -> list[images.ImageInfo]:
        """Plain images of (ref, MiB): content only, no snapshot, so each takes its CRI size on disk."""
        assert self.daemon is not None
        recipes = [images.recipe(ref, layer_bytes=size * MIB, compress=False) for ref, size in sizes_mib]
        return images.load_images(self.daemon, self.base_dir / "work", recipes, cri.NAMESPACE)

    # --- the kubelet ---------------------------------------------------------------------------

    def start(self, policy: kubelet.GcPolicy, pods_: Sequence[kubelet.StaticPod] = (), *,
              endpoint: str = "", eviction_hard: Optional[Mapping[str, str]] = None,
              kubelet_args: tuple[str, ...] = ()) -> kubelet.Kubelet:
        """Start the kubelet (with ``kubelet_args`` after the harness's flags) with these static
        pods; returns once its first GC run has ended."""
        made = kubelet.Kubelet(self.base_dir / "kubelet", endpoint or self.address, gc=policy,
                               eviction_hard=eviction_hard or {}, binary=self.build.binary, extra_args=kubelet_args)
        for pod in pods_:
            made.add_static_pod(pod)
        self.kubelet = made
        made.start()
        self._cleanups.append(made.stop)
        done = made.wait_for_log(GC_DONE.pattern, FIRST_RUN_TIMEOUT_S)
        self.first_run_at = made.line_time(done)
        return made

    def restart(self) -> int:
        """The kubelet stopped (SIGTERM: its containers keep running) and started again with the
        same config and root dir; returns once the new process's first GC run has ended, which
        :meth:`at` and :meth:`second_run` then count from. Returns the log position where the new
        process begins (the log is appended to)."""
        assert self.kubelet is not None
        self.kubelet.stop()
        position = len(self.kubelet.log_text())
        self.kubelet.start()
        done = self.kubelet.wait_for_log(GC_DONE.pattern, FIRST_RUN_TIMEOUT_S, since=position)
        self.first_run_at = self.kubelet.line_time(done)
        return position

    def at(self, seconds: float) -> None:
        """Sleep until ``seconds`` after the first GC run ended (at once if that has passed)."""
        moment = self.first_run_at + datetime.timedelta(seconds=seconds)
        time.sleep(max(0.0, (moment - datetime.datetime.now(datetime.timezone.utc)).total_seconds()))

    def running(self, pod: kubelet.StaticPod, timeout: float = 30.0) -> cri_pods.CriContainer:
        """The static pod's container once it runs (through the node's runtime socket)."""
        return self.container_in(pod, ("running",), timeout)

    def container_in(self, pod: kubelet.StaticPod, states: Sequence[str], timeout: float = 30.0,
                     address: str = "") -> cri_pods.CriContainer:
        assert self.kubelet is not None
        name = self.kubelet.static_pod_name(pod)
        where = address or self.address
        deadline = time.monotonic() + timeout
        while True:
            sandboxes = {s.id: s for s in cri_pods.list_pod_sandboxes(where)}
            for found in cri_pods.list_containers(where):
                sandbox = sandboxes.get(found.pod_sandbox_id)
                if sandbox is not None and sandbox.name == name and found.state in states:
                    return found
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no {'/'.join(states)} container in {name} after {timeout}s")
            time.sleep(0.2)

    def fill_for(self, amount_to_free: int, low_percent: int) -> None:
        """Allocate blocks beside the runtime's root so that the kubelet's amountToFree is about that."""
        assert self.fs is not None
        capacity = self.fs.capacity
        wanted_available = capacity * (100 - low_percent) // 100 - amount_to_free
        fill(self.fs.path / "filler", self.fs.available - wanted_available)

    # --- the run -------------------------------------------------------------------------------

    def second_run(self, plan: Plan, address: str = "") -> SecondRun:
        """gc plan just before the second GC run, then what that run did."""
        assert self.kubelet is not None
        self.at(PERIOD_S - PLAN_AHEAD_S)
        position = len(self.kubelet.log_text())
        # The kubelet is stopped (SIGSTOP) while the plan runs: on a busy machine the plan can
        # take longer than PLAN_AHEAD_S, and a GC run due meanwhile waits for SIGCONT (its timer
        # is on the monotonic clock), so the plan always sees the node as the run will find it.
        with self.kubelet.paused():
            if self.kubelet.removals():
                raise AssertionError(f"{self.name}: the kubelet deleted images before its second GC run: "
                                     f"{self.kubelet.removals()}")
            planned = plan()
        try:
            document = json.loads(planned.stdout)["gc"]
        except (ValueError, KeyError):
            raise AssertionError(f"{self.name}: gc plan said ({planned.returncode}): {planned.stderr}") from None
        done = self.kubelet.wait_for_log(GC_DONE.pattern, RUN_TIMEOUT_S, since=position)
        run_at = self.kubelet.line_time(done)
        text = self.kubelet.log_text()
        over = OVER.search(text, position, done.end())
        found = GC_DONE.match(done.group(0))
        assert found is not None
        where = address or self.address
        return SecondRun(
            name=self.name, plan=document, plan_code=planned.returncode,
            removals=self.kubelet.removals(position),
            usage=int(over["usage"]) if over else None, amount_to_free=int(over["amount"]) if over else None,
            outcome=found["how"], error=_unescape(found["err"] or ""),
            first_run_at=self.first_run_at, run_at=run_at,
            images_after=cri.list_images(where), containers_after=cri_pods.list_containers(where), notes=self.notes,
        )

    def close(self) -> None:
        while self._cleanups:
            with contextlib.suppress(Exception):
                self._cleanups.pop()()


def remove_all_pods(address: str) -> None:
    """Every pod sandbox stopped and removed through the CRI (what is already gone is skipped)."""
    for sandbox in cri_pods.list_pod_sandboxes(address):
        for call in (cri_pods.stop_pod_sandbox, cri_pods.remove_pod_sandbox):
            with contextlib.suppress(cri.CriError):
                call(address, sandbox.id)


def remove_pod(node: PeriodicNode, pod_id: str) -> None:
    """A harness pod gone (the kubelet may be killing it as an orphan at the same time)."""
    for call in (cri_pods.stop_pod_sandbox, cri_pods.remove_pod_sandbox):
        with contextlib.suppress(cri.CriError):
            call(node.address, pod_id)
    deadline = time.monotonic() + 30
    while any(c.pod_sandbox_id == pod_id for c in cri_pods.list_containers(node.address)):
        assert time.monotonic() < deadline, "harness pod not removed"
        time.sleep(0.1)


def used_at_start(node: PeriodicNode, image_id: str) -> None:
    """Was-used: a harness container (its pod's id in ``node.notes["user"]``) uses the image while
    the kubelet's first pass sees it, then goes."""
    assert node.kubelet is not None
    user = node.notes.pop("user")
    node.kubelet.wait_for_log(r'"Setting Image ID lastUsed" imageID="%s"' % image_id)
    remove_pod(node, user)


def _unescape(text: str) -> str:
    return json.loads(f'"{text}"') if text else ""


def fill(path: pathlib.Path, size: int) -> None:
    """Blocks allocated on the imagefs beside the runtime's root: statfs counts them as used at once."""
    with open(path, "wb") as handle:
        os.posix_fallocate(handle.fileno(), 0, max(size, 1))


# --- running them together ------------------------------------------------------------------------


Scenario = Callable[[PeriodicNode], SecondRun]


@dataclasses.dataclass
class Outcome:
    """A scenario's second run, or why it has none."""

    run: Optional[SecondRun] = None
    failure: str = ""
    seconds: float = 0.0

    def get(self) -> SecondRun:
        if self.run is None:
            raise AssertionError(self.failure or "the scenario did not run")
        return self.run


# Each kubelet holds about six inotify instances (cadvisor, its static-pod, plugin, device-plugin
# and certificate watchers), each containerd one; the kernel's default of 128 per user leaves a
# dozen nodes and the rest of the suite's daemons at its edge: "Failed to start cAdvisor"
# err="inotify_init: too many open files".
INOTIFY_INSTANCES = pathlib.Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_PER_NODE = 8
INOTIFY_HEADROOM = 256  # the suite's other daemons, started while the nodes run


def enough_inotify_instances(nodes: int) -> None:
    """Raise the kernel's per-user inotify instance limit to what the nodes need, never lower it.
    Left raised: lowering it again could starve a run still going beside this one."""
    wanted = nodes * INOTIFY_PER_NODE + INOTIFY_HEADROOM
    current = int(INOTIFY_INSTANCES.read_text())
    if current >= wanted:
        return
    INOTIFY_INSTANCES.write_text(f"{wanted}\n")
    print(f"kubelet_periodic: fs.inotify.max_user_instances {current} -> {wanted} for {nodes} nodes "
          "(each kubelet takes about six)", flush=True)


def run_all(scenarios: Mapping[str, Scenario], base_dir: pathlib.Path,
            build: kubernetes_build.KubeletBuild) -> dict[str, Outcome]:
    """Every scenario in a thread of its own, all started at once; each node is closed at its end."""
    enough_inotify_instances(len(scenarios))
    outcomes = {name: Outcome() for name in scenarios}

    def one(name: str, scenario: Scenario) -> None:
        began = time.monotonic()
        node = PeriodicNode(name, base_dir / name, build)
        try:
            outcomes[name].run = scenario(node)
        except BaseException:  # noqa: BLE001 - reported by the scenario's own test
            tail = node.kubelet.log_tail(25) if node.kubelet is not None else ""
            outcomes[name].failure = f"{name}: {traceback.format_exc()}\n--- kubelet log tail ---\n{tail}"
        finally:
            node.close()
            outcomes[name].seconds = time.monotonic() - began

    threads = [threading.Thread(target=one, args=item, name=f"periodic-{item[0]}", daemon=True)
               for item in scenarios.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RUN_TIMEOUT_S + 300)
    return outcomes


@contextlib.contextmanager
def timed(record: dict[str, float], key: str) -> Iterator[None]:
    began = time.monotonic()
    try:
        yield
    finally:
        record[key] = round(time.monotonic() - began, 1)


# --- the kubelet against the plan ----------------------------------------------------------------


def tie_groups(plan: Mapping[str, Any]) -> list[list[dict[str, Any]]]:
    """The plan's order cut into runs the kubelet may walk in any order: the entries of one of
    the plan's ties (``tie_group``) form one run, every other entry is a run of its own."""
    groups: list[list[dict[str, Any]]] = []
    for entry in plan["order"]:
        previous = groups[-1][-1] if groups else None
        if previous is not None and entry["tie_group"] is not None and entry["tie_group"] == previous["tie_group"]:
            groups[-1].append(entry)
        else:
            groups.append([entry])
    return groups


def deletions_agree(plan: Mapping[str, Any], removed: Sequence[str]) -> Optional[str]:
    """None when some order of the plan's ties makes the plan's rules delete exactly ``removed``,
    in that order; else what differs.

    The walk is the model's, read from the plan: images deleted for age go first (all of them);
    then the space step skips the ones the plan calls too young or used now, deletes the rest
    and stops once the freed CRI sizes reach ``amount_to_free`` (no limit in ``all_unused``).
    Within a tie the kubelet's own order is taken, so a plan that deleted other members of a
    tie which straddles the stop still agrees; across ties the order must be the plan's. An image
    the plan says the runtime refuses (``refused_because``) is tried and frees nothing.
    """
    rank = {image_id: index for index, image_id in enumerate(removed)}
    order: list[dict[str, Any]] = []
    for group in tie_groups(plan):
        order += sorted(group, key=lambda entry: (rank.get(entry["id"], len(rank)), entry["position"]))
    # The kubelet logs each delete before it asks the runtime: a refused one is in ``removed`` too.
    walked = [entry["id"] for entry in order if entry["fate"] in ("deleted_age", "refused_age")]
    amount = plan["amount_to_free"]
    if amount is not None or plan["mode"] == "all_unused":
        freed = 0
        for entry in order:
            if entry["fate"] in ("deleted_age", "refused_age", "too_young", "used_now"):
                continue
            walked.append(entry["id"])
            if entry["refused_because"] is not None:
                continue  # refused: nothing freed, on to the next
            freed += entry["size"]
            if amount is not None and freed >= amount:
                break
    if walked == list(removed):
        return None
    names = {entry["id"]: (entry["refs"] or [entry["id"][:19]])[0] for entry in plan["order"]}
    return (f"the plan's walk deletes {[names.get(i, i[:19]) for i in walked]}, "
            f"the kubelet deleted {[names.get(i, i[:19]) for i in removed]}")

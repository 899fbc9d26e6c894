"""Issue 46 benchmark: reading 10,000 Nodes, `pinctl fleet status -o json` beside `kubectl get nodes -o json`.

Run from the repository root:
    .venv/bin/python -m bench.bench_fleet_status [--nodes 10000] [--repeat 3] [--patches 1000]
        [--kubeconfig FILE [--keep-nodes]] [--keep-controllers] [--threads 4]

It starts the test harness's control plane (etcd, kube-apiserver v1.37.2 and the rest, built once
per machine by tests/harness/kubernetes_build.py) on loopback, or with --kubeconfig uses a running
one whose kubeconfig names its certificate files. Without kubelets, kube-controller-manager's node
lifecycle controller rewrites every Node, three times, a few a second (tests/harness/fake_nodes.py
says how): writes all through the measurement, so it and the scheduler are stopped first unless
--keep-controllers. Then: the namespace and ConfigMap of deploy/kubernetes (the policy whose
revision most nodes report), and --nodes Nodes of tests/harness/fake_nodes.py, each with a
realistic status and, on most, pinctl's condition. On a reused cluster, nodes already there from
an earlier run with --keep-nodes are kept (the plan is deterministic) and their pinctl condition
written again (a heartbeat is as old as its write).

Measured, in this order:
- creating the nodes: time, rate, the apiserver's and etcd's CPU and memory;
- what one Node weighs as JSON, the list of all of them on the wire (JSON in pages of 500 as
  kubectl asks, gzip, protobuf) and the body of the agent's status patch, pinctl's condition alone;
- --patches heartbeat writes of that patch (the agent's steady state): rate and apiserver CPU each;
- `kubectl get nodes -o json` and `pinctl fleet status -o json`, alternating, --repeat times after
  a warm-up each: wall time, peak memory (GNU time), exit code, output size, apiserver+etcd CPU.
  pinctl runs only if `pinctl fleet status --help` exits 0; else kubectl alone is reported.
Times are medians. Nothing here is judged against a goal yet: issue 46 item 6 is the arithmetic.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from typing import Iterator, Optional, Sequence

import yaml

from bench.common import GNU_TIME, PINCTL, REPO, progress
from tests.harness import fake_nodes, kubernetes_build
from tests.harness.control_plane import ControlPlane, loopback_env

# The command under test, without its --kubeconfig; the main session's `pinctl fleet status`.
PINCTL_FLEET = ("fleet", "status", "-o", "json")
HEARTBEAT_S = 300.0  # sync --watch's default --status-heartbeat, for the arithmetic printed last
DEPLOY = REPO / "deploy" / "kubernetes"
PAGE = 500  # kubectl's default --chunk-size
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass
class Cluster:
    api: fake_nodes.Api
    kubeconfig: pathlib.Path
    kubectl: pathlib.Path
    work: pathlib.Path
    pids: dict[str, int]  # apiserver and etcd, when this run started them
    etcd_url: Optional[str] = None

    def kubectl_argv(self, *args: str) -> list[str]:
        return [str(self.kubectl), f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.work / 'kubectl-cache'}",
                *args]


@contextlib.contextmanager
def cluster(opts: argparse.Namespace) -> Iterator[Cluster]:
    kubernetes = kubernetes_build.ensure_kubernetes()
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-fleet-") as tmp:
        work = pathlib.Path(tmp)
        if opts.kubeconfig:
            path = pathlib.Path(opts.kubeconfig)
            yield Cluster(fake_nodes.Api.from_kubeconfig(path), path, kubernetes.binary("kubectl"), work, {})
            return
        plane = ControlPlane(work / "plane", kubernetes, kubernetes_build.ensure_etcd())
        progress("starting the control plane")
        plane.start()
        try:
            if not opts.keep_controllers:
                for name in ("kube-controller-manager", "kube-scheduler"):
                    plane.components[name].stop()
            pids = {name: plane.components[name].pid for name in ("kube-apiserver", "etcd")}
            progress(f"control plane up in {plane.startup_seconds} s at {plane.server}")
            yield Cluster(fake_nodes.Api.from_kubeconfig(plane.admin_kubeconfig), plane.admin_kubeconfig,
                          kubernetes.binary("kubectl"), work, {k: v for k, v in pids.items() if v}, plane.etcd_url)
        finally:
            plane.stop()


# --- the server side's figures -----------------------------------------------------------------------


def proc_cpu(pid: int) -> float:
    """User plus system seconds of a process so far (/proc/PID/stat fields 14 and 15)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes: resident now, and its peak."""
    found = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
    return found.get("VmRSS", 0), found.get("VmHWM", 0)


def server_cpu(c: Cluster) -> float:
    return sum(proc_cpu(pid) for pid in c.pids.values())


def memory_line(c: Cluster, when: str) -> list[str]:
    """A row of the apiserver's and etcd's resident memory, when this run started them."""
    parts = []
    for name, pid in c.pids.items():
        rss, peak = proc_memory(pid)
        parts.append(f"{name} {rss / 2**20:.0f} MiB (peak {peak / 2**20:.0f})")
    return [f"| memory {when} | {', '.join(parts)} |"] if parts else []


def etcd_db_size(c: Cluster) -> Optional[int]:
    """etcd's backend file size, from its /metrics (plain HTTP on loopback)."""
    if not c.etcd_url:
        return None
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{c.etcd_url}/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith("etcd_mvcc_db_total_size_in_bytes "):
                return int(float(line.split()[1]))
    return None


# --- the steps -------------------------------------------------------------------------------------------


def apply_policy(c: Cluster) -> str:
    """deploy/kubernetes's namespace and ConfigMap; the revision of its config.toml."""
    subprocess.run(c.kubectl_argv("apply", "-f", str(DEPLOY / "namespace.yaml"), "-f", str(DEPLOY / "configmap.yaml")),
                   check=True, capture_output=True, env=loopback_env())
    policy = yaml.safe_load((DEPLOY / "configmap.yaml").read_text())["data"]["config.toml"]
    return fake_nodes.revision_of(policy.encode())


def ensure_nodes(c: Cluster, nodes: Sequence[fake_nodes.FakeNode], revision: str, threads: int) -> list[str]:
    there = set(fake_nodes.names(c.api))
    missing = [node for node in nodes if node.name not in there]
    if len(missing) < len(nodes):
        # An earlier run's nodes: their heartbeats are as old as that run.
        fake_nodes.refresh(c.api, [node for node in nodes if node.name in there], revision, threads, progress)
    if not missing:
        return [f"| nodes created | none: {len(nodes)} there from an earlier run (pinctl's condition written again) |"]
    cpu = server_cpu(c)
    made = fake_nodes.create(c.api, missing, revision, threads, say=progress)
    used = server_cpu(c) - cpu
    progress(f"created {made.created} nodes in {made.seconds:.1f} s")
    rows = [f"| nodes created | {made.created} in {made.seconds:.1f} s ({made.created / made.seconds:.0f}/s, "
            f"{threads} threads); status kept at create: {'no, patched after' if made.status_patched else 'yes'} |"]
    if c.pids:
        each = used / max(made.created, 1) * 1000
        rows.append(f"| apiserver+etcd CPU while creating | {used:.1f} s ({each:.2f} ms a node) |")
    return rows


def list_bytes(c: Cluster, headers: dict[str, str], limit: int) -> tuple[int, float]:
    began = time.perf_counter()
    total = sum(len(page) for page in c.api.pages("/api/v1/nodes", limit=limit, headers=headers))
    return total, time.perf_counter() - began


def sizes(c: Cluster) -> tuple[list[str], int, int]:
    """Rows on what a Node and the list weigh; the median Node's JSON bytes, a Node's protobuf bytes on average."""
    whole, bare = [], []
    for page in c.api.pages("/api/v1/nodes", limit=PAGE):
        for item in json.loads(page)["items"] or []:
            whole.append(len(json.dumps(item, separators=(",", ":"))))
            item["metadata"].pop("managedFields", None)
            bare.append(len(json.dumps(item, separators=(",", ":"))))
    median = int(statistics.median(whole))
    json_total, json_s = list_bytes(c, {}, PAGE)
    gzip_total, gzip_s = list_bytes(c, {"Accept-Encoding": "gzip"}, PAGE)
    proto_total, proto_s = list_bytes(c, {"Accept": "application/vnd.kubernetes.protobuf"}, 0)
    rows = [
        f"| one Node as JSON (compact, managedFields included), median (min-max) | {median} bytes "
        f"({min(whole)}-{max(whole)}) |",
        f"| the same without managedFields (what kubectl prints) | {int(statistics.median(bare))} bytes |",
        f"| GET /api/v1/nodes, JSON, pages of {PAGE} | {json_total / 2**20:.1f} MiB in {json_s:.2f} s |",
        f"| the same, gzip | {gzip_total / 2**20:.1f} MiB in {gzip_s:.2f} s |",
        f"| the same, protobuf, one answer | {proto_total / 2**20:.1f} MiB in {proto_s:.2f} s |",
    ]
    return rows, median, proto_total // max(len(whole), 1)


def heartbeats(c: Cluster, nodes: Sequence[fake_nodes.FakeNode], revision: str, count: int,
               threads: int) -> tuple[list[str], int]:
    """The agent's heartbeat, written ``count`` times to nodes whose pinctl state stays what it was."""
    applied = [node for node in nodes if node.state == "applied"]
    body = fake_nodes.status_patch(fake_nodes.pinctl_condition(applied[0], revision, time.time()) or {})
    longest = max((fake_nodes.status_patch(cond) for node in nodes[:500]
                   if (cond := fake_nodes.pinctl_condition(node, revision, time.time()))), key=len)
    rows = [f"| status patch body, pinctl's condition alone | {len(body)} bytes "
            f"({len(longest)} with the longest message) |"]
    if not count or not applied:
        return rows, len(body)

    def beat(node: fake_nodes.FakeNode) -> bool:
        condition = fake_nodes.pinctl_condition(node, revision, time.time()) or {}
        condition["lastHeartbeatTime"] = fake_nodes.timestamp(time.time())
        c.api.expect("PATCH", f"/api/v1/nodes/{node.name}/status", fake_nodes.status_patch(condition),
                     content_type="application/strategic-merge-patch+json", headers=fake_nodes.PINCTL_AGENT)
        return True

    targets = [applied[i % len(applied)] for i in range(count)]
    cpu = server_cpu(c)
    done, seconds = fake_nodes.run_all(targets, beat, threads, "patched", progress)
    used = server_cpu(c) - cpu
    after = json.loads(c.api.expect("GET", f"/api/v1/nodes/{applied[0].name}")[1])["status"]["conditions"]
    kinds = ", ".join(cond["type"] for cond in after)
    cost = f"; apiserver+etcd CPU {used / done * 1000:.2f} ms each" if c.pids else ""
    rows.append(f"| heartbeat patches (strategic merge, nodes/status) | {done} in {seconds:.1f} s "
                f"({done / seconds:.0f}/s, {threads} threads){cost} |")
    rows.append(f"| conditions after a patch | {kinds} |")
    return rows, len(body)


@dataclasses.dataclass
class Run:
    seconds: float
    peak: int
    code: int
    output: int
    server_cpu: float


def run_measured(c: Cluster, argv: Sequence[str]) -> Run:
    """One run under GNU time (the child's own peak: see bench/common.run_measured), its output to a file."""
    out, peak = c.work / "out", c.work / "peak"
    cpu = server_cpu(c)
    with open(out, "wb") as sink:
        began = time.perf_counter()
        proc = subprocess.run([GNU_TIME, "-f", "%M", "-o", str(peak), *argv], stdout=sink, stderr=subprocess.PIPE,
                              env=loopback_env())
        seconds = time.perf_counter() - began
    if proc.returncode:
        # Recorded, not fatal: a status command may exit non-zero to say the fleet is not all applied.
        said = proc.stderr.decode(errors="replace")[-500:]
        progress(f"{pathlib.Path(argv[0]).name} exited {proc.returncode}: {said}")
    size = out.stat().st_size
    out.unlink()
    return Run(seconds, int(peak.read_text().split()[-1]) * 1024, proc.returncode, size, server_cpu(c) - cpu)


def pinctl_has_fleet_status() -> bool:
    return subprocess.run([PINCTL, "fleet", "status", "--help"], capture_output=True).returncode == 0


def timings(c: Cluster, repeat: int, with_pinctl: bool) -> dict[str, list[Run]]:
    commands = {"kubectl get nodes -o json": c.kubectl_argv("get", "nodes", "-o", "json")}
    if with_pinctl:
        commands["pinctl " + " ".join(PINCTL_FLEET)] = [PINCTL, *PINCTL_FLEET, "--kubeconfig", str(c.kubeconfig)]
    runs: dict[str, list[Run]] = {name: [] for name in commands}
    for name, argv in commands.items():
        warm = run_measured(c, argv)
        progress(f"warm-up {name}: {warm.seconds:.2f} s, {warm.peak / 2**20:.0f} MiB, exit {warm.code}")
    for turn in range(repeat):
        for name, argv in commands.items():  # alternating: both see the same moment's load
            runs[name].append(run_measured(c, argv))
            progress(f"run {turn + 1}/{repeat} {name}: {runs[name][-1].seconds:.2f} s")
    return runs


def run_table(runs: dict[str, list[Run]], nodes: int) -> list[str]:
    rows = ["| command | wall | peak memory | output | exit | apiserver+etcd CPU | ratio to kubectl |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    peer = statistics.median(r.seconds for r in next(iter(runs.values())))
    for name, found in runs.items():
        wall = statistics.median(r.seconds for r in found)
        cpu = f"{statistics.median(r.server_cpu for r in found):.2f} s" if any(r.server_cpu for r in found) else "-"
        rows.append(f"| {name}, {nodes} nodes | {wall * 1000:.0f} ms | {max(r.peak for r in found) / 2**20:.0f} MiB | "
                    f"{found[-1].output / 2**20:.1f} MiB | {','.join(sorted({str(r.code) for r in found}))} | {cpu} | "
                    f"{wall / peer:.3f} |")
    return rows


def arithmetic(nodes: int, node_bytes: int, proto_bytes: int, patch_bytes: int) -> list[str]:
    """Item 6: what the agents' heartbeats cost the API, from the sizes measured here."""
    writes = nodes / HEARTBEAT_S
    return [f"At --status-heartbeat {HEARTBEAT_S / 60:.0f}m and {nodes} nodes: {writes:.1f} status writes/s, "
            f"{writes * patch_bytes / 1024:.1f} KiB/s of patches in. Each write sends the whole Node to every "
            f"watcher of nodes ({node_bytes} bytes as JSON, {proto_bytes} as protobuf): "
            f"{writes * node_bytes / 1024:.0f} KiB/s per JSON watcher, and etcd keeps each old revision until "
            f"the apiserver's compaction (every 5 min: about {writes * HEARTBEAT_S * proto_bytes / 2**20:.0f} MiB "
            f"of history)."]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--patches", type=int, default=1000, help="heartbeat patches to time (0: none)")
    parser.add_argument("--threads", type=int, default=4, help="client threads creating and patching nodes")
    parser.add_argument("--kubeconfig", help="use this running cluster (a kubeconfig naming its certificate files)")
    parser.add_argument("--keep-nodes", action="store_true", help="with --kubeconfig: leave the nodes for a later run")
    parser.add_argument("--keep-controllers", action="store_true",
                        help="leave kube-controller-manager and kube-scheduler running "
                             "(they rewrite kubelet-less nodes)")
    opts = parser.parse_args()
    load = pathlib.Path("/proc/loadavg").read_text().split()[:3]
    nodes = fake_nodes.plan(opts.nodes)
    figures = ["| figure | value |", "| --- | --- |", f"| load (1, 5, 15 min) at the start | {', '.join(load)} |"]
    with cluster(opts) as c:
        figures += memory_line(c, "before the nodes")
        revision = apply_policy(c)
        states = Counter(node.state for node in nodes)
        figures.append(f"| pinctl states planned (revision {revision}) | "
                       + ", ".join(f"{k} {v}" for k, v in states.most_common()) + " |")
        figures += ensure_nodes(c, nodes, revision, opts.threads)
        figures += memory_line(c, "after creating")
        db = etcd_db_size(c)
        if db:
            figures.append(f"| etcd database after creating | {db / 2**20:.0f} MiB |")
        rows, node_bytes, proto_bytes = sizes(c)
        figures += rows
        rows, patch_bytes = heartbeats(c, nodes, revision, opts.patches, opts.threads)
        figures += rows
        with_pinctl = pinctl_has_fleet_status()
        if not with_pinctl:
            progress("`pinctl fleet status --help` does not exit 0: kubectl alone")
        runs = timings(c, opts.repeat, with_pinctl)
        figures += memory_line(c, "at the end")
        if opts.kubeconfig and not opts.keep_nodes:
            fake_nodes.delete(c.api, threads=opts.threads, say=progress)
    print(f"{opts.nodes} nodes, {opts.repeat} runs after a warm-up each, medians; peak memory is the highest run's")
    print("\n".join(run_table(runs, opts.nodes)))
    if not with_pinctl:
        print(f"(pinctl {' '.join(PINCTL_FLEET)}: not measured, `pinctl fleet status --help` did not exit 0)")
    print()
    print("\n".join(figures))
    print()
    print("\n".join(arithmetic(opts.nodes, node_bytes, proto_bytes, patch_bytes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Node objects without kubelets, by the thousand: a fleet for measuring what reads every Node (issue 46).

Nothing runs behind these Nodes. Each is what a kubelet of its runtime would have registered and
kept up to date: labels and annotations, capacity, the four kubelet conditions, addresses,
``nodeInfo`` (``containerRuntimeVersion`` mixing containerd 1.7 and 2.1, Docker through cri-dockerd
and CRI-O, as :data:`RUNTIMES` weighs them) and 20 to 40 ``status.images`` drawn from one pool the
fleet shares, so an object weighs about what a real node's does (the kubelet reports up to 50).
Most carry pinctl's condition (``pinctl.io/PolicyApplied``, worded as src/pinctl/fleet/condition.py
words it) in one of the states :data:`STATES` lists; :func:`plan` says which node got which, so a
test knows what a command reading them should answer. Heartbeats are as of the write: :func:`refresh` writes the
conditions again for a fleet older than ``--stale-after``.

:class:`Api` talks to the API server directly with the admin's client certificate, one keep-alive
connection per thread: kubectl would spend a process, a discovery and a new TLS session per
object. :func:`create` posts nodes from a few threads and prints how far it got; :func:`delete`
removes them again (by :data:`FAKE_LABEL`), for a cluster that outlives the benchmark.

On a cluster with pinctl's DaemonSet (``nodeSelector: kubernetes.io/os: linux``, every taint
tolerated) each fake node gets a pod that never starts: pass ``os_label`` another value there.
Without kubelets, kube-controller-manager's node lifecycle controller rewrites every node: at create
the admission plugin TaintNodesByCondition adds ``node.kubernetes.io/not-ready:NoSchedule``, which
the controller takes off again, and 50 s later (no Lease is ever renewed) it marks Ready Unknown
and adds the ``unreachable`` taints. Three writes per node, at the controller's client rate (about
3 nodes a second here: 10,000 take the best part of an hour), and a fleet that reads as NotReady
more and more; bench_fleet_status stops the controller first.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import http.client
import json
import pathlib
import random
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import yaml

CONDITION_TYPE = "pinctl.io/PolicyApplied"
FAKE_LABEL = "pinctl.test/fake-node"
# What a kubelet of each runtime reports, and the share of the fleet running it. The label is
# what an operator puts on a node that does not run containerd (deploy/kubernetes/README.md).
RUNTIMES: Sequence[tuple[str, float, Optional[str]]] = (
    ("containerd://1.7.24", 0.30, None),
    ("containerd://1.7.27", 0.15, None),
    ("containerd://2.1.4", 0.30, None),
    ("docker://26.1.5", 0.10, "cri-dockerd"),
    ("cri-o://1.34.0", 0.15, "cri-o"),
)
# pinctl's state on a node, and its share: mostly applied at the ConfigMap's revision.
STATES: Sequence[tuple[str, float]] = (
    ("applied", 0.80),        # True, PolicyApplied, the current revision
    ("not-kept", 0.04),       # False, ImagesNotKept: one image the runtime ignores the label of
    ("old-revision", 0.05),   # True, PolicyApplied, an older revision (the ConfigMap not there yet)
    ("stale", 0.04),          # True at the current revision, last heartbeat hours ago
    ("reload-failed", 0.01),  # False, ReloadFailed, the older revision
    ("agent-not-ready", 0.01),  # Unknown, AgentNotReady
    ("none", 0.05),           # no pinctl condition: no agent there
)
OLD_REVISION = "5e1f0c2a9b7d"
STALE_SECONDS = (2 * 3600, 6 * 3600)
IMAGE_POOL = 400
IMAGES_PER_NODE = (20, 40)
# The apiserver names a write's field manager after the user agent's first word: the nodes are
# the kubelet's, their pinctl condition the agent's, as in managedFields on a real node.
KUBELET_AGENT = "kubelet/v1.37.2 (linux/amd64) fake_nodes"
PINCTL_AGENT = {"User-Agent": "pinctl/0.1.0"}
REQUEST_TIMEOUT_S = 120.0
RETRIES = 5
PROGRESS_EVERY_S = 5.0
Say = Callable[[str], None]


class ApiError(RuntimeError):
    """The API server refused a request, or did not answer after retries."""


def revision_of(policy: bytes) -> str:
    """A policy's revision as the agents report it: the first 12 hex digits of sha256 of its bytes."""
    return hashlib.sha256(policy).hexdigest()[:12]


def timestamp(epoch: float) -> str:
    """A metav1.Time: RFC 3339 in UTC, whole seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


# --- the API ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Api:
    """The API server at ``server``, as the holder of a client certificate (the harness's admin)."""

    server: str
    ca: pathlib.Path
    cert: pathlib.Path
    key: pathlib.Path
    user_agent: str = KUBELET_AGENT
    _local: threading.local = dataclasses.field(default_factory=threading.local, compare=False, repr=False)

    @classmethod
    def from_kubeconfig(cls, path: pathlib.Path) -> Api:
        """A kubeconfig that names its files, as the harness writes them (cluster_pki.kubeconfig)."""
        config = yaml.safe_load(path.read_text())
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        try:
            return cls(cluster["server"], pathlib.Path(cluster["certificate-authority"]),
                       pathlib.Path(user["client-certificate"]), pathlib.Path(user["client-key"]))
        except KeyError as exc:
            raise ApiError(f"{path}: needs certificate-authority, client-certificate and client-key files "
                           f"({exc})") from exc

    def _connection(self) -> http.client.HTTPSConnection:
        conn: Optional[http.client.HTTPSConnection] = getattr(self._local, "conn", None)
        if conn is None:
            context = ssl.create_default_context(cafile=str(self.ca))
            context.load_cert_chain(str(self.cert), str(self.key))
            url = urllib.parse.urlsplit(self.server)
            conn = http.client.HTTPSConnection(url.hostname or "127.0.0.1", url.port or 443, context=context,
                                               timeout=REQUEST_TIMEOUT_S)
            self._local.conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def request(self, method: str, path: str, body: Optional[bytes] = None, content_type: str = "application/json",
                headers: Optional[dict[str, str]] = None) -> tuple[int, bytes, dict[str, str]]:
        """(status, body, headers), on this thread's connection. A dropped connection, 429 or 5xx is
        retried: a busy apiserver sheds load with 429 and its own timeouts."""
        sent = {"Content-Type": content_type, "Accept": "application/json", "User-Agent": self.user_agent,
                **(headers or {})}
        failure = ""
        for attempt in range(RETRIES):
            try:
                conn = self._connection()
                conn.request(method, path, body=body, headers=sent)
                reply = conn.getresponse()
                data = reply.read()
            except (OSError, http.client.HTTPException) as exc:
                self._drop_connection()
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if reply.status != 429 and reply.status < 500:
                    return reply.status, data, {k.lower(): v for k, v in reply.getheaders()}
                failure = f"{reply.status} {data[:300]!r}"
            time.sleep(0.5 * 2 ** attempt)
        raise ApiError(f"{method} {path}: {failure} after {RETRIES} tries")

    def expect(self, method: str, path: str, body: Optional[bytes] = None, ok: Iterable[int] = (200, 201),
               content_type: str = "application/json", headers: Optional[dict[str, str]] = None) -> tuple[int, bytes]:
        status, data, _ = self.request(method, path, body, content_type, headers)
        if status not in tuple(ok):
            raise ApiError(f"{method} {path}: {status} {data[:500].decode(errors='replace')}")
        return status, data

    def pages(self, path: str, limit: int = 500, headers: Optional[dict[str, str]] = None) -> Iterator[bytes]:
        """Each page of a list as sent (gzip or protobuf if ``headers`` ask), following ``continue``
        as kubectl's --chunk-size does; ``limit`` 0 asks for all in one answer."""
        token = ""
        sep = "&" if "?" in path else "?"
        while True:
            query = path + (f"{sep}limit={limit}" if limit else "")
            query += f"&continue={urllib.parse.quote(token)}" if token else ""
            status, data, got = self.request("GET", query, headers=headers)
            if status != 200:
                raise ApiError(f"GET {query}: {status} {data[:500]!r}")
            yield data
            if not limit or "json" not in got.get("content-type", ""):
                return
            text = gzip.decompress(data) if got.get("content-encoding") == "gzip" else data
            token = json.loads(text)["metadata"].get("continue", "")
            if not token:
                return


# --- what each node is ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FakeNode:
    """One planned node: its name, what its kubelet reports as runtime, and pinctl's state there."""

    name: str
    index: int
    runtime: str
    runtime_label: Optional[str]
    state: str


def _pick(rng: random.Random, choices: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
    return rng.choices(choices, weights=[c[1] for c in choices])[0]


def plan(count: int, prefix: str = "fake-node", seed: int = 46) -> list[FakeNode]:
    """``count`` nodes named ``<prefix>-00001`` on; the same arguments give the same fleet."""
    rng = random.Random(seed)
    width = max(5, len(str(count)))
    nodes = []
    for i in range(1, count + 1):
        runtime, _, label = _pick(rng, RUNTIMES)
        state = _pick(rng, STATES)[0]
        nodes.append(FakeNode(f"{prefix}-{i:0{width}d}", i, runtime, label, state))
    return nodes


def _image_pool() -> list[tuple[str, str, int]]:
    """(repository, tag, size) of the images a fleet shares: its platform's and its teams' apps."""
    rng = random.Random(4646)
    pool = []
    for i in range(IMAGE_POOL):
        owner = f"team-{i % 23}" if i % 5 else "platform"
        repo = f"example.test/{owner}/{rng.choice(('api', 'worker', 'sidecar', 'agent', 'exporter', 'proxy'))}-{i}"
        tag = f"v{rng.randint(0, 4)}.{rng.randint(0, 30)}.{rng.randint(0, 12)}"
        pool.append((repo, tag, rng.randint(4_000_000, 900_000_000)))
    return pool


_POOL = _image_pool()


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def pinctl_condition(node: FakeNode, revision: str, now: float) -> Optional[dict[str, str]]:
    """The condition the node's agent would have written last, or None where there is no agent."""
    if node.state == "none":
        return None
    rng = random.Random(node.index * 7919)
    wanted = rng.randint(3, 12)
    absent = rng.randint(0, min(2, wanted - 1))
    heartbeat = now - rng.uniform(0, 300)  # within one --status-heartbeat, jittered
    status, reason, rev, not_kept, tail = "True", "PolicyApplied", revision, 0, ""
    if node.state == "not-kept":
        status, reason, not_kept = "False", "ImagesNotKept", 1
        repo, tag, _ = _POOL[node.index % IMAGE_POOL]
        tail = f"; {repo}:{tag}: the runtime ignores the label"
    elif node.state == "old-revision":
        rev = OLD_REVISION
    elif node.state == "stale":
        heartbeat = now - rng.uniform(*STALE_SECONDS)
    elif node.state == "reload-failed":
        status, reason, rev = "False", "ReloadFailed", OLD_REVISION
        tail = "; the changed policy did not load: config.toml line 7: pinned_images: expected a list of strings"
    elif node.state == "agent-not-ready":
        status, reason = "Unknown", "AgentNotReady"
        tail = "; the runtime does not answer"
    pinned = wanted - absent - not_kept
    message = f"revision {rev}: {wanted} wanted, {pinned} pinned, {absent} absent, {not_kept} not kept{tail}"
    return {"type": CONDITION_TYPE, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": timestamp(heartbeat),
            "lastTransitionTime": timestamp(heartbeat - rng.uniform(0, 86400))}


def status_patch(condition: dict[str, str]) -> bytes:
    """The agent's write: a strategic merge patch of status.conditions (merge key ``type``), this condition only."""
    return json.dumps({"status": {"conditions": [condition]}}, separators=(",", ":")).encode()


def _kubelet_conditions(now: float, rng: random.Random) -> list[dict[str, str]]:
    since = timestamp(now - rng.uniform(86400, 90 * 86400))
    beat = timestamp(now - rng.uniform(0, 40))

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {"type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": beat, "lastTransitionTime": since}

    return [condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                      "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")]


def node_object(node: FakeNode, revision: str, now: float, os_label: str = "linux") -> dict[str, Any]:
    """The Node as its kubelet registered it and keeps it, with pinctl's condition if it has one."""
    rng = random.Random(node.index)
    zone = f"zone-{'abc'[node.index % 3]}"
    cpu, memory_gib = rng.choice(((4, 16), (8, 32), (16, 64), (32, 128), (64, 256)))
    third = node.index // 250
    ip = f"10.{20 + third // 250}.{third % 250}.{node.index % 250 + 2}"
    capacity = {"cpu": str(cpu), "ephemeral-storage": "203056560Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                "memory": f"{memory_gib * 1024 * 1024 - 190_000}Ki", "pods": "110"}
    allocatable = {**capacity, "cpu": f"{cpu * 1000 - 90}m", "ephemeral-storage": "187136925387",
                   "memory": f"{memory_gib * 1024 * 1024 - 1_300_000}Ki"}
    chosen = sorted(rng.sample(_POOL, rng.randint(*IMAGES_PER_NODE)), key=lambda image: -image[2])
    # The kubelet reports the largest first.
    images = [{"names": [f"{repo}@{_digest(repo + tag)}", f"{repo}:{tag}"], "sizeBytes": size}
              for repo, tag, size in chosen]
    labels = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": os_label, "kubernetes.io/arch": "amd64",
              "kubernetes.io/hostname": node.name, "kubernetes.io/os": os_label,
              "node.kubernetes.io/instance-type": f"standard-{cpu}x{memory_gib}",
              "topology.kubernetes.io/region": "region-1", "topology.kubernetes.io/zone": zone,
              f"node-pool.example.test/{'general' if node.index % 4 else 'batch'}": "true", FAKE_LABEL: "true"}
    if node.runtime_label:
        labels["pinctl.io/runtime"] = node.runtime_label
    conditions = _kubelet_conditions(now, rng)
    pinctl = pinctl_condition(node, revision, now)
    if pinctl:
        conditions.append(pinctl)
    machine = hashlib.md5(node.name.encode()).hexdigest()  # noqa: S324 - an ID's shape, not security
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node.name, "labels": labels, "annotations": {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            "csi.volume.kubernetes.io/nodeid": json.dumps({"csi.example.test": f"i-{machine[:17]}"}),
        }},
        "spec": {"podCIDR": f"100.{64 + node.index // 256 % 64}.{node.index % 256}.0/24",
                 "podCIDRs": [f"100.{64 + node.index // 256 % 64}.{node.index % 256}.0/24"],
                 "providerID": f"example://{zone}/i-{machine[:17]}"},
        "status": {
            "capacity": capacity, "allocatable": allocatable, "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": node.name},
                          {"type": "InternalDNS", "address": f"{node.name}.{zone}.compute.example.test"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": machine, "systemUUID": f"{machine[:8]}-{machine[8:12]}-{machine[12:16]}-"
                                                             f"{machine[16:20]}-{machine[20:]}",
                         "bootID": hashlib.md5(f"boot{node.index}".encode()).hexdigest(),  # noqa: S324
                         "kernelVersion": "6.1.0-28-cloud-amd64", "osImage": "Debian GNU/Linux 12 (bookworm)",
                         "containerRuntimeVersion": node.runtime, "kubeletVersion": "v1.37.2",
                         "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
            "images": images,
            "runtimeHandlers": [{"name": name, "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}}
                                for name in ("", "runc")],
            "features": {"supplementalGroupsPolicy": True},
        },
    }


# --- creating and deleting them -------------------------------------------------------------------------


@dataclasses.dataclass
class Created:
    """What :func:`create` did: how many, how long, and whether the status had to be written apart."""

    created: int = 0
    existed: int = 0
    seconds: float = 0.0
    status_patched: bool = False


def _create_one(api: Api, node: FakeNode, revision: str, os_label: str, state: dict[str, bool]) -> bool:
    body = node_object(node, revision, time.time(), os_label)
    status, data = api.expect("POST", "/api/v1/nodes", json.dumps(body).encode(), ok=(201, 409))
    if status == 409:
        return False
    kept = json.loads(data).get("status", {}).get("nodeInfo", {}).get("containerRuntimeVersion")
    if not kept:
        # An apiserver that drops status at create (this one keeps it): write it the way a kubelet does.
        state["patched"] = True
        api.expect("PATCH", f"/api/v1/nodes/{node.name}/status", json.dumps({"status": body["status"]}).encode(),
                   content_type="application/merge-patch+json")
    return True


def run_all(items: Sequence[Any], work: Callable[[Any], bool], threads: int, verb: str, say: Say) -> tuple[int, float]:
    """work(item) for each item on ``threads`` threads, a progress line every few seconds; (done, seconds)."""
    began = time.monotonic()
    done = counted = 0
    last = began
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for did in pool.map(work, items):
            counted += 1
            done += bool(did)
            now = time.monotonic()
            if now - last >= PROGRESS_EVERY_S:
                last = now
                say(f"{verb} {counted} of {len(items)} nodes, {counted / (now - began):.0f}/s")
    return done, time.monotonic() - began


def create(api: Api, nodes: Sequence[FakeNode], revision: str, threads: int = 4, os_label: str = "linux",
           say: Say = print) -> Created:
    """Each of ``nodes`` created with its status; one that exists already is left as it is."""
    state = {"patched": False}
    say(f"creating {len(nodes)} nodes on {threads} threads")
    made, seconds = run_all(nodes, lambda node: _create_one(api, node, revision, os_label, state), threads,
                             "created", say)
    return Created(made, len(nodes) - made, seconds, state["patched"])


def refresh(api: Api, nodes: Sequence[FakeNode], revision: str, threads: int = 4, say: Say = print) -> int:
    """pinctl's condition written again on each node that has one, as planned as of now: a heartbeat
    is as old as the write that set it, so after ``--stale-after`` (15 min) every node reads as stale."""
    def beat(node: FakeNode) -> bool:
        condition = pinctl_condition(node, revision, time.time())
        if condition is None:
            return False
        api.expect("PATCH", f"/api/v1/nodes/{node.name}/status", status_patch(condition),
                   content_type="application/strategic-merge-patch+json", headers=PINCTL_AGENT)
        return True

    say(f"writing pinctl's condition again on {len(nodes)} nodes")
    return run_all(nodes, beat, threads, "refreshed", say)[0]


METADATA_ONLY = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}


def names(api: Api, selector: str = f"{FAKE_LABEL}=true") -> list[str]:
    """The names of the nodes ``selector`` matches (their metadata only: a tenth of the bytes)."""
    found = []
    for page in api.pages(f"/api/v1/nodes?labelSelector={urllib.parse.quote(selector)}", headers=METADATA_ONLY):
        found += [item["metadata"]["name"] for item in json.loads(page)["items"] or []]
    return found


def delete(api: Api, selector: str = f"{FAKE_LABEL}=true", threads: int = 4, say: Say = print) -> int:
    """Delete every node ``selector`` matches, one request each; how many went."""
    doomed = names(api, selector)
    say(f"deleting {len(doomed)} nodes on {threads} threads")

    def gone(name: str) -> bool:
        return api.expect("DELETE", f"/api/v1/nodes/{name}", ok=(200, 202, 404))[0] != 404

    return run_all(doomed, gone, threads, "deleted", say)[0]

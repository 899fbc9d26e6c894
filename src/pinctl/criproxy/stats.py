"""What cri-proxy tells monitoring: counters kept inline on its hot path, and the figures a scrape
reads (ProxyFigures; criproxy.health fills them, with the proxy's health).

The proxy's hot path only counts, at the cost of a dict increment: a scrape copies the counters
and reads the pinned set the proxy already holds, so a scrape never waits on containerd or the
runtime, and a CRI call never waits on a scrape.

One proxy runs per process, and the calls are counted in module-level functions as well as in
the forwarder's methods (rewrite, mark_pinned, _abort): the counters are one process-wide
ProxyStats, STATS, rather than an object passed to each of them.

Why a plain `d[k] += 1` from the gRPC server's many worker threads loses no increment: the keys
are str and every key is present from the start, so the read, the add and the write run no
Python code, and CPython (3.10 and later) switches threads only at function calls, returns and
backward jumps, never between them. A free-threaded build (3.13t) would need a lock here.
tests/unit/test_proxystats.py counts from eight threads at once to hold this to account.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Optional, get_args

from pinctl.service.monitoring import Runtime

# runtime.v1's methods (k8s.io/cri-api). A call's method name comes from the caller, so any
# other name is counted as OTHER_METHOD: the label's values stay a closed set.
RUNTIME_SERVICE_METHODS = (
    "Version", "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "PodSandboxStatus", "ListPodSandbox",
    "CreateContainer", "StartContainer", "StopContainer", "RemoveContainer", "ListContainers", "ContainerStatus",
    "UpdateContainerResources", "ReopenContainerLog", "ExecSync", "Exec", "Attach", "PortForward",
    "ContainerStats", "ListContainerStats", "PodSandboxStats", "ListPodSandboxStats", "UpdateRuntimeConfig",
    "Status", "CheckpointContainer", "GetContainerEvents", "ListMetricDescriptors", "ListPodSandboxMetrics",
    "RuntimeConfig", "UpdatePodSandboxResources",
    # cri-api v0.37's streamed lists (the kubelet's CRIListStreaming).
    "StreamPodSandboxes", "StreamContainers", "StreamContainerStats", "StreamPodSandboxStats",
    "StreamPodSandboxMetrics",
)
IMAGE_SERVICE_METHODS = ("ListImages", "StreamImages", "ImageStatus", "PullImage", "RemoveImage", "ImageFsInfo")
OTHER_METHOD: Final = "other"
# The full gRPC path of a known method -> its label (the method's name: unique across both services).
METHOD_LABELS: dict[str, str] = {
    **{f"/runtime.v1.RuntimeService/{name}": name for name in RUNTIME_SERVICE_METHODS},
    **{f"/runtime.v1.ImageService/{name}": name for name in IMAGE_SERVICE_METHODS},
}

# gRPC's status codes other than OK, by name (grpc.StatusCode; a unit test keeps them equal).
ERROR_CODES = (
    "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
)

# Why an image answer went back to the caller as the runtime sent it, as a closed set.
PassedThrough = Literal["pins-unreadable", "answer-unreadable"]
PINS_UNREADABLE: Final = "pins-unreadable"  # the labels, policy or Docker could not be read
ANSWER_UNREADABLE: Final = "answer-unreadable"  # pinctl could not parse the runtime's answer
PASSED_THROUGH: tuple[PassedThrough, ...] = get_args(PassedThrough)

READ_RESULTS = ("ok", "failed")  # pin reads, in this order: PinnedSet.ok_reads, .failures
KEY_KINDS = ("id", "name")  # the pinned set's keys, in this order: PinnedKeys.ids, .names


class ProxyStats:
    """The proxy's counters: written by the gRPC worker threads, copied by scrapes."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = dict.fromkeys([*METHOD_LABELS.values(), OTHER_METHOD], 0)
        # A Counter on the error path only: a code outside ERROR_CODES (none is known) still counts.
        self.upstream_errors: Counter[str] = Counter(dict.fromkeys(ERROR_CODES, 0))
        self.passed_through: dict[str, int] = dict.fromkeys(PASSED_THROUGH, 0)
        self.images_marked = 0


STATS = ProxyStats()


def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, OTHER_METHOD)


# -- what a scrape reads --------------------------------------------------------------------------


@dataclass(frozen=True)
class ProxyFigures:
    """The proxy's metrics at one moment. pinned_keys and pins_age are None while the pins are
    unreadable or not read yet; runtime is None until the proxy has asked the runtime its name."""

    ready: bool
    calls: dict[str, int]
    upstream_errors: dict[str, int]
    pin_reads: dict[str, int]
    passed_through: dict[str, int]
    images_marked: int
    pinned_keys: Optional[dict[str, int]]
    pins_age: Optional[float]
    runtime: Optional[Runtime]
    config_reloads: dict[str, int]
    last_reload_ok: bool
    # RemoveImage by outcome (journal.REQUEST_OUTCOMES): decided in this process on both paths.
    remove_requests: dict[str, int] = field(default_factory=dict)


def relay_stats(counted: dict[str, Any]) -> ProxyStats:
    """What pinctl-cri-relay counted (its `stats` message), as the same counters: upstream errors
    come by numeric code, which is ERROR_CODES' position plus one."""
    stats = ProxyStats()
    for method, count in counted.get("calls", {}).items():
        stats.calls[method_label(method)] += count
    for code, count in counted.get("upstream_errors", {}).items():
        number = int(code)
        stats.upstream_errors[ERROR_CODES[number - 1] if 0 < number <= len(ERROR_CODES) else code] += count
    stats.passed_through[PINS_UNREADABLE] = counted.get("passed_through", 0)
    stats.passed_through[ANSWER_UNREADABLE] = counted.get("unreadable_answers", 0)
    stats.images_marked = counted.get("images_marked", 0)
    return stats

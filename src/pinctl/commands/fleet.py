"""fleet status: each node's pinctl condition against the policy ConfigMap, once or until applied.

It reads two things from the API server, the ConfigMap and the Nodes (both with the operator's
own kubeconfig), and asks no agent anything: each agent has written its node's condition.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Optional

from pinctl.errors import EXIT_ERROR, EXIT_OK, PinctlError, UsageError
from pinctl.fleet.condition import POLICY_CONFIGMAP, POLICY_KEY, POLICY_NAMESPACE

if TYPE_CHECKING:
    from pinctl.kubeapi import KubeApi
    from pinctl.fleet.status import FleetStatus

# --wait asks the API server again this often: two light lists per poll.
POLL_S = 2.0


@dataclass(frozen=True)
class FleetStatusRequest:
    kubeconfig: Optional[str] = None
    context: Optional[str] = None
    selector: str = ""
    namespace: str = POLICY_NAMESPACE
    configmap: str = POLICY_CONFIGMAP
    key: str = POLICY_KEY
    stale_after: float = 900.0
    wait: float = 0.0  # seconds; 0: look once


@dataclass(frozen=True)
class FleetStatusReport:
    status: FleetStatus
    waited: Optional[float]  # how long --wait polled; None without it
    timed_out: bool

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.status.all_applied else EXIT_ERROR


def fleet_status(request: FleetStatusRequest, progress: Callable[[FleetStatus, float], None],
                 connect: Optional[Callable[[], KubeApi]] = None,
                 clock: Callable[[], float] = time.monotonic) -> FleetStatusReport:
    from pinctl.kubeapi import KubeApi

    api = (connect or (lambda: KubeApi.for_operator(request.kubeconfig, request.context)))()
    try:
        began = clock()
        while True:
            status = _read(api, request)
            left = request.wait - (clock() - began)
            if status.all_applied or request.wait <= 0 or left <= 0:
                waited = round(clock() - began, 1) if request.wait > 0 else None
                return FleetStatusReport(status, waited, request.wait > 0 and not status.all_applied)
            progress(status, left)
            time.sleep(min(POLL_S, max(0.0, left)))
    finally:
        api.close()


def _read(api: KubeApi, request: FleetStatusRequest) -> FleetStatus:
    from pinctl.kubeapi import KubeNotFound
    from pinctl.fleet.condition import revision_of
    from pinctl.fleet.status import judge

    where = f"configmap {request.namespace}/{request.configmap}"
    try:
        data = api.configmap_data(request.namespace, request.configmap)
    except KubeNotFound:
        raise PinctlError(f"no {where} at {api.where}",
                          "is pinctl deployed there? give --namespace and --configmap, or --context") from None
    if request.key not in data:
        keys = ", ".join(sorted(data)) or "none"
        raise UsageError(f"{where} has no key {request.key!r} (it has {keys})", "give --key")
    nodes = api.nodes(request.selector)
    if not nodes:
        chosen = f" matches -l {request.selector}" if request.selector else " is registered"
        raise PinctlError(f"no node{chosen} at {api.where}", "check the selector with kubectl get nodes -l ...")
    return judge(nodes, revision_of(data[request.key].encode("utf-8")), datetime.now(timezone.utc),
                 request.stale_after)

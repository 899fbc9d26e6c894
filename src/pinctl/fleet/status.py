"""fleet status, judged: each Node's pinctl condition against the ConfigMap's revision. Pure.

A node is applied when its agent wrote, recently enough, that it runs the ConfigMap's current
revision and keeps every image the policy covers (an exact pattern's image the node lacks is
counted absent and does not count against it: it is pinned when it arrives).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Optional, Sequence

from pinctl.fleet.condition import (CONDITION_TYPE, REASON_RELOAD_FAILED, PolicyCounts, parse_message,
                                    parse_time)

STATE_APPLIED: Final = "applied"
STATE_NOT_KEPT: Final = "not kept"
STATE_OLD_REVISION: Final = "old revision"
STATE_RELOAD_FAILED: Final = "reload failed"
STATE_NOT_READY: Final = "not ready"
STATE_STALE: Final = "stale"
STATE_NO_AGENT: Final = "no agent"
STATE_UNREADABLE: Final = "unreadable"
STATES = (STATE_APPLIED, STATE_NOT_KEPT, STATE_OLD_REVISION, STATE_RELOAD_FAILED, STATE_NOT_READY, STATE_STALE,
          STATE_NO_AGENT, STATE_UNREADABLE)
# Three heartbeats (5 minutes each by default) without a word: the agent is gone or cut off.
STALE_AFTER_S = 900.0


@dataclass(frozen=True)
class NodeRow:
    node: str
    runtime: str  # the Node's status.nodeInfo.containerRuntimeVersion
    state: str
    revision: str  # what the agent runs; "" when unknown
    counts: Optional[PolicyCounts]
    why: str  # the first reason, one line; "" when applied
    heartbeat_age: Optional[float]  # seconds since the agent last wrote

    @property
    def applied(self) -> bool:
        return self.state == STATE_APPLIED


@dataclass(frozen=True)
class FleetStatus:
    revision: str  # the ConfigMap's
    rows: list[NodeRow]

    @property
    def applied(self) -> int:
        return sum(row.applied for row in self.rows)

    @property
    def all_applied(self) -> bool:
        return bool(self.rows) and all(row.applied for row in self.rows)


def judge(nodes: Sequence[dict[str, Any]], revision: str, now: datetime,
          stale_after: float = STALE_AFTER_S) -> FleetStatus:
    """nodes: Node objects as the API returns them (only name, nodeInfo and conditions are read)."""
    rows = [_row(node, revision, now, stale_after) for node in nodes]
    return FleetStatus(revision, sorted(rows, key=lambda row: row.node))


def _row(node: dict[str, Any], revision: str, now: datetime, stale_after: float) -> NodeRow:
    name = str((node.get("metadata") or {}).get("name", ""))
    status = node.get("status") or {}
    runtime = str((status.get("nodeInfo") or {}).get("containerRuntimeVersion", ""))
    ours = [c for c in status.get("conditions") or [] if c.get("type") == CONDITION_TYPE]
    if not ours:
        return NodeRow(name, runtime, STATE_NO_AGENT, "", None, "no pinctl agent has written this node's status", None)
    condition = ours[0]
    beat = parse_time(condition.get("lastHeartbeatTime"))
    age = max(0.0, (now - beat).total_seconds()) if beat else None
    parsed = parse_message(str(condition.get("message", "")))
    if parsed is None:
        return NodeRow(name, runtime, STATE_UNREADABLE, "", None,
                       f"cannot read the agent's message (a newer pinctl?): {condition.get('message', '')}", age)
    row = NodeRow(name, runtime, STATE_APPLIED, parsed.revision, parsed.counts, parsed.why, age)
    if age is None or age > stale_after:
        since = "never" if age is None else f"{_minutes(age)} ago"
        return _with(row, STATE_STALE, f"the agent last wrote {since}; is it running?")
    if condition.get("status") == "Unknown":
        return _with(row, STATE_NOT_READY, parsed.why or "the agent is not ready")
    if condition.get("reason") == REASON_RELOAD_FAILED:
        return _with(row, STATE_RELOAD_FAILED, parsed.why)
    if parsed.revision != revision:
        return _with(row, STATE_OLD_REVISION, f"runs revision {parsed.revision or 'none'}; the ConfigMap has {revision}")
    if parsed.counts.not_kept or condition.get("status") != "True":
        return _with(row, STATE_NOT_KEPT, parsed.why or str(condition.get("reason", "")))
    return _with(row, STATE_APPLIED, "")


def _with(row: NodeRow, state: str, why: str) -> NodeRow:
    return NodeRow(row.node, row.runtime, state, row.revision, row.counts, why, row.heartbeat_age)


def _minutes(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"


def progress_line(status: FleetStatus, seconds_left: float) -> str:
    """One line for --wait on a terminal, most important first (it is cut to the window): how
    many are applied, the time left, the first node waited for and why."""
    waiting = [row for row in status.rows if not row.applied]
    line = f"{status.applied}/{len(status.rows)} nodes applied, {seconds_left:.0f} s left"
    if waiting:
        line += f"; waiting for {waiting[0].node} ({waiting[0].state})"
        if len(waiting) > 1:
            line += f" and {len(waiting) - 1} more"
    return line

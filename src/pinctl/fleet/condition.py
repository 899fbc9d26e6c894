"""What an agent says on its Node, and how fleet status reads it back. Pure: no I/O, no clock.

Each agent writes one Node condition of pinctl's own type. Its message is one line a person
reads in ``kubectl describe node`` and fleet status parses back, so its grammar is fixed here
and nowhere else:

    revision 0123456789ab: 5 wanted, 3 pinned, 1 absent, 1 not kept; example.test/x:1: the runtime ignores the label

The revision is the policy file's content hash: the same bytes in the ConfigMap give the same
revision, so fleet status compares the ConfigMap's revision with each node's without asking
the agents anything.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final, Optional

CONDITION_TYPE: Final = "pinctl.io/PolicyApplied"
# The ConfigMap and its key that deploy/kubernetes mounts as the agents' policy.
POLICY_NAMESPACE: Final = "pinctl"
POLICY_CONFIGMAP: Final = "pinctl-config"
POLICY_KEY: Final = "config.toml"
REVISION_DIGITS = 12

REASON_APPLIED: Final = "PolicyApplied"
REASON_NOT_KEPT: Final = "ImagesNotKept"
REASON_RELOAD_FAILED: Final = "ReloadFailed"
REASON_NOT_READY: Final = "AgentNotReady"
# Kubernetes caps a condition's message nowhere, but kubectl describe shows it on one line.
MESSAGE_MAX = 300

_MESSAGE = re.compile(
    r"^revision (?P<revision>[0-9a-f]+|none): (?P<wanted>\d+) wanted, (?P<pinned>\d+) pinned, "
    r"(?P<absent>\d+) absent, (?P<not_kept>\d+) not kept(?:; (?P<why>.*))?$")


def revision_of(content: bytes) -> str:
    """The policy's revision: what the agent hashes from its file and fleet status from the ConfigMap."""
    return hashlib.sha256(content).hexdigest()[:REVISION_DIGITS]


@dataclass(frozen=True)
class PolicyCounts:
    """The policy's images on one node: distinct images a pattern covers, by what became of them.
    absent counts exact patterns naming an image the node does not hold (pinned on arrival)."""

    wanted: int = 0
    pinned: int = 0
    absent: int = 0
    not_kept: int = 0


@dataclass(frozen=True)
class NodeReport:
    """What the agent knows of its node at one moment, before it is put into words."""

    revision: str
    counts: PolicyCounts
    # The first image not kept and why, when any is.
    first_not_kept: str = ""
    why_not_kept: str = ""
    ready: bool = True
    not_ready_why: str = ""
    reload_failed: str = ""  # the error of a changed policy that did not load; the old one stays


@dataclass(frozen=True)
class Condition:
    """A Node condition without its times (they are the writer's business)."""

    status: str  # "True", "False" or "Unknown"
    reason: str
    message: str

    def as_patch(self, heartbeat: datetime, transition: datetime) -> dict[str, object]:
        """A strategic-merge patch of status.conditions touching this condition alone (merge key: type)."""
        return {"status": {"conditions": [{
            "type": CONDITION_TYPE, "status": self.status, "reason": self.reason, "message": self.message,
            "lastHeartbeatTime": rfc3339(heartbeat), "lastTransitionTime": rfc3339(transition)}]}}


def condition_of(report: NodeReport) -> Condition:
    message = summary(report.revision, report.counts)
    if not report.ready:
        return Condition("Unknown", REASON_NOT_READY, _clip(f"{message}; {report.not_ready_why}"))
    if report.reload_failed:
        return Condition("False", REASON_RELOAD_FAILED,
                         _clip(f"{message}; the changed policy did not load: {report.reload_failed}"))
    if report.counts.not_kept:
        return Condition("False", REASON_NOT_KEPT,
                         _clip(f"{message}; {report.first_not_kept}: {report.why_not_kept}"))
    return Condition("True", REASON_APPLIED, message)


def summary(revision: str, counts: PolicyCounts) -> str:
    return (f"revision {revision or 'none'}: {counts.wanted} wanted, {counts.pinned} pinned, "
            f"{counts.absent} absent, {counts.not_kept} not kept")


@dataclass(frozen=True)
class ParsedMessage:
    revision: str
    counts: PolicyCounts
    why: str


def parse_message(message: str) -> Optional[ParsedMessage]:
    """The message written by condition_of, or None for one this pinctl cannot read (a newer agent's)."""
    found = _MESSAGE.match(message.strip())
    if found is None:
        return None
    counts = PolicyCounts(*(int(found[key]) for key in ("wanted", "pinned", "absent", "not_kept")))
    revision = found["revision"] if found["revision"] != "none" else ""
    return ParsedMessage(revision, counts, found["why"] or "")


def parse_time(text: Optional[str]) -> Optional[datetime]:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def rfc3339(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _clip(message: str) -> str:
    line = " ".join(message.split())
    return line if len(line) <= MESSAGE_MAX else line[:MESSAGE_MAX - 3] + "..."

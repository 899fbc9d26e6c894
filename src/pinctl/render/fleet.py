"""fleet status on a terminal, into a pipe and as JSON; the status line of --wait."""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, TextIO

from pinctl.fleet.status import progress_line
from pinctl.model import FORMAT_JSON, FORMAT_WIDE, OutputFormat
from pinctl.render import table
from pinctl.render.output import print_table, waiting_line, warn, write_envelope

if TYPE_CHECKING:
    from pinctl.commands.fleet import FleetStatusReport
    from pinctl.fleet.status import FleetStatus, NodeRow

# WHY wraps; then the figures leave, before a node's name is ever cut.
FLEET_FIT = table.give_way("NODE", last="WHY", drop=["RUNTIME", "PINNED"])
WIDE_FIT = table.give_way("NODE", last="WHY", drop=["HEARTBEAT", "RUNTIME", "REVISION", "ABSENT", "WANTED", "NOT KEPT",
                                                    "PINNED"])


def print_fleet_status(report: FleetStatusReport, fmt: OutputFormat, quiet: bool = False,
                       out: Optional[TextIO] = None) -> None:
    """A row per node; -q: the names of the nodes not applied, one per line (to feed kubectl)."""
    out = out or sys.stdout
    status = report.status
    if fmt == FORMAT_JSON:
        write_envelope(out, revision=status.revision, all_applied=status.all_applied, waited_seconds=report.waited,
                       nodes=[node_dict(row) for row in status.rows])
    elif quiet:
        out.write("".join(f"{row.node}\n" for row in status.rows if not row.applied))
    elif fmt == FORMAT_WIDE:
        cells = [[row.node, row.state, row.runtime or "-", row.revision or "-", *_counts(row), _age(row), row.why or "-"]
                 for row in status.rows]
        print_table(["NODE", "STATE", "RUNTIME", "REVISION", "WANTED", "PINNED", "ABSENT", "NOT KEPT", "HEARTBEAT",
                     "WHY"], cells, out, fit=WIDE_FIT)
    else:
        cells = [[row.node, row.state, _runtime(row.runtime), _pinned(row), row.why or "-"] for row in status.rows]
        print_table(["NODE", "STATE", "RUNTIME", "PINNED", "WHY"], cells, out, fit=FLEET_FIT)
    after = f" after {report.waited:.0f} s" if report.waited is not None else ""
    if status.all_applied:
        every = "the one node" if len(status.rows) == 1 else f"all {len(status.rows)} nodes"
        warn(f"fleet status: {every} applied revision {status.revision}{after}")
    else:
        left = len(status.rows) - status.applied
        gave_up = f"; gave up{after}" if report.timed_out else ""
        warn(f"fleet status: {status.applied} of {len(status.rows)} nodes applied revision {status.revision}, "
             f"{left} not{gave_up}")


def node_dict(row: NodeRow) -> dict[str, Any]:
    counts = row.counts
    return {
        "node": row.node, "runtime": row.runtime, "state": row.state, "applied": row.applied,
        "revision": row.revision or None, "why": row.why or None,
        "heartbeat_age_seconds": round(row.heartbeat_age, 1) if row.heartbeat_age is not None else None,
        "images": None if counts is None else {"wanted": counts.wanted, "pinned": counts.pinned,
                                               "absent": counts.absent, "not_kept": counts.not_kept},
    }


@contextlib.contextmanager
def fleet_progress(active: bool, stream: Optional[TextIO] = None) -> Iterator[Callable[[FleetStatus, float], None]]:
    """fleet status --wait's status line: how many nodes applied, and the first waited for."""
    with waiting_line("fleet status: asking the API server", active, stream) as say:
        yield lambda status, left: say(progress_line(status, left))


def _counts(row: NodeRow) -> list[str]:
    counts = row.counts
    if counts is None:
        return ["-"] * 4
    return [str(counts.wanted), str(counts.pinned), str(counts.absent), str(counts.not_kept)]


def _pinned(row: NodeRow) -> str:
    """pinned of wanted, absent ones aside: 5/6 means one image the node should keep is not kept."""
    counts = row.counts
    if counts is None:
        return "-"
    return f"{counts.pinned}/{counts.wanted - counts.absent}"


def _runtime(version: str) -> str:
    """containerd://1.7.24 as containerd 1.7.24: the column is read, not parsed."""
    name, sep, number = version.partition("://")
    return f"{name} {number}" if sep else (version or "-")


def _age(row: NodeRow) -> str:
    age = row.heartbeat_age
    if age is None:
        return "-"
    return f"{age:.0f}s" if age < 120 else f"{age / 60:.0f}m" if age < 7200 else f"{age / 3600:.0f}h"

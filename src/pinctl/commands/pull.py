"""pinctl pull: references pulled through the runtime that will use them, within the disk budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from pinctl.commands import OpenRuntime
from pinctl.errors import UsageError

if TYPE_CHECKING:
    from pinctl.node.sources import Node
    from pinctl.pull.run import PullItem, PullReport, PullRequest


@dataclass(frozen=True)
class PullCallbacks:
    """What pull says while it works: a line of progress for a reference, and each item done."""

    progress: Callable[[str, str], None]
    finished: Callable[[PullItem], None]


def pull(node: Node, open_runtime: OpenRuntime, request: PullRequest, callbacks: PullCallbacks) -> PullReport:
    """Every reference parsed first (a malformed one pulls nothing), then pulled through the
    runtime that will use it, within the disk budget, each pinned right after its pull."""
    from pinctl import refs as references
    from pinctl.pins.patterns import is_pattern

    wanted: list[str] = []
    for arg in request.refs:
        if is_pattern(arg) or arg.startswith("sha256:"):
            raise UsageError(f"cannot pull {arg}: only a reference names what to pull",
                             "give registry.example/team/app:1.0 or NAME@sha256:<digest>")
        wanted.append(references.normalize(arg))
    return pull_refs(node, open_runtime, request, list(dict.fromkeys(wanted)), callbacks)


def pull_refs(node: Node, open_runtime: OpenRuntime, request: PullRequest, wanted: Sequence[str],
               callbacks: PullCallbacks) -> PullReport:
    """The references, already parsed, pulled (and pinned when asked) one by one; sync --pull
    calls it too, with the policy's exact names."""
    from pinctl.backends import registry
    from pinctl.backends.registry_auth import load_auths
    from pinctl.pull import run as pulling
    from pinctl.pull.targets import NodeLabels, choose_target

    auths = load_auths(request.registry_config) if request.registry_config else {}
    target = choose_target(node, request.namespaces, open_runtime)
    if not wanted:
        return pulling.PullReport(target.name, [], request.max_usage)
    run = pulling.PullRun(target, NodeLabels(node), request, pulling.Budget(target, request.max_usage), auths,
                          registry.compressed_size, callbacks.progress)
    items, interrupted = pulling.run(run, wanted, callbacks.finished)
    return pulling.PullReport(target.name, items, request.max_usage, interrupted)

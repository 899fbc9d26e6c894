"""pinctl import: image archives brought in through the runtime that will use them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from pinctl.commands import OpenRuntime
from pinctl.errors import UsageError

if TYPE_CHECKING:
    from pinctl.config.loader import Config
    from pinctl.imports.run import ImportItem, ImportReport, ImportRequest
    from pinctl.node.sources import Node


@dataclass(frozen=True)
class ImportCallbacks:
    """What import says while it works: a line of progress for an archive, and each item done."""

    progress: Callable[[str, str], None]
    finished: Callable[[ImportItem], None]


def import_(node: Node, open_runtime: OpenRuntime, cfg: Config, request: ImportRequest,
            callbacks: ImportCallbacks) -> ImportReport:
    """Every archive in turn, through the runtime that will use its images (containerd's own
    services for k8s.io, Docker's load for moby), within the disk budget; with request.pin each
    reference is pinned right after its own record is made."""
    from pinctl.imports import run as importing
    from pinctl.imports.targets import choose_import_target
    from pinctl.pull.targets import NodeLabels

    if not request.archives:
        raise UsageError("import needs an archive", "give ARCHIVE... (a docker save or OCI layout tar)")
    request.platform_filter()  # a malformed --platform imports nothing
    settings = cfg.settings
    target = choose_import_target(node, request.namespaces, settings.containerd_address, settings.timeout,
                                  request.timeout, request.snapshotter, settings.containerd_config, open_runtime)
    run = importing.ImportRun(target, NodeLabels(node), request, callbacks.progress, callbacks.finished)
    items, interrupted = importing.run(run, list(dict.fromkeys(request.archives)))
    return importing.ImportReport(target.name, items, request.max_usage, interrupted, run.notes)

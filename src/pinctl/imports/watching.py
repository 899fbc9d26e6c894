"""import_dirs under sync --watch: what the watcher runs at each full sync, and the paths it
polls so that an archive dropped into a directory (or replaced, or removed) is seen within
the poll's bound (service.configfiles: every 2 s, settled before it counts)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from pinctl.errors import PinctlError
from pinctl.imports.dirs import DirsReport, sync_dirs
from pinctl.imports.run import ImportItem, ImportRequest
from pinctl.imports.targets import choose_import_target

if TYPE_CHECKING:
    from pinctl.backends.cri import CriRuntime, RuntimeVersion
    from pinctl.node.sources import Node

# A blob's write, a layer's unpack or Docker's load: as pinctl import's default.
IMPORT_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class DirsSync:
    """The directories' archives imported and pinned as their own, as `sync` does once."""

    directories: tuple[str, ...]
    namespaces: tuple[str, ...]
    address: str
    timeout: float
    containerd_config: Optional[str]
    prune: bool
    max_usage: float
    open_runtime: Callable[[], tuple[CriRuntime, RuntimeVersion]]

    def __call__(self, node: Node) -> DirsReport:
        try:
            target = choose_import_target(node, self.namespaces, self.address, self.timeout, IMPORT_TIMEOUT_S,
                                          None, self.containerd_config, self.open_runtime)
        except PinctlError as err:
            return DirsReport(imports=[ImportItem(d, "", "", "failed", str(err)) for d in self.directories])
        request = ImportRequest((), True, max_usage=self.max_usage, namespaces=self.namespaces)
        return sync_dirs(node, target, request, self.directories, self.prune, False)

    def paths(self) -> list[str]:
        """Each directory and what it holds (names starting with . aside, as the scan skips them):
        a new or removed entry changes its directory, a file rewritten in place itself."""
        found: list[str] = []
        for directory in self.directories:
            found.append(directory)
            try:
                names = sorted(os.listdir(directory))
            except OSError:
                continue
            found += [os.path.join(directory, name) for name in names if not name.startswith(".")]
        return found


def item_fields(item: ImportItem) -> dict[str, str]:
    """An import item as log fields."""
    shown = {"archive": item.archive, "ref": item.ref, "namespace": item.namespace, "pin": item.pin or "",
             "error": item.why or ""}
    return {key: value for key, value in shown.items() if value}


def is_failure(item: ImportItem) -> bool:
    return item.action == "failed" or item.pin == "failed"

"""What every source of images offers the node (Source), and what its methods hand back (Name,
Followed). The bottom of pinctl.node: the list of sources (sources.py) and each kind of source
(crio.py's, docker.py's, sources.py's own) build on it, and it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Protocol

if TYPE_CHECKING:
    from pinctl import refs
    from pinctl.backends import FollowableStore
    from pinctl.pins.listing import Listing
    from pinctl.pins.plans import NamespaceView
    from pinctl.pins.policy import Policy

Name = tuple[Optional[str], str]


class Source(Protocol):
    """One place images come from. Sources are read in list order: Docker's joins the rows of
    the containerd sources before it."""

    description: str

    def add_rows(self, listing: Listing, policy: Policy, runtime_sizes: bool = True) -> None:
        """Add this source's rows (image IDs and pins worked out) to the listing. runtime_sizes:
        SIZE as the runtime tells the kubelet (one more call to it); else as the manifests give it."""

    def add_names(self, names: list[Name]) -> None:
        """Add (namespace, reference) of each row add_rows would add, from image lists alone."""

    def prefetch(self) -> None:
        """Have the engine start on what add_rows will read first, where it can (Node.prefetch)."""

    def views(self) -> list[NamespaceView]:
        """The namespaces whose records can be labelled; none for a source without labels."""

    def refusal(self, selector: refs.Selector) -> Optional[str]:
        """Why an argument naming one of this source's images cannot be pinned; None if it can."""

    def follow(self) -> Optional[Followed]:
        """The event stream sync --watch follows for this source, if it has one."""

    def close(self) -> None:
        """Release connections."""


@dataclass
class Followed:
    """A containerd whose image events the watcher follows, and which namespaces of it count."""

    store: FollowableStore
    watches: Callable[[str], bool]

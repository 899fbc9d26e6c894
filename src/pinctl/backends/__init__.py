"""Engine backends: one module per engine behind the ImageStore protocol.

Modules here import their heavy dependencies (grpc, protobuf, docker) when first used,
so that `pinctl --help` never pays for them.
"""

from __future__ import annotations

from typing import Iterable, Optional, Protocol, Sequence

from pinctl.model import LabelChange, ResolvedTarget, StoredImage, WriteOutcome


class ImageStore(Protocol):
    """What the service layer needs from an engine that keeps labelled image records."""

    address: str

    def version(self) -> str:
        """The engine's version, as it reports it."""

    def namespaces(self) -> list[str]:
        """Every namespace the engine has."""

    def list_images(self, namespace: str) -> list[StoredImage]:
        """Every image record in a namespace."""

    def resolve_targets(self, namespace: str, targets: Iterable[str]) -> dict[str, ResolvedTarget]:
        """Image ID and size for each target digest, read from the manifests."""

    def set_labels(self, namespace: str, changes: Sequence[tuple[StoredImage, LabelChange]]) -> list[WriteOutcome]:
        """Set (value) or remove (None) the named labels on many images, touching no other label.

        Each change applies only to the record as planned (pinctl.writes): one outcome per change.
        """

    def sandbox_image(self) -> Optional[str]:
        """The image the runtime keeps for pod sandboxes, when its config can be read."""

"""Engine backends: one module per engine, behind the protocols below.

Modules here import their heavy dependencies (grpc, protobuf, docker) when first used,
so that `pinctl --help` never pays for them.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Callable, Iterable, Iterator, Optional, Protocol, Sequence

from pinctl.model import LabelChange, ResolvedTarget, StoredImage, WriteOutcome

# (namespace, topic, image name, labels) of one image event.
ImageEvent = tuple[str, str, str, dict[str, str]]


class ImageRecords(Protocol):
    """Reading an engine that keeps image records in namespaces."""

    address: str

    def version(self) -> str:
        """The engine's version, as it reports it."""

    def namespaces(self) -> list[str]:
        """Every namespace the engine has."""

    def require_namespaces(self, wanted: Sequence[str]) -> None:
        """Raise UnknownNamespace for the first of wanted that does not exist."""

    def list_images(self, namespace: str) -> list[StoredImage]:
        """Every image record in a namespace."""

    def prefetch_images(self, namespace: str) -> None:
        """Have the engine start on list_images(namespace) now; the next such call takes that answer."""

    def list_names(self, namespace: str) -> list[str]:
        """The name of every image record in a namespace, and nothing else of them."""

    def get_images(self, namespace: str, names: Sequence[str]) -> list[StoredImage]:
        """The named records as they are now; those gone are left out."""

    def resolve_targets(self, namespace: str, targets: Iterable[str], again: bool = False
                        ) -> dict[str, ResolvedTarget]:
        """Image ID and size for each target digest, from the manifests (read again: again)."""

    def config_labels(self, namespace: str, config_digests: Iterable[str]) -> dict[str, dict[str, str]]:
        """The labels in each image config (what `docker inspect` shows as Config.Labels)."""

    def content_times(self, namespace: str, digests: Iterable[str]) -> dict[str, float]:
        """When each blob (an image's config: its ID) arrived in the namespace, in seconds since
        the epoch; blobs not held are left out."""

    def sandbox_image(self) -> Optional[str]:
        """The image the runtime keeps for pod sandboxes, when its config can be read."""

    def close(self) -> None:
        """Release the connection; the next call opens a new one."""


class LabelWriter(Protocol):
    def set_labels(self, namespace: str, changes: Sequence[tuple[StoredImage, LabelChange]]) -> list[WriteOutcome]:
        """Set (value) or remove (None) the named labels on many images, touching no other label.

        Each change applies only to the record as planned (pinctl.backends.guard): one outcome per change.
        A SIGINT meanwhile (sigint_deferred) ends it early: what was sent is finished and reported,
        the rest is reported not tried (WriteOutcome.interrupted).
        """


# The flag of the SIGINT deferral in force in the main thread, if any (see sigint_deferred).
_deferring: list[list[int]] = []


@contextlib.contextmanager
def sigint_deferred() -> Iterator[Callable[[], bool]]:
    """SIGINT (Ctrl-C) as a request while label writes are in flight: ``requested()`` says
    whether one came. Writers ask between steps, send nothing more once it has, and finish what
    they sent: a KeyboardInterrupt raised between a write leaving and its answer being checked
    would leave a write that may have landed (or landed on a re-pointed record) unreported.
    Nested uses share the outermost one's flag. Only the main thread gets SIGINT, and only
    where it would raise KeyboardInterrupt: a service's own handler (sync --watch) is left
    alone, and there nothing is deferred."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    if _deferring:
        outer = _deferring[-1]
        yield lambda: bool(outer)
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield lambda: False
        return
    came: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: came.append(signum))
    _deferring.append(came)
    try:
        yield lambda: bool(came)
    finally:
        _deferring.pop()
        signal.signal(signal.SIGINT, previous)


class ImageEventStream(Protocol):
    def cancel(self) -> None:
        """End the stream; iteration then stops."""

    def __iter__(self) -> Iterator[ImageEvent]:
        """Events until cancelled; a lost engine raises EngineError."""


class EventSource(Protocol):
    def subscribe_images(self) -> ImageEventStream:
        """A live stream of image record changes in every namespace."""


class ImageStore(ImageRecords, LabelWriter, Protocol):
    """Records that can be read and labelled: what pin, unpin, sync and ls need."""


class FollowableStore(ImageStore, EventSource, Protocol):
    """A store whose changes can be followed as they happen: what sync --watch needs."""

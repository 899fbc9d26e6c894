"""An in-memory ImageStore for the pure logic of the service layer (no engine behaviour here)."""

from __future__ import annotations

from typing import Iterable, Iterator, Optional, Sequence

from pinctl.backends import guard as writes
from pinctl.errors import UnknownNamespace
from pinctl.model import ConfigPin, Descriptor, ResolvedTarget, StoredImage, WriteOutcome

MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def digest(seed: str) -> str:
    return "sha256:" + (seed * 64)[:64]


class FakeStore:
    address = "/fake.sock"

    def __init__(self, sandbox: Optional[str] = None, pins: Sequence[ConfigPin] = ()) -> None:
        self.records: dict[str, dict[str, StoredImage]] = {}
        # containerd 2.x's own pinned_images, as ContainerdStore reads them from its config.
        self.pins = list(pins)
        self.ids: dict[str, str] = {}
        self.writes: list[tuple[str, str, Optional[str]]] = []
        self.fail_names: set[str] = set()
        self._sandbox = sandbox
        self.runtime_version = "1.7.24"
        self.closed = 0
        # Namespaces whose listing a caller asked to start early (prefetch_images), in order.
        self.prefetched: list[str] = []

    def add(self, namespace: str, name: str, image_seed: str, labels: Optional[dict[str, str]] = None) -> None:
        target = Descriptor(MANIFEST, digest("m" + image_seed), 500)
        self.ids[target.digest] = digest(image_seed)
        self.records.setdefault(namespace, {})[name] = StoredImage(name, dict(labels or {}), target)

    def version(self) -> str:
        return self.runtime_version

    def namespaces(self) -> list[str]:
        return sorted(self.records)

    def require_namespaces(self, wanted: Sequence[str]) -> None:
        for ns in wanted:
            if ns not in self.records:
                raise UnknownNamespace(f"namespace {ns} does not exist")

    def list_images(self, namespace: str) -> list[StoredImage]:
        return list(self.records.get(namespace, {}).values())

    def prefetch_images(self, namespace: str) -> None:
        self.prefetched.append(namespace)

    def list_names(self, namespace: str) -> list[str]:
        return [image.name for image in self.list_images(namespace)]

    def get_images(self, namespace: str, names: Sequence[str]) -> list[StoredImage]:
        found = self.records.get(namespace, {})
        return [found[name] for name in names if name in found]

    def config_labels(self, namespace: str, config_digests: Iterable[str]) -> dict[str, dict[str, str]]:
        return {digest: {} for digest in config_digests}

    def content_times(self, namespace: str, digests: Iterable[str]) -> dict[str, float]:
        return {}

    def subscribe_images(self) -> NoEvents:
        return NoEvents()

    def close(self) -> None:
        self.closed += 1

    def resolve_targets(self, namespace: str, targets: Iterable[str], again: bool = False
                        ) -> dict[str, ResolvedTarget]:
        return {t: ResolvedTarget(self.ids[t], 1234) for t in targets}

    def set_labels(self, namespace: str, changes: Sequence[tuple[StoredImage, dict[str, Optional[str]]]]) -> list[WriteOutcome]:
        outcomes: list[WriteOutcome] = []
        for image, change in changes:
            if image.name in self.fail_names:
                outcomes.append(writes.failed("refused"))
                continue
            verdict = writes.precheck(image, self.records[namespace].get(image.name), change)
            if verdict is not None:
                outcomes.append(verdict)
                continue
            labels = dict(self.records[namespace][image.name].labels)
            for key, value in change.items():
                labels.pop(key, None)
                if value is not None:
                    labels[key] = value
            self.records[namespace][image.name] = StoredImage(image.name, labels, image.target)
            self.writes.append((namespace, image.name, change.get("io.cri-containerd.pinned")))
            outcomes.append(writes.WRITTEN)
        return outcomes

    def sandbox_image(self) -> Optional[str]:
        return self._sandbox

    def config_pins(self) -> list[ConfigPin]:
        return list(self.pins)


class NoEvents:
    """An event stream with nothing in it (the watcher is tested against real containerd)."""

    def cancel(self) -> None:
        pass

    def __iter__(self) -> Iterator[tuple[str, str, str, dict[str, str]]]:
        return iter(())

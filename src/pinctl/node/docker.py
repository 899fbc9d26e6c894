"""Docker as a source of images: its own view joined with its containerd namespace, config
labels that pin (cri-dockerd --pinned-image-labels), and why the classic store cannot be labelled."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Optional, Sequence

from pinctl import refs
from pinctl.errors import UsageError
from pinctl.model import REASON_DOCKER_LABEL, REASON_SANDBOX, SOURCE_DOCKER, Descriptor, ImageRow, Reason
from pinctl.pins.listing import annotate_policy
from pinctl.pins.policy import Policy

if TYPE_CHECKING:
    from pinctl.backends.docker import DockerEngine, DockerImage, ImageStoreKind

CLASSIC_STORE_HELP = (
    "a Docker image in the classic store ({driver}), which cannot label an image after it is built; "
    "instead enable Docker's containerd image store, bake a LABEL into the image and list it in "
    "docker_pinned_image_labels, or pin by pattern with a runtime that honours patterns (pinctl config export)"
)


class DockerView:
    """One Docker daemon: which store it uses, and (only when asked) its image list.

    With the containerd image store, the records of its containerd namespace already hold
    every image, so the image list, slow there, is fetched only when those records are not read.
    """

    def __init__(self, engine: DockerEngine, store: ImageStoreKind, namespace: str,
                 images: Optional[list[DockerImage]] = None) -> None:
        self.engine = engine
        self.store = store
        self.namespace = namespace
        self._images = images
        self._listing: Optional[threading.Thread] = None
        self._listed: list[object] = []  # the listing thread's answer or error
        self._names: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[str]] = {}

    @classmethod
    def read(cls, engine: DockerEngine, namespace: str) -> DockerView:
        return cls(engine, engine.image_store(), namespace)

    def prefetch_images(self) -> None:
        """Ask for the image list now, on a thread of its own: dockerd lists while pinctl goes on,
        and `images` takes the answer (or raises its error)."""
        if self._images is not None or self._listing is not None:
            return

        def listing() -> None:
            try:
                self._listed.append(self.engine.list_images())
            except Exception as err:  # noqa: BLE001 - handed to the thread that reads images
                self._listed.append(err)

        # A daemon thread: a command that ends early does not wait for dockerd's answer.
        self._listing = threading.Thread(target=listing, name="docker-images", daemon=True)
        self._listing.start()

    @property
    def images(self) -> list[DockerImage]:
        if self._images is None and self._listing is not None:
            self._listing.join()
            self._listing = None
            answer = self._listed.pop()
            if isinstance(answer, Exception):
                raise answer
            self._images = answer  # type: ignore[assignment]
        if self._images is None:
            self._images = self.engine.list_images()
        return self._images

    def forget(self) -> None:
        """Drop the image list read so far: the next use lists Docker's images again (a service
        reading the same node again and again), and the names worked out from it, which would
        otherwise keep every image that ever was."""
        self._images = None
        self._names.clear()

    def names_of(self, image: DockerImage) -> list[str]:
        """Every reference of an image, tags then digests, fully qualified; its ID when it has none."""
        key = (image.image_id, image.repo_tags, image.repo_digests)
        names = self._names.get(key)
        if names is None:
            names = self._names[key] = [_full(name) for name in (*image.repo_tags, *image.repo_digests)] or [image.image_id]
        return names

    def classic_refusal(self, selector: refs.Selector) -> Optional[str]:
        """Why an argument naming an image in the classic store cannot be pinned; None otherwise."""
        if self.store.containerd:
            return None
        for image in self.images:
            named = selector.ref in self.names_of(image) or selector.text in image.repo_tags
            by_id = selector.id_prefix is not None and image.image_id.split(":")[-1].startswith(selector.id_prefix)
            if named or by_id:
                return CLASSIC_STORE_HELP.format(driver=self.store.driver or "graph driver")
        return None


def _full(name: str) -> str:
    try:
        return refs.normalize(name)
    except UsageError:
        return name


def parse_label_rules(rules: Sequence[str]) -> list[tuple[str, Optional[str]]]:
    return [(key, value if sep else None) for key, sep, value in (rule.partition("=") for rule in rules)]


def label_reasons(config_labels: dict[str, str], rules: Sequence[tuple[str, Optional[str]]]) -> list[Reason]:
    """The rules an image's config labels satisfy, as cri-dockerd's --pinned-image-labels reads them."""
    return [
        Reason(REASON_DOCKER_LABEL, key if value is None else f"{key}={value}")
        for key, value in rules
        if key in config_labels and (value is None or config_labels[key] == value)
    ]


def adopt(rows: list[ImageRow], namespace: str, config_labels: dict[str, dict[str, str]],
          label_rules: Sequence[str]) -> None:
    """Mark the records of Docker's containerd namespace as Docker's images, with their config labels."""
    rules = parse_label_rules(label_rules)
    for row in rows:
        if row.namespace == namespace:
            _mark(row, config_labels.get(row.image_id or "", {}), rules)


def join(rows: list[ImageRow], view: DockerView, label_rules: Sequence[str], policy: Policy) -> list[ImageRow]:
    """Docker's images become rows once: rows of its containerd namespace are marked as Docker's,
    and images not seen there (the classic store, or that namespace not listed) get rows of their own."""
    rules = parse_label_rules(label_rules)
    by_name = {name: image for image in view.images for name in view.names_of(image)}
    seen: set[str] = set()
    for row in rows:
        image = by_name.get(row.ref) if row.namespace == view.namespace else None
        if image is not None:
            seen.add(image.image_id)
            _mark(row, image.labels, rules)
    extra = [row for image in view.images if image.image_id not in seen for row in _rows_of(view, image, rules)]
    annotate_policy(extra, policy)
    return sorted(rows + extra, key=lambda r: (r.namespace or "", r.ref))


def mark_sandbox(rows: list[ImageRow], sandbox_image: str) -> None:
    """cri-dockerd pins its sandbox image (--pod-infra-container-image) itself: every image one of
    whose Docker names (RepoTags, as docker images writes them) equals the flag as written, so
    docker.io/library/pause:3.9 there names no image (Docker calls it pause:3.9)."""
    images = {(row.namespace, row.engine_id) for row in rows
              if row.source == SOURCE_DOCKER and refs.familiar(row.ref) == sandbox_image}
    for row in rows:
        if row.source == SOURCE_DOCKER and (row.namespace, row.engine_id) in images:
            row.reasons.append(Reason(REASON_SANDBOX, f"{sandbox_image} (cri-dockerd --pod-infra-container-image)"))
            row.pinned = True


def _mark(row: ImageRow, config_labels: dict[str, str], rules: Sequence[tuple[str, Optional[str]]]) -> None:
    row.source = SOURCE_DOCKER
    row.config_labels = dict(config_labels)
    found = label_reasons(config_labels, rules)
    row.reasons.extend(found)
    row.pinned = row.pinned or bool(found)


def _rows_of(view: DockerView, image: DockerImage, rules: Sequence[tuple[str, Optional[str]]]) -> list[ImageRow]:
    digest = image.repo_digests[0].partition("@")[2] if image.repo_digests else image.image_id
    namespace = view.namespace if view.store.containerd else None
    rows = []
    for name in view.names_of(image):
        row = ImageRow(namespace, name, image.image_id, Descriptor("", digest, 0), image.size, {})
        _mark(row, image.labels, rules)
        rows.append(row)
    return rows


def rows_without_records(view: DockerView, listed: set[str]) -> list[tuple[Optional[str], str]]:
    """(namespace, reference) of the Docker images `join` would add rows for, by name only."""
    if view.store.containerd and listed:
        return []
    namespace = view.namespace if view.store.containerd else None
    found: list[tuple[Optional[str], str]] = []
    for image in view.images:
        found += [(namespace, name) for name in view.names_of(image) if name not in listed]
    return found

"""When each image arrived in CRI-O's image store, read from containers/storage's own records.

The kubelet dates an image by the detection pass that first saw its ID, so what pinctl needs is
when the image came to this node. CRI-O's CRI gives no time at all, and the image record's
``created`` in ``<driver>-images/images.json`` is the image config's build date, not the pull.
Its files are rewritten whenever another name is pulled for it. What does keep the arrival is
the ``created`` time of the image's top layer in ``<driver>-layers/layers.json``. The store
writes it when it stores that layer, and a new name, a pin (CRI-O pins by name in its
configuration) or a reload leaves it alone. An image whose layers all came with an earlier
image (the same layers under a new config) is dated by that earlier one. Read from
containers/storage v1.59 as vendored by CRI-O v1.34.0 (``images.go``, ``layers.go``).

The files are the runtime's, so they are validated, not trusted: an unreadable, oversized or
malformed store yields no dates, and the plan then says it has none.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, NamedTuple, Optional

IMAGES_SUFFIX = "-images"
# A node with 10,000 images writes about 10 MiB of images.json; far larger is not a store.
MAX_RECORDS_BYTES = 256 * 1024 * 1024
_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)\Z")


def arrival_times(image_store: str) -> dict[str, datetime]:
    """Image ID -> when its top layer was stored, for the image store at ``image_store`` (the
    mount point CRI-O's ImageFsInfo names, ``<graphroot>/<driver>-images``); {} when that is
    not a containers/storage image store pinctl can read."""
    store = os.path.normpath(image_store)
    name = os.path.basename(store)
    if not name.endswith(IMAGES_SUFFIX) or len(name) == len(IMAGES_SUFFIX):
        return {}
    driver = name[: -len(IMAGES_SUFFIX)]
    images = _records(os.path.join(store, "images.json"))
    layers = _records(os.path.join(os.path.dirname(store), f"{driver}-layers", "layers.json"))
    stored = {layer["id"]: when for layer in layers
              if isinstance(layer.get("id"), str) and (when := parse_time(layer.get("created"))) is not None}
    return {image["id"]: stored[image["layer"]] for image in images
            if isinstance(image.get("id"), str) and isinstance(image.get("layer"), str) and image["layer"] in stored}


class StorageContainer(NamedTuple):
    """A container containers/storage holds: CRI-O's own (its containers, its pods' infra
    containers) or another program's sharing the store (podman, buildah)."""

    id: str
    image_id: str
    name: str


def storage_containers(image_store: str) -> Optional[list[StorageContainer]]:
    """Every container of the store whose image store is at ``image_store``, read from
    ``<driver>-containers/containers.json`` and ``volatile-containers.json`` beside it
    (containers/storage v1.58, ``containers.go``). The store refuses to delete an image any of
    them was made from (``DeleteImage``: ErrImageUsedByContainer). None when the store cannot be
    read; a transient store keeps its containers under the run root, which is not read."""
    store = os.path.normpath(image_store)
    name = os.path.basename(store)
    if not name.endswith(IMAGES_SUFFIX) or len(name) == len(IMAGES_SUFFIX):
        return None
    directory = os.path.join(os.path.dirname(store), f"{name[: -len(IMAGES_SUFFIX)]}-containers")
    if not os.path.isdir(directory):
        return None
    found = []
    for file_name in ("containers.json", "volatile-containers.json"):
        for entry in _records(os.path.join(directory, file_name)):
            container_id, image_id, names = entry.get("id"), entry.get("image"), entry.get("names")
            if isinstance(container_id, str) and isinstance(image_id, str) and image_id:
                first = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else ""
                found.append(StorageContainer(container_id, image_id, first))
    return found


def _records(path: str) -> list[Mapping[str, Any]]:
    """The JSON list of objects at ``path``; [] when it is missing, too large or not that."""
    try:
        if os.path.getsize(path) > MAX_RECORDS_BYTES:
            return []
        with open(path, "rb") as handle:
            loaded = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return []
    if not isinstance(loaded, list):
        return []
    return [entry for entry in loaded if isinstance(entry, dict)]


def parse_time(value: object) -> Optional[datetime]:
    """An RFC 3339 time as Go writes it (nanoseconds, ``Z`` or an offset), in UTC; None otherwise."""
    if not isinstance(value, str):
        return None
    found = _TIME.match(value)
    if found is None:
        return None
    whole, fraction, zone = found.groups()
    micro = (fraction or "0").ljust(6, "0")[:6]
    try:
        parsed = datetime.fromisoformat(f"{whole}.{micro}{'+00:00' if zone == 'Z' else zone}")
    except ValueError:
        return None
    return parsed.astimezone(timezone.utc)

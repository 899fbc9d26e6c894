"""Reading OCI and Docker manifests: which config is the image ID and how big the image is."""

from __future__ import annotations

import json
import platform
from typing import Any, Optional

INDEX_TYPES = frozenset(
    {
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    }
)

_MACHINE_TO_GOARCH = {
    "x86_64": ("amd64", ""),
    "amd64": ("amd64", ""),
    "aarch64": ("arm64", "v8"),
    "arm64": ("arm64", "v8"),
    "armv7l": ("arm", "v7"),
    "armv6l": ("arm", "v6"),
    "ppc64le": ("ppc64le", ""),
    "s390x": ("s390x", ""),
    "riscv64": ("riscv64", ""),
}


def host_platform() -> tuple[str, str, str]:
    """(os, architecture, variant) as OCI spells them for this machine."""
    arch, variant = _MACHINE_TO_GOARCH.get(platform.machine().lower(), (platform.machine(), ""))
    return ("linux", arch, variant)


def parse(blob: bytes) -> dict[str, Any]:
    document = json.loads(blob)
    if not isinstance(document, dict):
        raise ValueError("manifest is not a JSON object")
    return document


def is_index(document: dict[str, Any]) -> bool:
    return document.get("mediaType") in INDEX_TYPES or "manifests" in document


def pick_manifest(index: dict[str, Any], want: Optional[tuple[str, str, str]] = None) -> Optional[dict[str, Any]]:
    """The index entry a runtime on this host would run, as containerd's default matcher picks it."""
    os_name, arch, variant = want or host_platform()
    best: Optional[dict[str, Any]] = None
    for entry in index.get("manifests") or []:
        plat = entry.get("platform") or {}
        if plat.get("os") != os_name or plat.get("architecture") != arch:
            continue
        entry_variant = plat.get("variant", "")
        if entry_variant == variant:
            return dict(entry)
        if best is None and (not entry_variant or not variant):
            best = dict(entry)
    return best


def config_and_size(manifest: dict[str, Any]) -> tuple[Optional[str], int]:
    """Config digest (the image ID) and config plus layer bytes of an image manifest."""
    config = manifest.get("config") or {}
    layers = manifest.get("layers") or []
    size = int(config.get("size", 0)) + sum(int(layer.get("size", 0)) for layer in layers)
    return config.get("digest"), size


def config_labels(config: dict[str, Any]) -> dict[str, str]:
    labels = (config.get("config") or {}).get("Labels") or {}
    return {str(k): str(v) for k, v in labels.items()}

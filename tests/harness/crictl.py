"""crictl (cri-tools, built by ``gobuild``) against one CRI endpoint, its output parsed.

The kubelet's own client library and view of the CRI: what crictl shows is what an operator
on a node sees. Every call names the endpoint for both services and a private, empty config
file, so neither ``/etc/crictl.yaml`` nor ``CONTAINER_RUNTIME_ENDPOINT`` and friends are read,
and crictl never probes its list of default sockets.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
from typing import Any

CALL_TIMEOUT_S = 60.0
# crictl's connect timeout; its default (2 s) is short on a loaded two-core machine.
CONNECT_TIMEOUT = "10s"
_DROPPED_ENV = ("CONTAINER_RUNTIME_ENDPOINT", "IMAGE_SERVICE_ENDPOINT", "CRI_CONFIG_FILE")


class CrictlError(RuntimeError):
    """crictl failed or printed something unreadable."""


@dataclasses.dataclass(frozen=True)
class CrictlImage:
    """One entry of ``crictl images -o json`` (``runtime.v1.Image`` as crictl prints it)."""

    id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    size: int
    pinned: bool
    raw: dict[str, Any]


class Crictl:
    """crictl bound to one endpoint (a unix socket path, or ``unix://...``)."""

    def __init__(self, binary: pathlib.Path, endpoint: str, config_dir: pathlib.Path) -> None:
        self.binary = pathlib.Path(binary)
        self.endpoint = endpoint if "://" in endpoint else f"unix://{endpoint}"
        config_dir.mkdir(parents=True, exist_ok=True)
        self.config_path = config_dir / "crictl.yaml"
        if not self.config_path.exists():
            self.config_path.write_text("")

    def argv(self, *args: str) -> list[str]:
        return [
            str(self.binary),
            "--config", str(self.config_path),
            "--runtime-endpoint", self.endpoint,
            "--image-endpoint", self.endpoint,
            "--timeout", CONNECT_TIMEOUT,
            *args,
        ]

    def run(self, *args: str, check: bool = True, timeout: float = CALL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        env = {key: value for key, value in os.environ.items() if key not in _DROPPED_ENV}
        try:
            proc = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout, env=env, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CrictlError(f"crictl {' '.join(args)}: {exc}") from exc
        if check and proc.returncode != 0:
            raise CrictlError(f"crictl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        return proc

    def json(self, command: str, *args: str) -> Any:
        """``crictl <command> -o json <args>``, parsed (its options go before arguments)."""
        args = (command, "-o", "json", *args)
        out = self.run(*args).stdout
        try:
            return json.loads(out)
        except ValueError as exc:
            raise CrictlError(f"crictl {' '.join(args)} printed no JSON: {out[:500]!r}") from exc

    def version(self) -> dict[str, str]:
        """``crictl version`` (it has no ``-o json``): ``{"RuntimeName": "docker", ...}``."""
        fields: dict[str, str] = {}
        for line in self.run("version").stdout.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        return fields

    def images(self) -> list[CrictlImage]:
        """``crictl images -o json``: every image the runtime lists, with ``pinned``."""
        return [_image(entry) for entry in self.json("images").get("images") or []]

    def image_status(self, ref: str) -> dict[str, Any]:
        """``crictl inspecti -o json REF``: ``{"status": {...}, "info": {...}}``."""
        data: dict[str, Any] = self.json("inspecti", ref)
        return data

    def info(self) -> dict[str, Any]:
        """``crictl info -o json``: the runtime's status conditions and config."""
        data: dict[str, Any] = self.json("info")
        return data


def _image(entry: dict[str, Any]) -> CrictlImage:
    return CrictlImage(
        id=str(entry.get("id", "")),
        repo_tags=tuple(entry.get("repoTags") or ()),
        repo_digests=tuple(entry.get("repoDigests") or ()),
        # uint64 is printed as a JSON string by protojson.
        size=int(entry.get("size") or 0),
        pinned=bool(entry.get("pinned", False)),
        raw=entry,
    )


def by_tag(images: list[CrictlImage]) -> dict[str, CrictlImage]:
    """Index ``images`` by each repo tag."""
    return {tag: image for image in images for tag in image.repo_tags}

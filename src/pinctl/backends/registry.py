"""How large an image is before pulling it: the compressed sizes its manifest lists, asked of the
registry directly (the CRI does not say). Best effort: any failure means "not known".

Only the registry's own address is tried, over HTTPS with the system's CAs, and over plain HTTP
for a loopback registry (as Docker and containerd allow by default); a mirror or CA the runtime
is configured with is not known here, so such images count as of unknown size.
"""

from __future__ import annotations

import base64
import json
import platform
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Optional

from pinctl.backends.registry_auth import RegistryAuth

ACCEPT = ", ".join((
    "application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json",
))
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}
Opener = urllib.request.OpenerDirector
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


def compressed_size(ref: str, auth: Optional[RegistryAuth], timeout: float = 5.0) -> Optional[int]:
    """The sum of the config's and layers' sizes for this machine's platform, or None."""
    host, _, rest = ref.partition("/")
    name, reference = _split(rest)
    loopback = host.rsplit(":", 1)[0] in LOOPBACK if ":" in host else host in LOOPBACK
    # A loopback registry must not be asked through a proxy; others go as the environment says.
    opener = urllib.request.build_opener(*([urllib.request.ProxyHandler({})] if loopback else []))
    for scheme in ("https", "http") if loopback else ("https",):
        try:
            return _size(opener, f"{scheme}://{_api_host(host)}/v2/{name}/manifests/", reference, auth, timeout)
        except (OSError, ValueError, KeyError, TypeError, urllib.error.URLError):
            continue
    return None


def _api_host(host: str) -> str:
    return "registry-1.docker.io" if host == "docker.io" else host


def _split(rest: str) -> tuple[str, str]:
    if "@" in rest:
        name, digest = rest.split("@", 1)
        return name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name, digest
    name, _, tag = rest.rpartition(":")
    return name, tag


def _size(opener: Opener, base: str, reference: str, auth: Optional[RegistryAuth], timeout: float) -> int:
    manifest = _get(opener, base + reference, auth, timeout)
    if "manifests" in manifest:
        manifest = _get(opener, base + _platform_digest(manifest["manifests"]), auth, timeout)
    return int(manifest["config"]["size"]) + sum(int(layer["size"]) for layer in manifest["layers"])


def _platform_digest(entries: list[dict[str, Any]]) -> str:
    arch = ARCHITECTURES.get(platform.machine(), platform.machine())
    for entry in entries:
        wanted = entry.get("platform") or {}
        if wanted.get("os") == "linux" and wanted.get("architecture") == arch:
            return str(entry["digest"])
    raise ValueError("no manifest for this platform")


def _get(opener: Opener, url: str, auth: Optional[RegistryAuth], timeout: float) -> dict[str, Any]:
    headers = {"Accept": ACCEPT}
    try:
        return _read(opener, url, headers, timeout)
    except urllib.error.HTTPError as err:
        if err.code != 401 or auth is None:
            raise
        challenge = err.headers.get("WWW-Authenticate", "")
    basic = base64.b64encode(f"{auth.username}:{auth.password}".encode()).decode()
    if challenge.lower().startswith("bearer"):
        headers["Authorization"] = f"Bearer {_token(opener, challenge, basic, timeout)}"
    else:
        headers["Authorization"] = f"Basic {basic}"
    return _read(opener, url, headers, timeout)


def _token(opener: Opener, challenge: str, basic: str, timeout: float) -> str:
    params = dict(_CHALLENGE.findall(challenge))
    realm = params.pop("realm")
    answer = _read(opener, f"{realm}?{urllib.parse.urlencode(params)}", {"Authorization": f"Basic {basic}"}, timeout)
    return str(answer.get("token") or answer["access_token"])


def _read(opener: Opener, url: str, headers: dict[str, str], timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(url, headers=headers)
    with opener.open(request, timeout=timeout) as reply:
        found = json.loads(reply.read(4 * 1024 * 1024))
    if not isinstance(found, dict):
        raise ValueError("not a manifest")
    return found

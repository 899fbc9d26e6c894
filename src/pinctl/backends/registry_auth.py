"""Registry credentials from Docker's config.json, and keeping them out of every message.

Only the inline `auths` entries are read: credential helpers (credsStore, credHelpers) run
programs, which pinctl does not do on the node's behalf. No engine I/O: one file read.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Optional

from pinctl.config.files import NotRegularFile, read_regular, unreadable
from pinctl.errors import ConfigError, EngineError

# Docker's config names its default registry by this historical URL.
DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "registry-1.docker.io")
# A registry's HTTP status as runtimes quote it: 429 and 5xx are worth another try.
_TRANSIENT_STATUS = re.compile(r"\b(?:429|5\d\d)\b(?: [A-Z][a-z]+| status)|status(?: code)?:? (?:429|5\d\d)\b")
REDACTED = "<redacted>"


class PullError(EngineError):
    """A pull the runtime refused or failed; transient when trying again may succeed."""

    def __init__(self, message: str, hint: str = "", transient: bool = False) -> None:
        super().__init__(message, hint)
        self.transient = transient


class PullCancelled(EngineError):
    """The pull was abandoned because pinctl was interrupted."""

    def __init__(self, ref: str) -> None:
        super().__init__(f"pull of {ref} interrupted")


@dataclass(frozen=True)
class RegistryAuth:
    """Credentials for one registry, as the CRI's AuthConfig carries them."""

    server: str
    username: str = ""
    password: str = ""
    auth: str = ""
    identity_token: str = ""

    def __repr__(self) -> str:  # never the secret, even in a traceback
        return f"RegistryAuth(server={self.server!r}, username={self.username!r})"

    def secrets(self) -> list[str]:
        return [s for s in (self.password, self.auth, self.identity_token) if s]


def is_transient(code_name: str, details: str) -> bool:
    return code_name == "UNAVAILABLE" or bool(_TRANSIENT_STATUS.search(details))


def scrub(text: str, auth: Optional[RegistryAuth]) -> str:
    """text with every secret of auth (and its base64 forms) replaced."""
    if auth is None:
        return text
    for secret in sorted(set(auth.secrets()), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def _key_host(key: str) -> str:
    if key in DOCKER_HUB_KEYS:
        return "docker.io"
    return re.sub(r"^[a-z]+://", "", key).split("/", 1)[0]


def load_auths(path: str) -> dict[str, RegistryAuth]:
    """Each registry host's credentials in a Docker config.json."""

    try:
        raw = read_regular(path)
    except (FileNotFoundError, NotRegularFile, OSError) as err:
        raise unreadable(err, "registry config", path, "fix --registry-config") from None
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        # Not the parser's message: it may quote the file, secrets included.
        raise ConfigError(f"registry config {path} is not valid JSON", "fix the file (Docker's config.json format)") from None
    entries = document.get("auths") if isinstance(document, dict) else None
    if not isinstance(entries, dict):
        raise ConfigError(f"registry config {path} has no \"auths\" mapping", "log in with docker login, or fix the file")
    return {_key_host(str(key)): _entry(str(key), value, path) for key, value in entries.items()
            if isinstance(value, dict)}


def _entry(key: str, value: dict[str, object], path: str) -> RegistryAuth:
    host = _key_host(key)
    username, password = str(value.get("username") or ""), str(value.get("password") or "")
    encoded = str(value.get("auth") or "")
    if encoded and not username:
        try:
            username, _, password = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise ConfigError(f"registry config {path}: the auth of {host} is not base64 of user:password",
                              "log in again with docker login") from None
    return RegistryAuth(host, username, password, encoded, str(value.get("identitytoken") or ""))

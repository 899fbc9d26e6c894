"""Image reference parsing and normalisation, following the distribution reference grammar."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional

from pinctl.errors import UsageError

# Short names mean this registry and, for one-component paths, the library/ repository:
# the same expansion the Docker CLI and the CRI plugin apply before storing a name.
DEFAULT_DOMAIN = "docker.io"
OFFICIAL_PREFIX = "library/"
DEFAULT_TAG = "latest"

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_DOMAIN = re.compile(r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}")
_HEX = re.compile(r"[a-f0-9]{1,64}")
ID_PREFIX_MIN = 4


@dataclass(frozen=True)
class Selector:
    """What a command-line argument asks for: a named reference, or an image ID (prefix)."""

    text: str
    ref: Optional[str] = None
    id_prefix: Optional[str] = None

    def names(self, names: Iterable[str]) -> bool:
        """Whether one of names is what it asks for, as typed or normalised."""
        return any(name in (self.text, self.ref) for name in names)

    def has_id(self, ids: Iterable[str]) -> bool:
        """Whether one of ids (sha256:<hex> or bare) starts with its ID prefix."""
        return self.id_prefix is not None and any(
            value.split(":", 1)[-1].startswith(self.id_prefix) for value in ids if value)


def normalize(name: str) -> str:
    """Fully qualify a reference: `alpine` becomes DEFAULT_DOMAIN/library/alpine:latest."""
    remainder, digest = _split_digest(name, name)
    remainder, tag = _split_tag(remainder)
    domain, path = _split_domain(remainder)
    if not _PATH.fullmatch(path):
        raise UsageError(
            f"malformed image reference {name!r}",
            "repository names are lowercase letters, digits and . _ - separators, like registry.example/team/app:1.0",
        )
    if tag is not None and not _TAG.fullmatch(tag):
        raise UsageError(f"malformed tag in image reference {name!r}", "tags are letters, digits, _ . - (max 128)")
    if digest is None and tag is None:
        tag = DEFAULT_TAG
    return f"{domain}/{path}" + (f":{tag}" if tag is not None else "") + (f"@{digest}" if digest else "")


def _split_digest(remainder: str, original: str) -> tuple[str, Optional[str]]:
    if "@" not in remainder:
        return remainder, None
    remainder, digest = remainder.split("@", 1)
    if not _DIGEST.fullmatch(digest):
        raise UsageError(f"malformed digest in image reference {original!r}", "expected NAME@sha256:<64 hex digits>")
    return remainder, digest


def _split_tag(remainder: str) -> tuple[str, Optional[str]]:
    slash = remainder.rfind("/")
    colon = remainder.rfind(":")
    if colon > slash:
        return remainder[:colon], remainder[colon + 1 :]
    return remainder, None


def _split_domain(remainder: str) -> tuple[str, str]:
    first, sep, rest = remainder.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        if not _DOMAIN.fullmatch(first):
            raise UsageError(f"malformed registry host {first!r}", "expected host[:port]/repository")
        return first, rest
    if not sep:
        return DEFAULT_DOMAIN, OFFICIAL_PREFIX + remainder
    return DEFAULT_DOMAIN, remainder


def familiar(name: str) -> str:
    """A normalised name as Docker writes it in RepoTags and RepoDigests (what cri-dockerd
    compares its --pinned-images with): the default domain and the official prefix left out."""
    official = f"{DEFAULT_DOMAIN}/{OFFICIAL_PREFIX}"
    if name.startswith(official):
        return name[len(official):]
    if name.startswith(f"{DEFAULT_DOMAIN}/"):
        return name[len(DEFAULT_DOMAIN) + 1:]
    return name


def parse_selector(text: str) -> Selector:
    """Read an argument as a reference or an image ID; raise UsageError when it is neither."""
    if not text or text != text.strip():
        raise UsageError(f"malformed image reference {text!r}", "give a name like app:1.0 or an image ID")
    if text.startswith("sha256:"):
        # A table's abbreviated ID (sha256:3ab413910e19…) pasted back names what it was cut from.
        hex_part = text[len("sha256:") :].removesuffix("…").removesuffix("...")
        if not _HEX.fullmatch(hex_part):
            raise UsageError(f"malformed image ID {text!r}", "expected sha256: and up to 64 lowercase hex digits")
        if len(hex_part) < ID_PREFIX_MIN:
            raise UsageError(f"image ID prefix {text!r} is too short",
                             f"give at least {ID_PREFIX_MIN} hex digits, as for a bare ID prefix")
        return Selector(text, ref=f"sha256:{hex_part}" if len(hex_part) == 64 else None, id_prefix=hex_part)
    id_prefix = text if _HEX.fullmatch(text) and len(text) >= ID_PREFIX_MIN else None
    try:
        ref: Optional[str] = normalize(text)
    except UsageError:
        if id_prefix is None:
            raise
        ref = None
    return Selector(text, ref=ref, id_prefix=id_prefix)


def not_found_hint(text: str) -> Optional[str]:
    """What to say when an argument named no image and may have meant an ID prefix too short to
    be read as one (e14: three hex digits are read as the name docker.io/library/e14:latest)."""
    bare = text[len("sha256:"):] if text.startswith("sha256:") else text
    if _HEX.fullmatch(bare) and len(bare) < ID_PREFIX_MIN:
        return f"for an image ID, give {ID_PREFIX_MIN} or more hex digits"
    return None


def short_id(image_id: Optional[str]) -> str:
    if not image_id:
        return "<none>"
    return image_id.split(":", 1)[-1][:12]


def short_digest(digest: str) -> str:
    """sha256: and 12 hex digits: enough to tell images apart in a message."""
    algorithm, _, hex_part = digest.partition(":")
    return f"{algorithm}:{hex_part[:12]}" if hex_part else digest

"""What the CRI plugin makes of the pin label, and what looks like a pin but is not one."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Optional

from pinctl.model import PIN_LABEL, PIN_VALUE

_SQUASH = re.compile(r"[^a-z0-9]")
_SQUASHED_KEY = _SQUASH.sub("", PIN_LABEL)


# containerd's CRI plugin reports pins from these releases on; older ones tell the kubelet
# pinned=false whatever the labels say (seen with Debian's 1.6.20).
FIRST_HONOURING = ((1, 6, 25), (1, 7, 10))
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def cri_honours_pins(containerd_version: str) -> bool:
    """Whether this containerd's CRI plugin turns pin labels into pinned=true; unknown means yes."""
    match = _VERSION.match(containerd_version.strip())
    if not match:
        return True
    version = tuple(int(part) for part in match.groups())
    if version[:2] == (1, 6):
        return version >= FIRST_HONOURING[0]
    return version >= FIRST_HONOURING[1] or version[0] >= 2


def has_pinned_images(containerd_version: str) -> bool:
    """Whether this containerd reads a pinned_images table (2.0 on); unknown means yes."""
    match = _VERSION.match(containerd_version.strip())
    return match is None or int(match.group(1)) >= 2


def ignored_detail(containerd_version: str) -> str:
    return f"containerd {containerd_version} does not report pins to the kubelet; upgrade to 1.6.25+ or 1.7.10+"


def carries_pin(labels: dict[str, str]) -> bool:
    return labels.get(PIN_LABEL) == PIN_VALUE


@lru_cache(maxsize=1024)
def pin_key(key: str) -> bool:
    """Whether a label with this key makes a pin or says something about one (carries_pin,
    ineffective_pins): a record with no such key has neither. Cached, as _looks_like_pin_key."""
    return key == PIN_LABEL or _looks_like_pin_key(key)


def ineffective_pins(labels: dict[str, str]) -> list[str]:
    """Describe each label that an operator likely meant as a pin but the CRI plugin ignores."""
    # Nearly every record has no such label: look at the keys first, build text only for those.
    suspects = [key for key in labels if (labels[key] != PIN_VALUE if key == PIN_LABEL else _looks_like_pin_key(key))]
    if not suspects:
        return []
    return [problem for key in sorted(suspects) if (problem := _ineffective(key, labels[key]))]


def _ineffective(key: str, value: str) -> Optional[str]:
    if key == PIN_LABEL:
        if value == PIN_VALUE:
            return None
        return f"{key}={value}: the value must be '{PIN_VALUE}'"
    if _looks_like_pin_key(key):
        return f"{key}={value}: misspelt key, the CRI reads '{PIN_LABEL}'"
    return None


@lru_cache(maxsize=1024)
def _looks_like_pin_key(key: str) -> bool:
    # Cached: a node has thousands of records but only a handful of distinct label keys.
    lowered = key.lower()
    if _SQUASH.sub("", lowered) == _SQUASHED_KEY:
        return True
    return abs(len(lowered) - len(PIN_LABEL)) <= 3 and _edit_distance(lowered, PIN_LABEL) <= 3


def _edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]

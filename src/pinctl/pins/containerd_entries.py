"""containerd 2.x pinned_images entries that pin nothing: containerd compares an entry's text
with an image record's name exactly (containerd issue 13314), and the CRI names every record in
full (registry, repository, tag or digest). An entry written otherwise matches no record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from pinctl import refs
from pinctl.errors import UsageError
from pinctl.model import ConfigPin


@dataclass(frozen=True)
class DeadEntry:
    """An entry containerd can match to no image: why, and the entry that would work (None when
    it is no image reference at all)."""

    pin: ConfigPin
    reason: str
    fix: Optional[str]

    @property
    def message(self) -> str:
        instead = f"write {self.fix!r} instead" if self.fix else "remove it"
        return f"pinned_images.{self.pin.name} = {self.pin.ref!r} pins nothing: {self.reason}; {instead}"


def dead_entries(pins: Sequence[ConfigPin]) -> list[DeadEntry]:
    """The entries whose text no image record's name can equal, in the given order."""
    found = [_judge(pin) for pin in pins]
    return [entry for entry in found if entry is not None]


def _judge(pin: ConfigPin) -> Optional[DeadEntry]:
    text = pin.ref
    try:
        full = refs.normalize(text)
    except UsageError as err:
        return DeadEntry(pin, f"it is no image reference ({err.message})", None)
    name, _, digest = full.partition("@")
    if digest and ":" in name.rpartition("/")[2]:
        # The CRI keeps a pull by name:tag@digest as name@digest; no record has both.
        return DeadEntry(pin, "no image name carries both a tag and a digest", name.rpartition(":")[0] + "@" + digest)
    if full == text:
        return None
    written = text.partition("@")[0].rpartition("/")[2]
    if not digest and ":" not in written:
        return DeadEntry(pin, "it has no tag, and containerd adds none before comparing", full)
    return DeadEntry(pin, f"containerd compares it as written, and names the image {full}", full)

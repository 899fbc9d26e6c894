"""The disk budget pull and import keep: before each pull or archive, room for DISK_FACTOR times
its size on the image filesystem, counting what pulls or imports in flight were claimed for."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Protocol

from pinctl.display import human_size

if TYPE_CHECKING:
    from pinctl.gc.model import ImageFs

# A pulled image takes its compressed blobs plus the unpacked snapshot: about this many times
# the compressed size for gzip layers (a guess on the safe side).
DISK_FACTOR = 3


class Destination(Protocol):
    """A runtime images land in: its name, the namespace they land in, its image filesystem."""

    name: str
    namespace: str

    def filesystem(self) -> ImageFs:
        """The image filesystem's figures now."""


@dataclass
class Budget:
    """The disk budget shared by parallel pulls (or imports): what those in flight were counted for."""

    target: Destination
    max_usage: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    reserved: int = 0

    def claim(self, size: Optional[int]) -> Optional[str]:
        """Reserve room for a pull; why not when it does not fit."""
        with self.lock:
            fs = self.target.filesystem()
            now = percent_used(fs, self.reserved)
            if size is None:
                if now >= self.max_usage:
                    return (f"no room: the image filesystem is {now:.0f}% used, at or past the budget of "
                            f"{self.max_usage:g}% (the image's size is not known)")
                return None
            need = DISK_FACTOR * size
            after = percent_used(fs, self.reserved + need)
            if after > self.max_usage:
                return (f"no room: {human_size(size)} compressed (about {human_size(need)} on disk) would take "
                        f"the image filesystem from {now:.0f}% to {after:.0f}%, past the budget of "
                        f"{self.max_usage:g}%")
            self.reserved += need
            return None

    def release(self, size: Optional[int]) -> None:
        if size is not None:
            with self.lock:
                self.reserved -= DISK_FACTOR * size


def percent_used(fs: ImageFs, extra: int = 0) -> float:
    """Usage as the disk budget reads it (pull's, and import's, which is the same): a float, not
    the kubelet's rounded-up integer (ImageFs.usage_percent), with extra bytes counted as used;
    100 when the filesystem tells no capacity, so nothing fits."""
    return 100.0 * (fs.capacity_bytes - fs.available + extra) / fs.capacity_bytes if fs.capacity_bytes else 100.0

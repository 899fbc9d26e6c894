"""How the long-running commands (sync --watch, cri-proxy) keep their memory: the cyclic garbage
collector on, and the C allocator asked to hand memory back.

pinctl's main turns the cyclic collector off: a one-shot command builds tens of thousands of
objects (records, rows, reasons) that all live until it exits, and the collector walked them
again each time enough new ones came, for nothing: 0.4-0.9 s of gc plan at 10,000 images (two
records each), 15-25 % of its time. Reference counting still frees everything without a cycle;
a service, which runs for days, turns the collector back on (serve_for_long).

Both read every image record again and again (a full sync, the periodic check, a pin read after
each burst of image events). At 10,000 images one read receives a 7 MiB `Images.List` answer:
gRPC's buffers, the bytes and protobuf's parse of them are large blocks, freed when the read ends.
glibc serves a block above its mmap threshold with mmap and unmaps it when freed, but raises that
threshold (up to 32 MiB) each time it unmaps one, so from the second read on those blocks come
from the heap, where what is freed stays resident: the proxy's RSS grew from 101 to 124 MiB over
ten reads, and its peak from 108 to 146 MiB. A fixed threshold keeps big blocks mmapped (glibc
stops adjusting it once it is set) and a low trim threshold gives a freed heap top back at once:
the same ten reads then end at 102 MiB, with a peak of 132 MiB; receiving and parsing that
answer alone, again and again, then peaks at the same 78 MiB each time instead of growing.
"""

from __future__ import annotations

import ctypes
import gc
from typing import Optional

# mallopt(3) parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's own starting value of the mmap threshold, kept from then on, and the same for trimming.
MMAP_THRESHOLD = 128 * 1024
TRIM_THRESHOLD = 128 * 1024

_applied: Optional[bool] = None


def serve_for_long() -> bool:
    """Set a long-running command's process up: the cyclic collector on (main turned it off),
    and glibc's thresholds fixed (keep_heap_small, whose answer this is)."""
    gc.enable()
    return keep_heap_small()


def keep_heap_small() -> bool:
    """Fix glibc's mmap and trim thresholds, once per process; False where there is no glibc
    (musl, another libc: nothing is changed and nothing fails)."""
    global _applied
    if _applied is None:
        _applied = _set_thresholds()
    return _applied


def _set_thresholds() -> bool:
    try:
        # The symbols already loaded into this process, libc's among them: no library search.
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    # gnu_get_libc_version tells glibc from a libc whose mallopt numbers mean something else.
    if not hasattr(libc, "gnu_get_libc_version"):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt answers 1 when it took the value.
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))

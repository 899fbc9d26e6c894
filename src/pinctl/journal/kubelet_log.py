"""The kubelet's own word that its image GC removed an image, from its log file (setting kubelet_log).

Before each RemoveImage the kubelet's GC logs ``"Removing image to free bytes" imageID="sha256:..."``
(pkg/kubelet/images/image_gc_manager.go, freeImage), in klog's text form or in its JSON form. It
logs nothing when the call succeeded, so the line says the kubelet asked, not that the runtime
obeyed; a deletion of that image ID right after it is the kubelet's.

Only the last TAIL_BYTES of the file are read, and only lines within the window before the
deletion count: a node's log can be gigabytes, and the same image ID removed a day ago and pulled
again since says nothing about today. klog's text header has no year and is in local time (the
kubelet's zone, taken to be this process's).
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Optional

MESSAGE = "Removing image to free bytes"
TAIL_BYTES = 8 * 1024 * 1024
# I1206 14:03:01.123456    1234 image_gc_manager.go:529] "Removing image to free bytes" imageID="sha256:..."
_KLOG = re.compile(r"^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d+)")
_IMAGE_ID = re.compile(r'imageID="([^"]+)"')


def removals(path: str, not_before: float, now: Optional[float] = None) -> dict[str, tuple[float, str]]:
    """Each image ID the kubelet's log (its last TAIL_BYTES) says it removes, logged at or after
    not_before: its latest (time, line). Empty when the file cannot be read."""
    if not path:
        return {}
    try:
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            stream.seek(max(0, size - TAIL_BYTES))
            tail = stream.read(TAIL_BYTES)
    except OSError:
        return {}
    current = now if now is not None else time.time()
    found: dict[str, tuple[float, str]] = {}
    needle = MESSAGE.encode()
    for raw in tail.splitlines():
        if needle not in raw:
            continue
        line = raw.decode("utf-8", "replace").strip()
        logged = _logged_at(line, current)
        image_id = _image_id(line)
        if logged is not None and image_id and logged >= not_before:
            found[image_id] = (logged, line)
    return found


def _image_id(line: str) -> str:
    if line.startswith("{"):
        try:
            return str(json.loads(line).get("imageID", ""))
        except (ValueError, AttributeError):
            return ""
    match = _IMAGE_ID.search(line)
    return match.group(1) if match is not None else ""


def _logged_at(line: str, now: float) -> Optional[float]:
    if line.startswith("{"):
        try:
            stamp = json.loads(line).get("ts")
        except (ValueError, AttributeError):
            return None
        return float(stamp) if isinstance(stamp, (int, float)) else None
    match = _KLOG.match(line)
    if match is None:
        return None
    month, day, hour, minute, second, fraction = match.groups()
    year = time.localtime(now).tm_year
    try:
        # A line from December read in January belongs to the year before.
        for candidate in (year, year - 1):
            moment = time.mktime((candidate, int(month), int(day), int(hour), int(minute), int(second), 0, 0, -1))
            if moment <= now + 86400:
                return moment + float(f"0.{fraction}")
    except (OverflowError, ValueError):
        return None
    return None

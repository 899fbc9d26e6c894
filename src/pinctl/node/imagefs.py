"""The image filesystem's figures as the kubelet reads them: statfs of a path on this node.

gc plan and prune read it to model the kubelet's GC; pull and import read it to keep their
disk budget (pinctl.landing)."""

from __future__ import annotations

import os

from pinctl.errors import EngineError
from pinctl.gc.model import ImageFs


def statfs(path: str, what: str) -> ImageFs:
    try:
        st = os.statvfs(path)
    except OSError as err:
        raise EngineError(f"cannot read the image filesystem at {path} ({what}): {err.strerror}",
                          "run pinctl on the node itself, where that path is mounted") from None
    return ImageFs(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)

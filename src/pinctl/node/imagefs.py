"""The image filesystem's figures as the kubelet reads them: statfs of a path on this node.

gc plan and prune read it to model the kubelet's GC; pull and import read it to keep their
disk budget (pinctl.landing)."""

from __future__ import annotations

import os

from pinctl.errors import EngineError
from pinctl.gc.eviction import FsFigures
from pinctl.gc.model import ImageFs


def statfs(path: str, what: str) -> ImageFs:
    try:
        st = os.statvfs(path)
    except OSError as err:
        raise EngineError(f"cannot read the image filesystem at {path} ({what}): {err.strerror}",
                          "run pinctl on the node itself, where that path is mounted") from None
    return ImageFs(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


def fs_figures(path: str, what: str) -> FsFigures:
    """A filesystem's statfs figures as cadvisor reads them for the eviction manager (bytes,
    inodes) and its device number (the kubelet compares the imagefs's with the root dir's)."""
    try:
        st = os.statvfs(path)
        device = os.stat(path).st_dev
    except OSError as err:
        raise EngineError(f"cannot read the filesystem at {path} ({what}): {err.strerror}",
                          "run pinctl on the node itself, where that path is mounted") from None
    return FsFigures(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize, st.f_files, st.f_ffree, device,
                     f"statfs of {path}, {what}")

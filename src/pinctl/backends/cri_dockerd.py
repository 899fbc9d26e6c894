"""cri-dockerd as a process on this node: its release, its pin flags and its sandbox image.

The CRI's Version call through cri-dockerd names Docker (runtime_name "docker" and dockerd's
version), never cri-dockerd's own release, yet what cri-dockerd can pin depends on that release:
up to 0.4.6 only its sandbox image, from 0.4.7 also --pinned-images and --pinned-image-labels.
So pinctl finds the process serving the runtime's socket (backends.procfs: through a cri-proxy
too), reads its flags from its command line and asks its binary for --version and --help (which
lists the flags that release has).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from pinctl.backends import procfs

NAME = "cri-dockerd"
# The first release with --pinned-images and --pinned-image-labels.
SELECTORS_SINCE = (0, 4, 7)
ASK_TIMEOUT_S = 3.0
# cri-dockerd's own default for --docker-endpoint.
DOCKER_DEFAULT_ENDPOINT = "unix:///var/run/docker.sock"


@dataclass(frozen=True)
class CriDockerd:
    """One cri-dockerd process, as its command line and its binary describe it."""

    pid: int
    version: str = ""  # "0.4.3"; "" when the binary does not say (a build without a release version)
    selectors_known: Optional[bool] = None  # whether this release has the pin flags; None: cannot tell
    sandbox_image: Optional[str] = None  # --pod-infra-container-image, when given
    pinned_images: tuple[str, ...] = ()
    pinned_image_labels: tuple[str, ...] = ()
    flags: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def has_selectors(self) -> Optional[bool]:
        """Whether this cri-dockerd can pin more than its sandbox image; None when unknown."""
        if self.selectors_known is not None:
            return self.selectors_known
        parsed = release(self.version)
        return None if parsed is None else parsed >= SELECTORS_SINCE

    def describe(self) -> str:
        return f"{NAME} {self.version}" if self.version else NAME


def release(version: str) -> Optional[tuple[int, int, int]]:
    found = re.match(r"v?(\d+)\.(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


# -- pure parsing -------------------------------------------------------------------------


def parse_version(text: str) -> str:
    """'cri-dockerd 0.4.3 (abc123)' -> '0.4.3'; '' for a build that names no release ('dev')."""
    found = re.search(r"\bcri-dockerd\s+v?(\d+\.\d+\.\d+\S*)", text)
    return found[1] if found else ""


def help_lists_selectors(text: str) -> Optional[bool]:
    """Whether --help lists --pinned-images; None when the text is no flag list at all."""
    if "--pod-infra-container-image" not in text and "--docker-endpoint" not in text:
        return None
    return "--pinned-images" in text


def split_list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def describe_process(pid: int, argv: Sequence[str], version: str, help_text: str) -> CriDockerd:
    flags = procfs.parse_flags(argv)
    return CriDockerd(pid, version, help_lists_selectors(help_text), flags.get("--pod-infra-container-image") or None,
                      split_list(flags.get("--pinned-images", "")), split_list(flags.get("--pinned-image-labels", "")),
                      flags)


# -- finding the process ------------------------------------------------------------------


def find(endpoint: Optional[str], ask: Optional[Callable[[str, str], str]] = None) -> Optional[CriDockerd]:
    """The cri-dockerd serving endpoint (a unix socket path or unix:// URL), directly or behind
    pinctl cri-proxy; without an endpoint, the one cri-dockerd on this node. None when no
    cri-dockerd can be told (not running, another PID namespace, several and no endpoint)."""
    ask = ask or _ask
    if endpoint:
        pid = procfs.serving(procfs.socket_path(endpoint))
    else:
        found = [pid for pid in procfs.pids() if procfs.program(pid) == NAME]
        pid = found[0] if len(found) == 1 else None
    if pid is None or procfs.program(pid) != NAME:
        return None
    exe = f"{procfs.PROC}/{pid}/exe"
    return describe_process(pid, procfs.cmdline(pid), parse_version(ask(exe, "--version")), ask(exe, "--help"))


def for_docker(host: str) -> Optional[CriDockerd]:
    """The cri-dockerd in front of the Docker at host (its --docker-endpoint), from its command
    line alone (nothing is run): what `ls` needs to name its sandbox image."""
    wanted = os.path.abspath(procfs.socket_path(host))
    for pid in procfs.pids():
        if procfs.program(pid) != NAME:
            continue
        argv = procfs.cmdline(pid)
        endpoint = procfs.parse_flags(argv).get("--docker-endpoint") or DOCKER_DEFAULT_ENDPOINT
        if os.path.abspath(procfs.socket_path(endpoint)) == wanted:
            return describe_process(pid, argv, "", "")
    return None


def _ask(exe: str, flag: str) -> str:
    """What the binary prints for one informational flag; '' when it cannot be run."""
    try:
        done = subprocess.run([exe, flag], capture_output=True, text=True, timeout=ASK_TIMEOUT_S,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (done.stdout or "") + (done.stderr or "")

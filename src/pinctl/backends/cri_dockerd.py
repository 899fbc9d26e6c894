"""cri-dockerd as a process on this node: its version, its pin flags and its sandbox image.

The CRI's Version call through cri-dockerd names Docker (runtime_name "docker" and dockerd's
version), never cri-dockerd's own release, yet what cri-dockerd can pin depends on that release:
up to 0.4.6 only its sandbox image, from 0.4.7 also --pinned-images and --pinned-image-labels.
So pinctl finds the process serving the runtime's socket (through /proc/net/unix and the
processes' open sockets), following a cri-proxy or its relay to the socket they forward to,
reads its flags from /proc/PID/cmdline and asks its binary for --version and --help (which
lists the flags that release has).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Sequence

NAME = "cri-dockerd"
# The first release with --pinned-images and --pinned-image-labels.
SELECTORS_SINCE = (0, 4, 7)
ASK_TIMEOUT_S = 3.0
PROC = "/proc"
# What forwards a socket to another: pinctl cri-proxy (-r / --runtime-endpoint) and its relay (--upstream).
FORWARD_FLAGS = ("--upstream", "--runtime-endpoint", "-r")
MAX_HOPS = 4


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


def parse_flags(argv: Sequence[str]) -> dict[str, str]:
    """--name=value and --name value, as pflag reads them; a repeated flag keeps every value,
    comma-joined (pflag's string slices take both forms)."""
    flags: dict[str, str] = {}
    index = 1
    while index < len(argv):
        arg = argv[index]
        index += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            continue
        name, eq, value = arg.partition("=")
        if not eq:
            if index < len(argv) and not argv[index].startswith("-"):
                value = argv[index]
                index += 1
            else:
                value = "true"
        flags[name] = f"{flags[name]},{value}" if name in flags and value else value
    return flags


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
    flags = parse_flags(argv)
    return CriDockerd(pid, version, help_lists_selectors(help_text), flags.get("--pod-infra-container-image") or None,
                      split_list(flags.get("--pinned-images", "")), split_list(flags.get("--pinned-image-labels", "")),
                      flags)


# -- finding the process ------------------------------------------------------------------


def find(endpoint: Optional[str], ask: Callable[[str, str], str] | None = None) -> Optional[CriDockerd]:
    """The cri-dockerd serving endpoint (a unix socket path or unix:// URL), directly or behind
    pinctl cri-proxy; without an endpoint, the one cri-dockerd on this node. None when no
    cri-dockerd can be told (not running, another PID namespace, several and no endpoint)."""
    ask = ask or _ask
    pid = _server_of(_path(endpoint)) if endpoint else _only_cri_dockerd()
    if pid is None:
        return None
    argv = _cmdline(pid)
    if not argv or os.path.basename(argv[0]) != NAME:
        return None
    exe = f"{PROC}/{pid}/exe"
    return describe_process(pid, argv, parse_version(ask(exe, "--version")), ask(exe, "--help"))


def _path(endpoint: str) -> str:
    return endpoint[len("unix://"):] if endpoint.startswith("unix://") else endpoint


def _server_of(path: str) -> Optional[int]:
    """The process listening on the unix socket at path; through a forwarder, the one it forwards to."""
    for _hop in range(MAX_HOPS):
        pid = _socket_owner(path)
        if pid is None:
            return None
        argv = _cmdline(pid)
        if argv and os.path.basename(argv[0]) == NAME:
            return pid
        upstream = next((value for name, value in parse_flags(argv).items() if name in FORWARD_FLAGS), None)
        if not upstream or _path(upstream) == path:
            return None
        path = _path(upstream)
    return None


def _only_cri_dockerd() -> Optional[int]:
    found = [pid for pid in _pids() if os.path.basename((_cmdline(pid) or [""])[0]) == NAME]
    return found[0] if len(found) == 1 else None


def _socket_owner(path: str) -> Optional[int]:
    inodes = set(_listening_inodes(os.path.abspath(path)))
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid in _pids():
        try:
            fds = os.listdir(f"{PROC}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{PROC}/{pid}/fd/{fd}") in wanted:
                    return pid
            except OSError:
                continue
    return None


def _listening_inodes(path: str) -> Iterator[str]:
    try:
        with open(f"{PROC}/net/unix", encoding="utf-8", errors="replace") as table:
            next(table, None)
            for line in table:
                parts = line.split()
                # Num RefCount Protocol Flags Type St Inode Path; St 01 is listening.
                if len(parts) >= 8 and parts[7] == path and parts[5] == "01":
                    yield parts[6]
    except OSError:
        return


def _pids() -> list[int]:
    try:
        return sorted(int(name) for name in os.listdir(PROC) if name.isdigit())
    except OSError:
        return []


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as found:
            raw = found.read()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _ask(exe: str, flag: str) -> str:
    """What the binary prints for one informational flag; '' when it cannot be run."""
    try:
        done = subprocess.run([exe, flag], capture_output=True, text=True, timeout=ASK_TIMEOUT_S,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (done.stdout or "") + (done.stderr or "")

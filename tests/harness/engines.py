"""Every engine the harness runs, and which version of it: the one table.

Two kinds of entry:

- :class:`DebianEngine`: packages unpacked from a Debian suite through the machine's mirror
  (``tests/harness/debs.py``). ``pin`` is an apt version glob for the first package: a suite
  that moves on (sid will carry containerd 2.2 one day) then fails loudly instead of quietly
  handing out another version under the same name.
- :class:`GoEngine`: a Go module version built with the go command (``tests/harness/gobuild.py``),
  from the Go module proxy. ``unavailable`` says why an engine that is wanted cannot be had
  here at all: the fixtures then skip it with that reason, in CI too, because no harness fix
  can bring it (unlike a fetch or build that fails, which fails CI).

Each lands in its own directory of the engine cache (``debs.cache_root()``), stamped with
what it was made from, so only the first run on a machine pays for it.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Union

BuildMethod = Literal["build", "install"]


@dataclasses.dataclass(frozen=True)
class DebianEngine:
    """Which Debian packages (from which suite) make up one engine."""

    suite: str
    packages: tuple[str, ...]
    # apt's version glob for packages[0] ("" takes the suite's candidate).
    pin: str = ""


@dataclasses.dataclass(frozen=True)
class GoEngine:
    """One binary built from one version of a Go module.

    ``method="build"``: the module is downloaded, copied out of the (read-only) module cache
    and built there, so its go.mod, with its ``replace`` directives, is the main module's
    (``go install pkg@version`` refuses modules with ``replace``). ``method="install"``:
    ``go install <module>/<package>@<version>`` into the engine's directory.
    """

    module: str
    version: str
    binary: str
    # Package directory inside the module ("" for the module root).
    package: str = ""
    method: BuildMethod = "build"
    # "-X" settings, so the binary reports the version it was built from.
    version_vars: tuple[str, ...] = ()
    unavailable: str = ""
    # Build tags (``-tags``).
    tags: tuple[str, ...] = ()
    # Link against the host's C libraries (CGO_ENABLED=1): CRI-O needs libseccomp.
    cgo: bool = False
    # C helpers built with ``make -C <dir>`` in the module copy and installed beside the
    # binary: (make directory, file it builds relative to the module root, name in bin/).
    companions: tuple[tuple[str, str, str], ...] = ()
    # More package directories of the same module, built with the same flags in the same go
    # command and installed beside the binary under their last path element (containerd's ctr
    # and shim), for ``method="install"``.
    extra: tuple[str, ...] = ()

    @property
    def extra_binaries(self) -> tuple[str, ...]:
        return tuple(package.rsplit("/", 1)[-1] for package in self.extra)

    @property
    def import_path(self) -> str:
        return f"{self.module}/{self.package}" if self.package else self.module


EngineEntry = Union[DebianEngine, GoEngine]

CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CRI_DOCKERD_MODULE = "github.com/Mirantis/cri-dockerd"
_CRI_DOCKERD_VERSION_VAR = f"{CRI_DOCKERD_MODULE}/cmd/version.Version"

PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS_MODULE_VERSION = "v0.316.0"
PROMETHEUS_VERSION = "3.16.0"
_PROMETHEUS_VERSION_VARS = (f"github.com/prometheus/common/version.Version={PROMETHEUS_VERSION}",)

ENGINES: dict[str, EngineEntry] = {
    "containerd-1.7": DebianEngine("trixie", ("containerd",), pin="1.7.*"),
    "containerd-1.6": DebianEngine("bookworm", ("containerd",), pin="1.6.*"),
    # Debian's development suite: the only one with containerd 2.x (testing carries the same).
    "containerd-2.1": DebianEngine("sid", ("containerd",), pin="2.1.*"),
    # The current release (config version 4), which Debian does not carry: containerd, ctr and
    # the runc shim from one go install (the shim found on the daemon's PATH). Tags as its
    # Makefile's static build (no C: btrfs, which needs cgo, drops out by itself).
    "containerd-2.4": GoEngine(
        CONTAINERD_MODULE, "v2.4.2", "containerd", package="cmd/containerd", method="install",
        version_vars=(f"{CONTAINERD_MODULE}/version.Version=v2.4.2",),
        tags=("urfave_cli_no_docs",),
        extra=("cmd/ctr", "cmd/containerd-shim-runc-v2"),
    ),
    "docker-26": DebianEngine("trixie", ("docker.io", "docker-cli", "containerd", "runc", "tini"), pin="26.1.*"),
    # Before pin selectors: pins only the --pod-infra-container-image, by exact tag.
    "cri-dockerd-0.4.3": GoEngine(
        CRI_DOCKERD_MODULE, "v0.4.3", "cri-dockerd", version_vars=(f"{_CRI_DOCKERD_VERSION_VAR}=0.4.3",)
    ),
    # Pin selectors (--pinned-images, --pinned-image-labels) came with v0.4.7; v0.4.10 is the
    # newest release known.
    "cri-dockerd-0.4.10": GoEngine(
        CRI_DOCKERD_MODULE,
        "v0.4.10",
        "cri-dockerd",
        version_vars=(f"{_CRI_DOCKERD_VERSION_VAR}=0.4.10",),
        unavailable=(
            "the Go module proxy answers 403 (this module version is not available) for cri-dockerd "
            "v0.4.7 to v0.4.11 and lists no versions (asked 2026-12-01; v0.4.3 is served), "
            "and Debian packages no cri-dockerd"
        ),
    ),
    # Prometheus 3 with kubernetes_sd (Debian's 2.42 is built without it): module versions are
    # v0.3MM.P for Prometheus 3.MM.P. No web UI assets (the builtinassets tag): the tests use the
    # HTTP API only. promtool comes from the same module version.
    "prometheus-3.16": GoEngine(
        PROMETHEUS_MODULE, PROMETHEUS_MODULE_VERSION, "prometheus", package="cmd/prometheus",
        version_vars=_PROMETHEUS_VERSION_VARS,
    ),
    "promtool-3.16": GoEngine(
        PROMETHEUS_MODULE, PROMETHEUS_MODULE_VERSION, "promtool", package="cmd/promtool",
        version_vars=_PROMETHEUS_VERSION_VARS,
    ),
    "crictl-1.37": GoEngine("sigs.k8s.io/cri-tools", "v1.37.0", "crictl", package="cmd/crictl", method="install"),
    # The only version the Go module proxy serves (its version list is refused). Its version is
    # a constant in internal/version (no -X); the tags are its Makefile's minus btrfs,
    # devicemapper and ostree, which need C libraries this machine lacks. CRI-O refuses to start
    # without pinns (pinns/Makefile writes bin/pinns).
    "crio-1.34": GoEngine(
        "github.com/cri-o/cri-o",
        "v1.34.0",
        "crio",
        package="cmd/crio",
        tags=(
            "containers_image_ostree_stub",
            "containers_image_openpgp",
            "exclude_graphdriver_btrfs",
            "btrfs_noversion",
            "exclude_graphdriver_devicemapper",
            "seccomp",
        ),
        cgo=True,
        companions=(("pinns", "bin/pinns", "pinns"),),
    ),
}

# The cri-dockerd the fixtures start (before pin selectors; the newer one cannot be fetched here).
CRI_DOCKERD_OLD = "cri-dockerd-0.4.3"
CRICTL = "crictl-1.37"
CONTAINERD_24 = "containerd-2.4"
CRIO = "crio-1.34"
PROMETHEUS = "prometheus-3.16"
PROMTOOL = "promtool-3.16"


def debian_engines() -> dict[str, DebianEngine]:
    return {name: spec for name, spec in ENGINES.items() if isinstance(spec, DebianEngine)}


def go_engines() -> dict[str, GoEngine]:
    return {name: spec for name, spec in ENGINES.items() if isinstance(spec, GoEngine)}



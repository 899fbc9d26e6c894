"""pytest fixtures for CRI-O (v1.34, ``engines.CRIO``), registered in tests/conftest.py with one import line.

All session-scoped and shared; crio is built at most once per machine (the engine cache):

- ``crio_registry``: Debian's docker-registry on loopback holding the pause image and
  ``CRIO_TEST_IMAGES``, pushed once;
- ``crio``: a :class:`tests.harness.crio.CrioDaemon` pulling from it, running for the session;
- ``crio_crictl``: crictl (the ``crictl`` fixture's binary) bound to crio's endpoint.

The images are pushed, not pulled: a test pulls what it needs through the CRI
(``crio_crictl.run("pull", ref)``; names are under ``pinctl.refs.DEFAULT_DOMAIN``, which
crio's registries.conf sends to the loopback registry). An engine that cannot be had skips
locally and fails with CI=true, as in tests/harness/engine_fixtures.py.
"""

from __future__ import annotations

import pathlib
import subprocess
import time
from collections.abc import Iterable, Iterator

import pytest

from pinctl.refs import DEFAULT_DOMAIN
from tests.harness import cri, debs, engines, images
from tests.harness import registry as reg
from tests.harness.crictl import Crictl, CrictlError
from tests.harness.crio import PAUSE_IMAGE, CrioDaemon, CrioError, registry_path  # noqa: F401  (the tests' import)
from tests.harness.engine_fixtures import _unavailable, go_binary

# Names as the CRI sees them; the registry holds each at the same path.
CRIO_TEST_IMAGES = (
    f"{DEFAULT_DOMAIN}/pinctl-test/crio-alpha:1",
    f"{DEFAULT_DOMAIN}/pinctl-test/crio-beta:1",
    f"{DEFAULT_DOMAIN}/pinctl-test/crio-gamma:1",
)
PIN_TIMEOUT_S = 30.0
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    debs.EngineUnavailable, CrioError, cri.CriError, OSError, subprocess.SubprocessError, RuntimeError,
)


@pytest.fixture(scope="session")
def crio_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[reg.Registry]:
    """docker-registry on 127.0.0.1 with the pause image and ``CRIO_TEST_IMAGES`` pushed."""
    missing = reg.available()
    if missing:
        _unavailable(missing)
    base = tmp_path_factory.mktemp("crio-registry")
    try:
        registry = reg.Registry(base / "registry").start()
        for name in (PAUSE_IMAGE, *CRIO_TEST_IMAGES):
            registry.push(base / "push", images.recipe(f"{registry.host}/{registry_path(name)}", seed=name))
    except _UNAVAILABLE as exc:
        _unavailable(f"loopback registry for {engines.CRIO} unavailable: {exc}")
    try:
        yield registry
    finally:
        registry.stop()


@pytest.fixture(scope="session")
def crio(crio_registry: reg.Registry, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CrioDaemon]:
    """CRI-O v1.34.0 with private roots, socket, config and drop-ins, for the whole session."""
    go_binary(engines.CRIO)
    try:
        daemon = CrioDaemon(tmp_path_factory.mktemp("crio"), crio_registry.host).start()
    except _UNAVAILABLE as exc:
        _unavailable(f"{engines.CRIO} unavailable: {exc}")
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="session")
def crio_crictl(crio: CrioDaemon, crictl: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> Crictl:
    """crictl bound to the session's CRI-O."""
    return Crictl(crictl, crio.endpoint, tmp_path_factory.mktemp("crio-crictl"))


def pull(crictl: Crictl, names: Iterable[str]) -> None:
    """Pull each image through the CRI (a no-op for one CRI-O already holds)."""
    for name in names:
        crictl.run("pull", name)


def pinned_tags(crictl: Crictl) -> set[str]:
    """Every tag of every image crictl shows ``pinned: true``."""
    return {tag for image in crictl.images() if image.pinned for tag in image.repo_tags}


def wait_for_pinned(crictl: Crictl, expected: set[str], timeout: float = PIN_TIMEOUT_S) -> set[str]:
    """Poll ``crictl images`` until the pinned tags are exactly ``expected``; returns them, or fails."""
    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    while True:
        try:
            seen = pinned_tags(crictl)
        except CrictlError:
            seen = set()
        if seen == expected or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    assert seen == expected, f"pinned tags: {sorted(seen)}, expected {sorted(expected)}"
    return seen

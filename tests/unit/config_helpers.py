"""What the configuration loader's tests share: a sandbox that never reads the machine's /etc and
acts as a non-root user, files to write, loads and the one-line ConfigError they raise, the mark
for tests that need real root, and the FIFO deadline, symlink loop and directory refusal that
more than one test module asks for."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
from types import FrameType
from typing import Any, Iterator, Optional

import pytest

from pinctl.config import files as config_files
from pinctl.config import loader as config
from pinctl.config.loader import Config
from pinctl.errors import ConfigError

REAL_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not REAL_ROOT, reason="chown to another uid needs root")
NOBODY = 65534


# A test module imports these two by their function names; pytest knows them by the fixture
# names given here (a test's parameter named as_root would shadow an import of that name).


@pytest.fixture(autouse=True, name="_isolated")
def isolated_config(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    """Never read the machine's /etc, and act as a non-root user unless a test says otherwise."""
    monkeypatch.setattr(config, "DEFAULT_PATH", str(tmp_path / "etc-default" / "config.toml"))
    monkeypatch.setattr(config, "CRIO_DEFAULT_PATH", str(tmp_path / "etc-crio-default" / "crio.conf"))
    monkeypatch.setattr(config_files, "_euid", lambda: 1000)


@pytest.fixture(name="as_root")
def as_root_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_files, "_euid", lambda: 0)


def write(path: pathlib.Path, text: str, mode: int = 0o644) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def load(main: Optional[pathlib.Path] = None, flags: Optional[dict[str, Any]] = None,
         env: Optional[dict[str, str]] = None, from_crio: Optional[str] = None) -> Config:
    return config.load(flags, env or {}, config_path=str(main) if main else None, from_crio=from_crio)


def config_error(**kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load(**kwargs)
    assert info.value.exit_code == 2
    assert "\n" not in str(info.value)
    return str(info.value)


def texts(cfg: Config) -> list[str]:
    return [p.text for p in cfg.patterns]


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail where a blocking open (of a FIFO, say) would hang the test."""
    def expire(signum: int, frame: Optional[FrameType]) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def symlink_loop(directory: pathlib.Path, name: str = "config.toml") -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).symlink_to(directory / f"{name}.other")
    (directory / f"{name}.other").symlink_to(directory / name)
    return directory / name


def directory_refusal(path: pathlib.Path, directory: pathlib.Path) -> str:
    st = directory.stat()
    return (f"refusing {path}: directory {directory} is writable by a user other than root (owner uid {st.st_uid}, "
            f"mode {st.st_mode & 0o7777:04o}), who could replace what pinctl reads there "
            f"(chown root:root {directory} && chmod go-w {directory})")

"""The harness's containerd 2.4 without running it: one engine entry builds containerd, ctr and the
runc shim in one go install, the daemon's config is version 4 (what 2.4.2 reads), 2.1's stays
version 3, and a build that fails skips locally and fails with CI=true."""

from __future__ import annotations

import pathlib
import subprocess
import tomllib
from typing import Any

import pytest

from tests.harness import containerd, engine_fixtures, engines, gobuild


def test_one_go_install_builds_the_three_commands_with_the_version(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: pathlib.Path) -> None:
    spec = engines.go_engines()[engines.CONTAINERD_24]
    calls: list[tuple[list[str], dict[str, str]]] = []

    def run(go: Any, args: list[str], what: str, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append((args, kwargs["env"]))
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(gobuild, "_run", run)
    gobuild._install(gobuild.GoToolchain(pathlib.Path("/go"), "go1.26.8"), spec, tmp_path)
    ((args, env),) = calls
    module = "github.com/containerd/containerd/v2"
    assert args[-3:] == [f"{module}/cmd/{name}@v2.4.2" for name in ("containerd", "ctr", "containerd-shim-runc-v2")]
    assert args[args.index("-ldflags") + 1] == f"-X {module}/version.Version=v2.4.2"
    assert args[args.index("-tags") + 1] == "urfave_cli_no_docs"
    assert env["GOBIN"] == str(tmp_path) and env["CGO_ENABLED"] == "0"
    assert spec.extra_binaries == ("ctr", "containerd-shim-runc-v2")
    # The stamp names them, so an older build of the binary alone is not taken for this one.
    assert gobuild._stamp_of(spec, gobuild.GoToolchain(pathlib.Path("/go"), "go1.26.8"))["extra"] == list(spec.extra)


def test_an_engine_without_extra_commands_is_installed_as_before(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: pathlib.Path) -> None:
    spec = engines.go_engines()[engines.CRICTL]
    calls: list[list[str]] = []
    monkeypatch.setattr(gobuild, "_run", lambda go, args, *a, **k: calls.append(args))
    gobuild._install(gobuild.GoToolchain(pathlib.Path("/go"), "go1.26.8"), spec, tmp_path)
    assert calls == [["install", "-trimpath", f"{spec.import_path}@{spec.version}"]]
    assert "extra" not in gobuild._stamp_of(spec, gobuild.GoToolchain(pathlib.Path("/go"), "go1.26.8"))


@pytest.mark.parametrize("engine, version", [("containerd-1.6", 2), ("containerd-1.7", 2), ("containerd-2.1", 3),
                                             ("containerd-2.4", 4)])
def test_config_version_by_release(engine: str, version: int) -> None:
    assert containerd.config_version(engine) == version


def daemon_of(engine: str, base: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> containerd.ContainerdDaemon:
    monkeypatch.setattr(containerd, "engine_bin_dir", lambda name: base / "bin")
    return containerd.ContainerdDaemon(engine, base)


def test_the_24_config_is_version_4_with_server_plugins_and_imports(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: pathlib.Path) -> None:
    daemon = daemon_of("containerd-2.4", tmp_path, monkeypatch)
    config = tomllib.loads(daemon.render_config())
    assert config["version"] == 4 and "grpc" not in config and "ttrpc" not in config
    assert config["imports"] == [str(tmp_path / "conf.d" / "*.toml")]
    assert "address" not in config["debug"]
    plugins = config["plugins"]
    assert plugins["io.containerd.server.v1.grpc"]["address"] == daemon.address
    assert plugins["io.containerd.server.v1.ttrpc"]["address"] == daemon.address + ".ttrpc"
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"] == {"sandbox": daemon.sandbox_image}
    assert plugins["io.containerd.cri.v1.runtime"]["cdi_spec_dirs"] == [str(tmp_path / "cdi")]
    # The shim is found beside containerd.
    env = daemon.child_env()
    assert env is not None and env["PATH"].split(":")[0] == str(tmp_path / "bin")


def test_the_21_config_stays_version_3(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    daemon = daemon_of("containerd-2.1", tmp_path, monkeypatch)
    config = tomllib.loads(daemon.render_config())
    assert config["version"] == 3 and "imports" not in config
    assert config["grpc"]["address"] == daemon.address
    assert config["plugins"]["io.containerd.cri.v1.runtime"]["enable_cdi"] is False
    assert daemon.child_env() is None


@pytest.mark.parametrize("ci", ["", "true"])
def test_a_build_that_fails_skips_locally_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch, ci: str,
                                                         tmp_path_factory: pytest.TempPathFactory) -> None:
    def broken(name: str) -> pathlib.Path:
        raise gobuild.GoBuildError(f"go install of {name} failed")

    monkeypatch.setattr(gobuild, "binary", broken)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception if ci else pytest.skip.Exception, match="containerd-2.4 failed"):
        next(engine_fixtures._session_containerd(engines.CONTAINERD_24, tmp_path_factory))

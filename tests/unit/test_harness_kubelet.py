"""The kubelet harness's pure parts: the wrapper module it builds from, its config, its log reading.

The integration tests run the real kubelet; these pin what they rely on without building it.
"""

from __future__ import annotations

import datetime
import json
import pathlib

import pytest

from tests.harness import kubelet, kubernetes_build

KUBERNETES_GO_MOD = """\
module k8s.io/kubernetes

go 1.26.0

require (
\texample.test/dependency v1.0.0
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/cri-api => ./staging/src/k8s.io/cri-api
\texample.test/fork => example.test/fork v1.2.3
)

replace k8s.io/kubelet => ./staging/src/k8s.io/kubelet
"""

LOG = """\
I1201 11:19:49.927328    3151 image_gc_manager.go:303] "Setting Image ID lastUsed" imageID="sha256:53fd" lastUsed="2026-12-01 11:19:49.927247945 +0000 UTC m=+0.438064496"
I1201 11:20:00.111132    3151 image_gc_manager.go:460] "Attempting to delete unused images"
I1201 11:20:00.112110    3151 image_gc_manager.go:529] "Removing image to free bytes" imageID="sha256:ab17" size=6298278 runtimeHandler=""
I1201 11:20:00.125379    3151 image_gc_manager.go:529] "Removing image to free bytes" imageID="sha256:53fd" size=6196079 runtimeHandler=""
"""


def test_every_staging_module_is_pinned_to_the_matching_release() -> None:
    replaced = kubernetes_build.staging_replacements(KUBERNETES_GO_MOD, "v1.37.2")
    assert replaced == {"k8s.io/api": "v0.37.2", "k8s.io/cri-api": "v0.37.2", "k8s.io/kubelet": "v0.37.2"}
    assert kubernetes_build.staging_replacements(KUBERNETES_GO_MOD, "v1.38.0-beta.0")["k8s.io/api"] == "v0.38.0-beta.0"


def test_the_wrapper_module_requires_kubernetes_and_replaces_each_staging_module() -> None:
    text = kubernetes_build.wrapper_go_mod("v1.37.2", "1.26.0", {"k8s.io/api": "v0.37.2", "k8s.io/kubelet": "v0.37.2"})
    lines = text.splitlines()
    assert "go 1.26.0" in lines and "require k8s.io/kubernetes v1.37.2" in lines
    assert "\tk8s.io/api => k8s.io/api v0.37.2" in lines and "\tk8s.io/kubelet => k8s.io/kubelet v0.37.2" in lines


@pytest.mark.parametrize("version", ["1.37.2", "v2.0.0", "v1.37"])
def test_a_version_that_is_no_kubernetes_release_is_refused(version: str) -> None:
    with pytest.raises(kubernetes_build.KubeletUnavailable):
        kubernetes_build.staging_replacements(KUBERNETES_GO_MOD, version)


def test_the_config_keeps_every_port_on_loopback_or_off(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = kubelet.Kubelet(tmp_path, "/run/x.sock", binary=tmp_path / "kubelet", gc=kubelet.GcPolicy(50, 40, "3s"))
    monkeypatch.setattr(kubelet, "cgroup_v1", lambda: True)
    config = made.config()
    assert (config["address"], config["healthzBindAddress"], config["readOnlyPort"]) == ("127.0.0.1", "127.0.0.1", 0)
    assert config["containerRuntimeEndpoint"] == "unix:///run/x.sock"
    assert (config["imageGCHighThresholdPercent"], config["imageMinimumGCAge"]) == (50, "3s")
    assert config["failCgroupV1"] is False and config["makeIPTablesUtilChains"] is False
    monkeypatch.setattr(kubelet, "cgroup_v1", lambda: False)
    assert "failCgroupV1" not in made.config()
    made.write_config()
    assert json.loads(made.config_path.read_text())["staticPodPath"] == str(made.manifest_dir)


def test_removals_and_times_are_read_from_the_log(tmp_path: pathlib.Path) -> None:
    made = kubelet.Kubelet(tmp_path, "unix:///run/x.sock", binary=tmp_path / "kubelet")
    made.log_path.write_text(LOG)
    assert [(r.image_id, r.size, r.at) for r in made.removals()] == [
        ("sha256:ab17", 6298278, "11:20:00.112110"),
        ("sha256:53fd", 6196079, "11:20:00.125379"),
    ]
    reclaim = made.wait_for_log('"Attempting to delete unused images"', timeout=0)
    local = datetime.datetime(datetime.date.today().year, 12, 1, 11, 20, 0, 111132).astimezone()
    assert made.line_time(reclaim) == local
    used = made.last_used("sha256:53fd", reclaim.start())
    assert used == datetime.datetime(2026, 12, 1, 11, 19, 49, 927247, tzinfo=datetime.timezone.utc)
    assert made.last_used("sha256:ab17", len(LOG)) is None


def test_a_long_build_step_says_it_is_still_running(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.harness import gobuild

    monkeypatch.setattr(gobuild, "HEARTBEAT_S", 0.1)
    heard: list[str] = []
    done = gobuild.run_announced(["sh", "-c", "sleep 0.35; echo built"], "go build x", 60, heard.append)
    assert done.returncode == 0 and done.stdout == "built\n"
    assert heard and all(line.startswith("go build x: still running (") for line in heard)


def test_the_kubernetes_build_prints_each_step_and_its_heartbeat(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str],
                                                              tmp_path: pathlib.Path) -> None:
    from tests.harness import gobuild

    monkeypatch.setattr(gobuild, "HEARTBEAT_S", 0.1)
    out = kubernetes_build._run(["sh", "-c", "sleep 0.35; echo ok"], "go get", tmp_path, {"PATH": "/usr/bin:/bin"}, 60,
                             tmp_path / "build.log")
    assert out == "ok\n"
    assert "kubernetes build: go get: still running (" in capsys.readouterr().err
    assert "(exit 0)" in (tmp_path / "build.log").read_text()

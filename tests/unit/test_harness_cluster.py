"""The control-plane harness's pure parts: the etcd wrapper, the build's flags, certificates' text, argv.

tests/integration/test_cluster.py runs the real control plane; these pin what it relies on
without building or starting anything.
"""

from __future__ import annotations

import dataclasses
import datetime
import pathlib

import pytest

from tests.harness import cluster_pki, control_plane, kubernetes_build


def test_the_etcd_wrapper_requires_the_server_module_and_its_main_runs_etcdmain() -> None:
    text = kubernetes_build.etcd_wrapper_go_mod("v3.7.3", "1.26.0")
    assert f"module {kubernetes_build.ETCD_WRAPPER_MODULE}\n" in text
    assert "\ngo 1.26.0\n" in text and "\nrequire go.etcd.io/etcd/server/v3 v3.7.3\n" in text
    assert "replace" not in text
    assert '"go.etcd.io/etcd/server/v3/etcdmain"' in kubernetes_build.ETCD_MAIN
    assert "etcdmain.Main(os.Args)" in kubernetes_build.ETCD_MAIN


def test_one_build_names_all_five_commands_and_stamps_both_version_packages() -> None:
    assert kubernetes_build.command_packages() == [
        "k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager", "k8s.io/kubernetes/cmd/kube-scheduler",
        "k8s.io/kubernetes/cmd/kubectl",
    ]
    flags = kubernetes_build.kubernetes_ldflags("v1.37.2", datetime.datetime(2026, 12, 2, 14, 0, tzinfo=datetime.timezone.utc))
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {package}.gitVersion=v1.37.2" in flags
        assert f"-X {package}.gitMinor=37" in flags
        assert f"-X {package}.buildDate=2026-12-02T14:00:00Z" in flags


def test_a_stamp_of_the_kubelet_only_recipe_is_stale(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    target = tmp_path / "kubernetes-v1.37.2"
    (target / "bin").mkdir(parents=True)
    for name in kubernetes_build.KUBERNETES_COMMANDS:
        (target / "bin" / name).write_text("#!/bin/sh\n")
        (target / "bin" / name).chmod(0o755)
    stamp = target / "stamp.json"
    stamp.write_text('{"version": "v1.37.2", "recipe": 1}')
    commands = kubernetes_build.KUBERNETES_COMMANDS
    assert kubernetes_build._from_stamp(target, "v1.37.2", kubernetes_build.BUILD_RECIPE, commands) is None
    stamp.write_text(f'{{"version": "v1.37.2", "recipe": {kubernetes_build.BUILD_RECIPE}}}')
    assert kubernetes_build._from_stamp(target, "v1.37.2", kubernetes_build.BUILD_RECIPE, commands) is not None
    (target / "bin" / "kubectl").unlink()
    assert kubernetes_build._from_stamp(target, "v1.37.2", kubernetes_build.BUILD_RECIPE, commands) is None


def test_the_kubelet_view_of_a_build_keeps_its_stamp() -> None:
    build = kubernetes_build.KubernetesBuild(pathlib.Path("/cache/bin"), "v1.37.2", {"kubelet": "Kubernetes v1.37.2"},
                                             "go1.26.8", "2026-12-02T14:00:00Z", 9.5, 1500.0)
    kubelet = build.kubelet()
    assert kubelet.binary == pathlib.Path("/cache/bin/kubelet")
    assert (kubelet.reported_version, kubelet.build_seconds) == ("Kubernetes v1.37.2", 1500.0)
    with pytest.raises(KeyError):
        build.binary("kube-proxy")


def test_a_node_certificate_names_the_user_and_group_the_node_authorizer_wants() -> None:
    assert cluster_pki.subject("system:node:n1", ("system:nodes",)) == "/O=system:nodes/CN=system:node:n1"
    ext = cluster_pki.extensions("serverAuth", ("localhost",), ("127.0.0.1",))
    assert "extendedKeyUsage = serverAuth" in ext and "subjectAltName = DNS:localhost, IP:127.0.0.1" in ext
    with pytest.raises(cluster_pki.PkiError):
        cluster_pki.subject("a/b")
    with pytest.raises(cluster_pki.PkiError):
        cluster_pki.ClusterPki(pathlib.Path("/nonexistent")).node_client("Not A Node")


def test_a_kubeconfig_names_its_files_and_one_context() -> None:
    pair = cluster_pki.KeyPair(pathlib.Path("/p/admin.crt"), pathlib.Path("/p/admin.key"))
    config = cluster_pki.kubeconfig("https://127.0.0.1:6443", pathlib.Path("/p/ca.crt"), "admin", pair)
    assert config["current-context"] == "pinctl-test"
    assert config["clusters"] == [{"name": "pinctl-test", "cluster": {"server": "https://127.0.0.1:6443",
                                                                      "certificate-authority": "/p/ca.crt"}}]
    assert config["users"] == [{"name": "admin", "user": {"client-certificate": "/p/admin.crt",
                                                          "client-key": "/p/admin.key"}}]


def _plane(tmp_path: pathlib.Path) -> control_plane.ControlPlane:
    build = kubernetes_build.KubernetesBuild(tmp_path / "bin", "v1.37.2", {}, "", "", 0.0, 0.0)
    etcd = kubernetes_build.EtcdBuild(tmp_path / "bin" / "etcd", "v3.7.3", "", "", "", 0.0, 0.0)
    plane = control_plane.ControlPlane(tmp_path / "cp", build, etcd)
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        plane._serving[name] = cluster_pki.KeyPair(tmp_path / f"{name}.crt", tmp_path / f"{name}.key")
    return plane


def test_every_component_binds_loopback_only(tmp_path: pathlib.Path) -> None:
    plane = _plane(tmp_path)
    argvs = {"etcd": plane.etcd_argv(), "kube-apiserver": plane.apiserver_argv(),
             "kube-controller-manager": plane.controller_manager_argv(), "kube-scheduler": plane.scheduler_argv()}
    for name, argv in argvs.items():
        listening = [arg for arg in argv if arg.startswith(("--listen-", "--advertise-", "--bind-address",
                                                            "--initial-advertise", "--etcd-servers"))]
        assert listening, name
        for arg in listening:
            assert "127.0.0.1" in arg and "0.0.0.0" not in arg, f"{name}: {arg}"
    apiserver = argvs["kube-apiserver"]
    assert "--authorization-mode=Node,RBAC" in apiserver
    assert f"--service-cluster-ip-range={control_plane.SERVICE_CIDR}" in apiserver
    assert control_plane.SERVICE_CIDR.startswith("127.")
    manager = argvs["kube-controller-manager"]
    assert "--use-service-account-credentials=true" in manager
    assert f"--service-account-private-key-file={plane.pki.service_account.key}" in manager
    assert f"--root-ca-file={plane.pki.ca.cert}" in manager


def test_the_children_get_no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("no_proxy", "example.invalid")
    env = control_plane.loopback_env()
    assert "HTTPS_PROXY" not in env and "no_proxy" not in env and "PATH" in env


def test_a_dead_component_is_described_by_its_first_errors_not_its_usage_text(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "kube-scheduler.log"
    usage = [f"      --flag-{n} string   what flag {n} does" for n in range(100)]
    log.write_text("\n".join(["I1202 15:13:17.2 1 server.go:1] starting", "Error: unknown flag: --no-such-flag",
                              *usage, '{"level":"fatal","msg":"etcd gave up"}', "E1202 15:13:18.5 1 x.go:9] broke"]))
    component = control_plane.Component("kube-scheduler", ["kube-scheduler"], log)
    assert component.error_lines() == ["Error: unknown flag: --no-such-flag", '{"level":"fatal","msg":"etcd gave up"}',
                                       "E1202 15:13:18.5 1 x.go:9] broke"]
    described = component.describe_death()
    assert described.startswith("kube-scheduler exited with None")
    assert "--- first errors ---\nError: unknown flag: --no-such-flag\n" in described


def test_the_five_ports_are_distinct() -> None:
    ports = dataclasses.astuple(control_plane.Ports.free())
    assert len(set(ports)) == 5 and all(1024 <= port < 65536 for port in ports)

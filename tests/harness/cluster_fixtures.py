"""pytest fixtures for a real Kubernetes control plane, shared by every cluster test of a session.

Registered in tests/conftest.py. ``kubernetes_binaries`` and ``etcd_binary`` build (or take from
the machine's cache) the kubernetes commands and etcd: 6-20 minutes the first time on two cores,
nothing afterwards. ``control_plane`` starts etcd, kube-apiserver, kube-controller-manager and
kube-scheduler once per session (``control_plane.py``) and stops them at its end. A build or a
start that fails skips locally and fails the test in CI (CI=true), like every missing engine.

Tests share the cluster, so each works in a namespace (or node name) of its own; nothing here
resets the cluster between tests. ``fleet`` registers nodes to it (cluster_nodes.py): one per
runtime of :data:`cluster_nodes.ENGINES`, started side by side, each Ready in the API before the
first test that asks for it; they are tainted (``cluster_nodes.FLEET_TAINT``), so only pods that
tolerate it (pinctl's DaemonSet tolerates every taint) are placed on them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest

from tests.harness import cluster_nodes, cluster_pki, daemonset_pod, debs, image_build, kubernetes_build
from tests.harness.cluster_nodes import Fleet
from tests.harness.control_plane import ControlPlane, ControlPlaneError
from tests.harness.pod_fixtures import _unavailable


@pytest.fixture(scope="session")
def kubernetes_binaries() -> kubernetes_build.KubernetesBuild:
    """kubelet, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl of one build."""
    try:
        return kubernetes_build.ensure_kubernetes()
    except kubernetes_build.KubernetesUnavailable as exc:
        _unavailable(f"kubernetes {kubernetes_build.KUBERNETES_VERSION} unavailable: {exc}")


@pytest.fixture(scope="session")
def etcd_binary() -> kubernetes_build.EtcdBuild:
    try:
        return kubernetes_build.ensure_etcd()
    except kubernetes_build.KubernetesUnavailable as exc:
        _unavailable(f"etcd {kubernetes_build.ETCD_VERSION} unavailable: {exc}")


@pytest.fixture(scope="session")
def control_plane(kubernetes_binaries: kubernetes_build.KubernetesBuild, etcd_binary: kubernetes_build.EtcdBuild,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A running control plane for the session: etcd and the three components on loopback."""
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"), kubernetes_binaries, etcd_binary)
    try:
        plane.start()
    except (ControlPlaneError, cluster_pki.PkiError, OSError) as exc:
        _unavailable(f"the control plane does not start here: {exc}")
    try:
        yield plane
    finally:
        plane.stop()


# The fleet's kubelets sync each pod (and rewrite its ConfigMap volumes) this often; the kubelet's
# default is 1m (tests/integration/test_fleet.py says what that gives).
FLEET_SYNC_FREQUENCY = "10s"


@pytest.fixture(scope="session")
def fleet(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Nodes of containerd 1.7 and 2.1, a Docker node behind pinctl cri-proxy and a CRI-O node,
    registered to the session's control plane, each Ready."""
    # pinctl's image, which every fleet module loads on the nodes, builds while they come up: after
    # any change to pinctl it builds again, a minute or more. The agent_image fixture then finds it
    # built (or builds it, and says why it cannot).
    early = threading.Thread(target=_build_agent_image, name="agent-image", daemon=True)
    early.start()
    made = Fleet.create(control_plane, tmp_path_factory.mktemp("fleet"), sync_frequency=FLEET_SYNC_FREQUENCY)
    try:
        made.start()
    except cluster_nodes.FLEET_UNAVAILABLE as exc:
        _unavailable(f"the fleet's nodes do not come up here: {exc}")
    finally:
        # Before any test asks agent_image: the build's lock is a file lock, which one process's
        # two threads would both hold.
        early.join()
    try:
        yield made
    finally:
        made.stop()


def _build_agent_image() -> None:
    with contextlib.suppress(Exception):
        image_build.pinctl_image(daemonset_pod.plan(daemonset_pod.manifest()).image)


@pytest.fixture(scope="session")
def agent_image() -> image_build.BuiltImage:
    """pinctl's image built from the Containerfile (cached per machine): the DaemonSet's pod, through the CRI, a standalone kubelet and the fleet."""
    try:
        return image_build.pinctl_image(daemonset_pod.plan(daemonset_pod.manifest()).image)
    except (debs.EngineUnavailable, OSError) as exc:
        _unavailable(f"the pinctl image cannot be built here: {exc}")

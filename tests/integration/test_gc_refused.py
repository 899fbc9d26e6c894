"""A delete CRI-O refuses, against the real CRI-O v1.34.0: every pod has a storage container
made from the pause image of its day; once ``pause_image`` names another image, the old one is
no longer pinned, no container the CRI lists uses it, and containers/storage refuses its delete.
``pinctl gc plan`` marks it refused (in the maximum-age step: the run ends there) before the
CRI's RemoveImage fails as it said. (The kubelet's side of a refusal, on cri-dockerd:
test_kubelet_gc.py, gc_refused_scenario.py.)"""

from __future__ import annotations

import contextlib
import json
import pathlib
from collections.abc import Iterator

import pytest

from tests.harness import cri, cri_pods
from tests.harness.crio import PAUSE_IMAGE, CrioDaemon
from tests.harness.crio_fixtures import CRIO_TEST_IMAGES
from tests.harness.protowire import Message
from tests.harness.registry import Registry
from tests.integration.gc_crio_scenario import run_pinctl

pytestmark = pytest.mark.integration

NEW_PAUSE = CRIO_TEST_IMAGES[0]
NAMESPACE_CONTAINER = 1
KUBELET_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
imageMaximumGCAge: 10m
imageGCHighThresholdPercent: 1
imageGCLowThresholdPercent: 0
"""


def sandbox_without_infra(name: str, log_dir: pathlib.Path) -> Message:
    """A host-network pod whose containers keep their own PID namespaces: CRI-O (drop_infra_ctr,
    its default) runs no infra process for it, yet stores a container of its pause image."""
    config = cri_pods.sandbox_config(name, log_dir)
    # LinuxPodSandboxConfig (8) . security_context (2) . namespace_options (1): network NODE, pid CONTAINER.
    return [*config[:-1], (8, [(2, [(1, [(1, cri_pods.NAMESPACE_NODE), (2, NAMESPACE_CONTAINER)])])])]


@pytest.fixture
def own_crio(crio_registry: Registry, tmp_path: pathlib.Path) -> Iterator[CrioDaemon]:
    """A CRI-O of this test's own: its pause image is changed."""
    daemon = CrioDaemon(tmp_path / "crio", crio_registry.host).start()
    try:
        yield daemon
    finally:
        for sandbox in cri_pods.list_pod_sandboxes(daemon.address):
            for call in (cri_pods.stop_pod_sandbox, cri_pods.remove_pod_sandbox):
                with contextlib.suppress(cri.CriError):
                    call(daemon.address, sandbox.id)
        daemon.stop()


def test_gc_plan_says_crio_refuses_an_old_pause_image_and_crio_does(own_crio: CrioDaemon,
                                                                    tmp_path: pathlib.Path) -> None:
    address = own_crio.address
    pod = cri_pods.run_pod_sandbox(address, sandbox_without_infra("refusal", tmp_path / "logs"))
    old = cri_pods.image_status(address, PAUSE_IMAGE)
    assert old is not None and old.pinned
    cri_pods.pull_image(address, NEW_PAUSE)
    own_crio.write_dropin("20-pause.conf", f'[crio.image]\npause_image = "{NEW_PAUSE}"\n')
    own_crio.reload()
    cri.wait_for(address, lambda listed: any(i.id == old.id and not i.pinned for i in listed))
    config = tmp_path / "pinctl.toml"
    config.write_text("")
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text(KUBELET_CONFIG)
    planned = run_pinctl(own_crio, "gc", "plan", "--kubelet-config", str(kubelet), "-o", "json", config=config)
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)["gc"]
    entry = next(e for e in plan["order"] if e["id"] == old.id)
    assert entry["fate"] == "refused_age", entry
    assert entry["refused_because"].startswith("CRI-O's store refuses to delete it: storage container k8s_"), entry
    assert plan["outcome"] == "age_step_refused" and plan["amount_to_free"] is None
    assert plan["skipped_threshold"] is not None  # usage is over 1%: the threshold step would run
    assert plan["refusals_source"].startswith("containers/storage's containers in ")
    # CRI-O does as gc plan said: the CRI's RemoveImage fails, the image stays, the pod is there.
    with pytest.raises(cri.CriError, match="in use by a container"):
        cri_pods.remove_image(address, old.id)
    assert old.id in {image.id for image in cri.list_images(address)}
    assert pod in {sandbox.id for sandbox in cri_pods.list_pod_sandboxes(address)}
    # Its sandbox gone, the image goes too, and gc plan no longer marks it.
    cri_pods.stop_pod_sandbox(address, pod)
    cri_pods.remove_pod_sandbox(address, pod)
    again = json.loads(run_pinctl(own_crio, "gc", "plan", "--kubelet-config", str(kubelet), "-o", "json",
                                  config=config).stdout)["gc"]
    assert next(e for e in again["order"] if e["id"] == old.id)["refused_because"] is None
    cri_pods.remove_image(address, old.id)
    assert old.id not in {image.id for image in cri.list_images(address)}

"""A delete Docker refuses, as one scenario of the shared periodic run (tests/integration/test_kubelet_gc.py).

dockerd 26 (containerd image store, its data root on the node's loop fs), cri-dockerd v0.4.3,
the kubelet straight on cri-dockerd, imageMaximumGCAge 4m and usage over the high threshold. An
old image is used by a plain ``docker run`` container, long exited: cri-dockerd lists only
Kubernetes' containers, so the kubelet counts the image unused and asks for its delete in the
maximum-age step; dockerd refuses (cri-dockerd does not force). The age step deletes the other
old image, returns the error, and the run ends there: no usage line, no threshold step.
``pinctl gc plan`` said so just before, and ``pinctl prune`` kept the image.
"""

from __future__ import annotations

import json
from typing import Any

from tests.harness import containerd as ctd
from tests.harness import cri, engines, images
from tests.harness import docker as docker_harness
from tests.harness.cri_dockerd import CriDockerd
from tests.harness.docker_pods import HostRuncDocker
from tests.harness.kubelet import GcPolicy, StaticPod
from tests.harness.kubelet_periodic import FILL_AHEAD_S, MIB, PERIOD_S, PeriodicNode, SecondRun
from tests.harness.runnable import RunnableRecipe, build_runnable_archive, runnable_recipe, sandbox_recipe
from tests.integration.pinctl_runner import pinctl

OLD_APP = "example.test/old-app:1.0"
OLD_PLAIN = "example.test/old-plain:1.0"
LOW = 50


def runnable(ref: str, payload_mib: float = 0.0) -> RunnableRecipe:
    return runnable_recipe(ref, payload_bytes=max(4096, int(payload_mib * MIB)))


def docker_refused(node: PeriodicNode) -> SecondRun:
    store = node.containerd("containerd-1.7")
    assert node.fs is not None
    docker = HostRuncDocker(node.base_dir / "docker", containerd_store=True, containerd=store,
                            data_dir=node.fs.path / "docker").start()
    node.on_close(docker.stop)
    archive = node.base_dir / "runnable.tar"
    sleeper, old_app, _sandbox = build_runnable_archive(archive, [
        runnable("example.test/sleeper:1.0"), runnable(OLD_APP, 2), sandbox_recipe(ctd.DEFAULT_SANDBOX_IMAGE)])
    docker.load(archive)
    docker_harness.load_images_docker(docker, node.base_dir / "work", [
        images.recipe(OLD_PLAIN, seed="old-plain", layer_bytes=4 * MIB, compress=False)])
    # A container outside Kubernetes, run once and long exited, as on many Docker nodes.
    docker.docker("run", "--name", "web", "--network", "none", "--entrypoint", "/bin/busybox", OLD_APP, "true")
    cdd = CriDockerd(engines.CRI_DOCKERD_OLD, docker, node.base_dir / "cri-dockerd").start()
    node.on_close(cdd.stop)
    pod = StaticPod("sleeper", sleeper.refs[0])
    made = node.start(GcPolicy(LOW + 1, LOW, min_age="30s", max_age="4m"), [pod], endpoint=cdd.endpoint)
    node.container_in(pod, ("running",), address=cdd.address)
    by_tag = cri.by_tag(cri.list_images(cdd.address))
    web = json.loads(docker.docker("inspect", "web").stdout)[0]
    node.notes.update(old_app=by_tag[OLD_APP].id, old_plain=by_tag[OLD_PLAIN].id,
                      sleeper=by_tag[sleeper.refs[0]].id, web_image=web["Image"], web_id=web["Id"])
    node.at(PERIOD_S - FILL_AHEAD_S)
    node.fill_for(8 * MIB, LOW)  # about 55% used: the usage calls for the threshold step
    env = {"DOCKER_HOST": docker.host, "CONTAINERD_NAMESPACE": "moby"}
    common = ("-r", cdd.endpoint, "--kubelet-config", str(made.config_path), "-o", "json")

    def plan_and_prune() -> Any:
        planned = pinctl(store, "gc", "plan", "-n", "moby", *common, env=env)
        # -n all: prune then deletes through the CRI runtime (cri-dockerd), as the kubelet does
        # (-n moby alone would take Docker's own API, where every container keeps its image).
        pruned = pinctl(store, "prune", "-n", "all", "--all-unused", "--dry-run", *common, env=env)
        node.notes["prune"] = json.loads(pruned.stdout) if pruned.returncode == 0 else pruned.stderr
        return planned

    run = node.second_run(plan_and_prune, address=cdd.address)
    state = json.loads(docker.docker("inspect", "web").stdout)[0]["State"]["Status"]
    run.notes.update(web_after=state, over_lines=made.log_text().count("over the high threshold"))
    return run


def assert_outcome(run: SecondRun) -> None:
    notes, plan = run.notes, run.plan
    old_app, old_plain = notes["old_app"], notes["old_plain"]
    assert notes["web_image"] == old_app, "Docker's container names the image by the ID cri-dockerd reports"
    # gc plan: the age step tries both old images, Docker refuses one, the run ends there.
    entries = {entry["id"]: entry for entry in plan["order"]}
    assert entries[old_app]["fate"] == "refused_age" and entries[old_plain]["fate"] == "deleted_age"
    assert "container web (exited) uses it and is none of the CRI's containers" in entries[old_app]["refused_because"]
    assert plan["outcome"] == "age_step_refused" and plan["amount_to_free"] is None
    skipped = plan["skipped_threshold"]
    assert skipped is not None and skipped["usage_percent"] >= LOW + 1 and skipped["amount_to_free"] > 0
    assert plan["refusals_source"].startswith("Docker's containers at unix://")
    # The kubelet did exactly that: both tried (old-app refused), the age step's error, and no
    # threshold step at all (its usage line never came), though usage was over the threshold.
    assert sorted(run.removed_ids) == sorted([old_app, old_plain])
    assert run.outcome.startswith("failed") and run.error.startswith(plan["message"]), (run.error, plan["message"])
    assert plan["message"] == "wanted to free images older than 4m0s, encountered errors in image deletion: "
    assert "is using its referenced image" in run.error, run.error
    assert run.usage is None and notes["over_lines"] == 0
    left = {image.id for image in run.images_after}
    assert old_app in left and old_plain not in left and notes["sleeper"] in left
    assert notes["web_after"] == "exited"
    # prune, just before, kept the image Docker refuses and would have deleted the other.
    actions = {item["id"]: (item["action"], item["why"]) for item in notes["prune"]["results"]}
    assert actions[old_app][0] == "kept" and "Docker refuses to delete it" in actions[old_app][1]
    assert actions[old_plain][0] == "would-remove"

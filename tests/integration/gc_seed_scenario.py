"""The seed user's node, as one scenario of the shared periodic run (tests/integration/test_kubelet_gc.py).

dockerd 26 with the containerd image store, cri-dockerd v0.4.3 (which pins only its sandbox
image), a pin label in ``moby``, the kubelet through ``pinctl cri-proxy``: at max age 4m the
plain image goes and the labelled one stays.
"""

from __future__ import annotations

from tests.harness import containerd as ctd
from tests.harness import cri, engines, images
from tests.harness import docker as docker_harness
from tests.harness.cri_dockerd import CriDockerd
from tests.harness.docker_pods import HostRuncDocker
from tests.harness.kubelet import GcPolicy, StaticPod
from tests.harness.kubelet_periodic import MIB, PeriodicNode, Scenario, SecondRun
from tests.harness.runnable import RunnableRecipe, build_runnable_archive, runnable_recipe, sandbox_recipe
from tests.integration.pinctl_runner import pinctl
from tests.harness.criproxy_process import ProxyProcess

PIN = "io.cri-containerd.pinned"


def runnable(ref: str, payload_mib: float = 0.0) -> RunnableRecipe:
    return runnable_recipe(ref, payload_bytes=max(4096, int(payload_mib * MIB)))


SEED_LABELLED = "example.test/seed-labelled:1.0"
SEED_PLAIN = "example.test/seed-plain:1.0"


def seed_setup(relay: str) -> Scenario:
    """The seed user's node: dockerd 26 with the containerd image store, cri-dockerd v0.4.3 (it
    pins only its sandbox image), a pin label in moby, the kubelet through pinctl cri-proxy. At
    max age 4m the plain image goes and the labelled one stays."""

    def scenario(node: PeriodicNode) -> SecondRun:
        store = node.containerd("containerd-1.7")
        docker = HostRuncDocker(node.base_dir / "docker", containerd_store=True, containerd=store).start()
        node.on_close(docker.stop)
        runnable_archive = node.base_dir / "runnable.tar"
        sleeper, _sandbox = build_runnable_archive(runnable_archive, [
            runnable("example.test/seed-sleeper:1.0"),
            sandbox_recipe(ctd.DEFAULT_SANDBOX_IMAGE),
        ])
        docker.load(runnable_archive)
        docker_harness.load_images_docker(docker, node.base_dir / "work", [
            images.recipe(SEED_LABELLED, seed="seed-l", layer_bytes=4 * MIB, compress=False),
            images.recipe(SEED_PLAIN, seed="seed-x", layer_bytes=4 * MIB, compress=False)])
        moby_ref = next(i.ref for i in store.images("moby") if i.ref.endswith("seed-labelled:1.0"))
        store.ctr("images", "label", moby_ref, f"{PIN}=pinned", namespace="moby")
        cdd = CriDockerd(engines.CRI_DOCKERD_OLD, docker, node.base_dir / "cri-dockerd").start()
        node.on_close(cdd.stop)
        env = {"DOCKER_HOST": docker.host, "CONTAINERD_NAMESPACE": "moby"}
        proxy = ProxyProcess(store, cdd.address, "--relay", relay, env=env)
        node.on_close(proxy.stop)
        proxy.wait_serving()
        endpoint = f"unix://{proxy.path}"
        pod = StaticPod("sleeper", sleeper.refs[0])
        made = node.start(GcPolicy(85, 80, min_age="30s", max_age="4m"), [pod], endpoint=endpoint)
        first = node.container_in(pod, ("running",), address=proxy.path)
        by_tag = cri.by_tag(cri.list_images(cdd.address))
        node.notes.update(labelled=by_tag[SEED_LABELLED].id, plain=by_tag[SEED_PLAIN].id,
                          pinned_direct=by_tag[SEED_LABELLED].pinned, sleeper_container=first.id)
        plan = lambda: pinctl(store, "gc", "plan", "-r", endpoint, "-n", "moby", "--kubelet-config",  # noqa: E731
                              str(made.config_path), "-o", "json", env=env)
        run = node.second_run(plan, address=proxy.path)
        run.notes["runtime_errors"] = [line for line in made.log_text().splitlines()
                                       if "code = Unavailable" in line or "connection refused" in line]
        return run

    return scenario

"""The seed user's node, as one scenario of the shared periodic run (tests/integration/test_kubelet_gc.py).

dockerd 26 with the containerd image store, cri-dockerd v0.4.3 (which pins only its sandbox
image), a pin label in ``moby``, the kubelet through ``pinctl cri-proxy``: at max age 4m the
plain image goes and the labelled one stays.
"""

from __future__ import annotations

import json
import shutil

from tests.harness import containerd as ctd
from tests.harness import cri, engines, images, pods
from tests.harness import docker as docker_harness
from tests.harness.cri_dockerd import CriDockerd
from tests.harness.docker import DockerDaemon
from tests.harness.kubelet import GcPolicy, StaticPod
from tests.harness.kubelet_periodic import MIB, PeriodicNode, Scenario, SecondRun
from tests.harness.runnable import SANDBOX_SEED, RunnableRecipe, build_runnable_archive, runnable_recipe
from tests.integration.pinctl_runner import pinctl
from tests.integration.test_criproxy import ProxyProcess

PIN = "io.cri-containerd.pinned"


def runnable(ref: str, payload_mib: float = 0.0) -> RunnableRecipe:
    return runnable_recipe(ref, payload_bytes=max(4096, int(payload_mib * MIB)))


SEED_LABELLED = "example.test/seed-labelled:1.0"
SEED_PLAIN = "example.test/seed-plain:1.0"


# Docker's runtime here: this host's runc, with the OCI spec's process.oomScoreAdj dropped first.
# cri-dockerd gives every sandbox -998, and root here lacks CAP_SYS_RESOURCE to lower a score
# ("can't get final child's PID from pipe"); the containerd harness says restrict_oom_score_adj.
RUNC_WRAPPER = """#!/bin/sh
bundle=. prev=
for arg in "$@"; do
  case "$prev" in --bundle|-b) bundle=$arg;; esac
  case "$arg" in --bundle=*) bundle=${arg#--bundle=};; esac
  prev=$arg
done
case " $* " in *" create "*)
  python3 -c 'import json, sys
path = sys.argv[1]
spec = json.load(open(path))
if spec.get("process", {}).pop("oomScoreAdj", None) is not None:
    json.dump(spec, open(path, "w"))' "$bundle/config.json";;
esac
exec RUNC "$@"
"""


class HostRuncDocker(DockerDaemon):
    """The harness dockerd, its containers run by this host's runc (the docker-26 engine's own,
    from trixie, needs a newer glibc than this machine may have), through :data:`RUNC_WRAPPER`."""

    def stop(self) -> None:
        """Containers removed first; then whatever dockerd left mounted below its paths (the
        host network's ``netns/default`` bind mount once a host-network container ran)."""
        if self.is_alive():
            ids = self.docker("ps", "-aq", check=False).stdout.split()
            if ids:
                self.docker("rm", "--force", *ids, check=False)
        exec_root = self.exec_root
        super().stop()
        for root in (self.base_dir, exec_root):
            for point in sorted(pods._mounts_below(root), key=len, reverse=True):
                pods._unmount(point)
        if self.base_dir not in exec_root.parents:
            shutil.rmtree(exec_root, ignore_errors=True)  # a short /tmp dir its stop could not remove

    def render_config(self) -> str:
        wrapper = self.base_dir / "host-runc"
        wrapper.write_text(RUNC_WRAPPER.replace("RUNC", str(pods.runc_binary())))
        wrapper.chmod(0o755)
        config = json.loads(super().render_config())
        config.update({"runtimes": {"host-runc": {"path": str(wrapper)}}, "default-runtime": "host-runc"})
        return json.dumps(config, indent=2) + "\n"


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
            RunnableRecipe((ctd.DEFAULT_SANDBOX_IMAGE,), SANDBOX_SEED, 64, {}, ("/bin/busybox", "sleep", "86400")),
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

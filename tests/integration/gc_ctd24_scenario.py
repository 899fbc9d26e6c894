"""containerd 2.4.2 under the real kubelet, as scenarios of the shared periodic run
(tests/integration/test_kubelet_gc.py): what its node with pins directly must show (the
scenario is that module's, run on 2.4 too), and the kubelet's CRIListStreaming through ``pinctl
cri-proxy``, one scenario per relay.

With ``--feature-gates=CRIListStreaming=true`` (alpha, off by default, in v1.37.2's
pkg/features) the kubelet lists images, pods, containers and their stats with cri-api v0.37's
streaming methods (``StreamImages``, ``StreamPodSandboxes``, ...; k8s.io/cri-client's remote
services), falling back to the unary lists only when the runtime answers UNIMPLEMENTED, which
containerd 2.4.2 does not. The proxy's policy names images by a glob that no label carries: the
kubelet keeps them only if the streamed list says pinned. At max age 4m the second GC run
deletes the one plain image and keeps the policy's two; the proxy's call counter, scraped before
``gc plan`` first talks to it, shows that the kubelet streamed every list and called no unary one.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.harness import containerd as ctd
from tests.harness import cri, engines
from tests.harness.criproxy_process import ProxyProcess
from tests.harness.kubelet import GcPolicy, StaticPod
from tests.harness.kubelet_periodic import MIB, PeriodicNode, Plan, Scenario, SecondRun
from tests.harness.ports import free_port
from tests.harness.runnable import runnable_recipe

GATE = "--feature-gates=CRIListStreaming=true"
POLICY = "example.test/kept/*"  # a glob of the policy's: containerd knows nothing of it
KEPT = ("example.test/kept/a:1", "example.test/kept/b:1")
PLAIN = "example.test/plain:1"
# The lists the gate streams (cri-client v0.37.2), each by its unary method's name.
STREAMED = {"StreamImages": "ListImages", "StreamPodSandboxes": "ListPodSandbox", "StreamContainers": "ListContainers",
            "StreamContainerStats": "ListContainerStats"}
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))
PlanFor = Callable[..., Plan]


def calls(port: int) -> dict[str, float]:
    """``pinctl_cri_proxy_calls_total`` by method, from the proxy's metrics."""
    with _LOOPBACK.open(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {sample.labels["method"]: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == "pinctl_cri_proxy_calls_total"}


def nonzero(counted: dict[str, float]) -> dict[str, int]:
    return {method: int(count) for method, count in sorted(counted.items()) if count}


def streamed(relay: str, plan_for: PlanFor) -> Scenario:
    """containerd 2.4.2, the kubelet with CRIListStreaming on through ``pinctl cri-proxy --relay relay``."""

    def scenario(node: PeriodicNode) -> SecondRun:
        daemon = node.containerd(engines.CONTAINERD_24)
        (sleeper,) = node.load_runnable(runnable_recipe("example.test/sleeper:1", payload_bytes=4096))
        kept = node.load_plain(*((ref, 3) for ref in KEPT))
        (plain,) = node.load_plain((PLAIN, 4))
        config = node.base_dir / "pinctl.toml"
        config.write_text(f'pinned_images = ["{POLICY}"]\n')
        port = free_port()
        proxy = ProxyProcess(daemon, node.address, "--relay", relay, "--config", str(config),
                             "--metrics-address", f"127.0.0.1:{port}")
        node.on_close(proxy.stop)
        proxy.wait_serving()
        endpoint = f"unix://{proxy.path}"
        pod = StaticPod("sleeper", sleeper.refs[0])
        made = node.start(GcPolicy(85, 80, min_age="30s", max_age="4m"), [pod], endpoint=endpoint,
                          kubelet_args=(GATE,))
        first = node.running(pod)
        pause = next(i.id for i in cri.list_images(node.address) if ctd.DEFAULT_SANDBOX_IMAGE in i.repo_tags)
        node.notes.update(kept={i.image_id for i in kept}, plain=plain.image_id, pause=pause, sleeper=sleeper.image_id,
                          sleeper_container=first.id, labels={i.ref: i.labels for i in daemon.images()})
        plan = plan_for(node, endpoint, env={"PINCTL_CONFIG": str(config)})

        def counted_then_plan() -> Any:
            node.notes["calls_before_plan"] = calls(port)  # the kubelet's calls alone, so far
            return plan()

        run = node.second_run(counted_then_plan)
        run.notes["calls_after_run"] = calls(port)
        run.notes["stream_errors"] = [line for line in made.log_text().splitlines()
                                      if any(f'"{text}' in line for text in ("Stream", "List")) and " failed" in line]
        run.notes["healthz"] = made.healthz()
        run.notes["through_proxy"] = {i.id: i.pinned for i in cri.list_images(proxy.path)}
        return run

    return scenario


def assert_outcome(run: SecondRun) -> None:
    """The kubelet deleted the plain image only, kept the policy's (which only the proxy pins),
    and made every list call it made to the proxy a streamed one."""
    notes = run.notes
    assert run.removed_ids == [notes["plain"]] and run.plan_code == 0, (run.removed_ids, run.plan_code)
    left = {image.id for image in run.images_after}
    assert notes["kept"] | {notes["sleeper"], notes["pause"]} <= left
    # No label pins them: containerd's own CRI does not; the proxy's streamed list does.
    assert not any(labels.get("io.cri-containerd.pinned") for ref, labels in notes["labels"].items()
                   if ref.startswith("example.test/kept/")), notes["labels"]
    assert all(notes["through_proxy"][image_id] for image_id in notes["kept"]), notes["through_proxy"]
    protected = {p["id"]: p["reasons"] for p in run.plan["protected"]}
    assert all(protected[image_id] == ["pinned"] for image_id in notes["kept"]), protected
    # The kubelet streamed: before gc plan, nothing but the kubelet had called the proxy.
    before, after = notes["calls_before_plan"], notes["calls_after_run"]
    for stream, unary in STREAMED.items():
        assert before[stream] > 0 and before[unary] == 0, (stream, before)
    assert after["StreamImages"] > before["StreamImages"], "the second run's listing was streamed too"
    assert notes["stream_errors"] == [] and notes["healthz"] == "ok", notes["stream_errors"][:5]
    assert [(c.id, c.state) for c in run.containers_after if c.id == notes["sleeper_container"]] == [
        (notes["sleeper_container"], "running")]


def assert_pins_direct(run: SecondRun) -> None:
    """The pins scenario's node on containerd 2.4.2, directly: its CRI honours the label and pins
    its own sandbox image (pinned_images.sandbox), so at max age 4m both stay; the policy's image,
    which nothing labels, goes with the plain one, and gc plan says so (exit 1: at risk)."""
    notes = run.notes
    assert set(run.removed_ids) == {notes["policy"], notes["plain"]}, run.removed_ids
    left = {image.id for image in run.images_after}
    assert {notes["labelled"], notes["pause"], notes["sleeper"]} <= left
    assert {i.id for i in run.images_after if i.pinned} == {notes["labelled"], notes["pause"]}
    assert run.plan_code == 1
    assert {risk["id"] for risk in run.plan["at_risk"] if risk["deleted"]} == {notes["policy"]}
    assert notes["runtime_errors"] == [] and notes["healthz"] == "ok"

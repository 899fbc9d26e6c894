"""The kubelet's image GC on a CRI-O node, as one scenario of the shared periodic run.

Run by tests/integration/test_kubelet_gc.py beside the containerd scenarios, sharing their
5-minute wait. The node is what a CRI-O operator has: CRI-O v1.34.0 with its storage on its
own small filesystem, a site drop-in pinning some images, a kubelet v1.37.2 running a static
pod, and pinctl doing the rest through pinctl's own drop-in (``pin`` of one image, ``sync`` of a
policy pattern). Usage is pushed past the high threshold by more than the unpinned images
hold, so the kubelet deletes every one of them and still falls short: everything pinned stays,
whoever pinned it. Then ``check`` runs with the pod running, and a ``prune`` after the run
deletes a late image and keeps every pinned and in-use one.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

from pinctl.refs import DEFAULT_DOMAIN
from tests.harness import cri, engines, gobuild, images, runnable
from tests.harness import registry as reg
from tests.harness.crictl import Crictl
from tests.harness.crio import PAUSE_IMAGE, CrioDaemon, pinned_images_dropin
from tests.harness.crio_fixtures import registry_path
from tests.harness.kubelet import GcPolicy, StaticPod
from tests.harness.kubelet_periodic import FILL_AHEAD_S, MIB, PERIOD_S, PeriodicNode, Scenario, SecondRun

ROOT = f"{DEFAULT_DOMAIN}/pinctl-test/gc-crio"
SLEEPER = f"{ROOT}/sleeper:1"
SITE = f"{ROOT}/site:1"  # pinned by the site's own drop-in
PINNED = f"{ROOT}/pinned:1"  # pinned by `pinctl pin`
POLICY = f"{ROOT}/policy:1"  # pinned by pinctl's policy, through `pinctl sync`
UNUSED = (f"{ROOT}/unused-6:1", f"{ROOT}/unused-10:1")
LATE = f"{ROOT}/late:1"  # pulled after the GC run, for prune
SIZES_MIB = {SITE: 5, PINNED: 5, POLICY: 5, UNUSED[0]: 6, UNUSED[1]: 10, LATE: 3}
LOW = 50


def run_pinctl(crio: CrioDaemon, *args: str, config: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """pinctl as on a CRI-O node: CRI-O's endpoint, pinctl's config, nothing of containerd."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("CONTAINERD_ADDRESS", "PINCTL_CONTAINERD_CONFIG", "CONTAINERD_NAMESPACE", "DOCKER_HOST")}
    env.update(CONTAINER_RUNTIME_ENDPOINT=crio.endpoint, PINCTL_CONFIG=str(config))
    return subprocess.run([sys.executable, "-m", "pinctl", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def push_images(registry: reg.Registry, work: pathlib.Path) -> None:
    """The scenario's images into the loopback registry, under names no other test uses."""
    def at_registry(name: str) -> str:
        return f"{registry.host}/{registry_path(name)}"

    registry.push_runnable(work, runnable.runnable_recipe(at_registry(SLEEPER), seed=SLEEPER))
    for name, size in SIZES_MIB.items():
        registry.push(work, images.recipe(at_registry(name), seed=name, layer_bytes=size * MIB, compress=False))


def crio_pins(registry: reg.Registry) -> Scenario:
    def scenario(node: PeriodicNode) -> SecondRun:
        crio = node.crio(registry.host)
        push_images(registry, node.base_dir / "push")
        crictl = Crictl(gobuild.binary(engines.CRICTL), crio.endpoint, node.base_dir / "crictl")
        for name in (PAUSE_IMAGE, SLEEPER, SITE, PINNED, POLICY, *UNUSED):
            crictl.run("pull", name)
        config = node.base_dir / "pinctl.toml"
        config.write_text(f"pinned_images = {json.dumps([POLICY])}\n")
        crio.write_dropin("10-site.conf", pinned_images_dropin([f"{ROOT}/site*"]))
        crio.reload()
        steps = {"pin": run_pinctl(crio, "pin", PINNED, config=config),
                 "sync": run_pinctl(crio, "sync", config=config)}
        by_tag = cri.by_tag(cri.list_images(crio.address))
        ids = {name: by_tag[name].id for name in (PAUSE_IMAGE, SLEEPER, SITE, PINNED, POLICY, *UNUSED)}
        node.notes.update(ids=ids, steps={k: (v.returncode, v.stdout, v.stderr) for k, v in steps.items()},
                          pinned_before={name for name in ids if by_tag[name].pinned})
        pod = StaticPod("sleeper", SLEEPER)
        kubelet = node.start(GcPolicy(LOW + 1, LOW, min_age="3s"), [pod])
        node.running(pod)
        checked = run_pinctl(crio, "check", config=config)
        node.notes["check"] = (checked.returncode, checked.stdout, checked.stderr)
        node.at(PERIOD_S - FILL_AHEAD_S)
        # More than both unpinned images hold: only a pinned image could make up the rest.
        node.fill_for((SIZES_MIB[UNUSED[0]] + SIZES_MIB[UNUSED[1]] + 4) * MIB, LOW)
        plan = lambda: run_pinctl(crio, "gc", "plan", "-r", crio.endpoint, "--kubelet-config",  # noqa: E731
                                  str(kubelet.config_path), "-o", "json", config=config)
        run = node.second_run(plan)
        run.notes["prune"] = prune_after(crio, crictl, config, kubelet.config_path)
        return run

    return scenario


def prune_after(crio: CrioDaemon, crictl: Crictl, config: pathlib.Path,
                kubelet_config: pathlib.Path) -> dict[str, Any]:
    """A late image pulled after the run: prune --all-unused --yes deletes it and only it
    (--min-age 0s: no pass of the kubelet has seen it, so at its own minimum age it is too young)."""
    crictl.run("pull", LATE)
    late = cri.by_tag(cri.list_images(crio.address))[LATE].id
    done = run_pinctl(crio, "prune", "--all-unused", "--yes", "--min-age", "0s", "--kubelet-config", str(kubelet_config),
                      "-o", "json", config=config)
    return {"late": late, "code": done.returncode, "stderr": done.stderr,
            "document": json.loads(done.stdout) if done.stdout.strip() else None,
            "left": {image.id for image in cri.list_images(crio.address)}}


def assert_outcome(run: SecondRun) -> None:
    """What the kubelet did on the CRI-O node, and what pinctl said about it before and after."""
    notes = run.notes
    ids = notes["ids"]
    for step, (code, _out, err) in notes["steps"].items():
        assert code == 0, f"pinctl {step}: {err}"
    assert notes["pinned_before"] == {PAUSE_IMAGE, SITE, PINNED, POLICY}
    code, out, err = notes["check"]
    assert code == 0, f"check with the pod running exited {code}: {out}{err}"
    # The kubelet deleted both unpinned images, fell short, and kept every pinned one.
    assert set(run.removed_ids) == {ids[name] for name in UNUSED}
    kept = {ids[name] for name in (PAUSE_IMAGE, SLEEPER, SITE, PINNED, POLICY)}
    assert kept <= {image.id for image in run.images_after}
    assert run.outcome.startswith("failed") and run.plan["outcome"] == "shortfall"
    assert run.plan["message"] == run.error, (run.plan["message"], run.error)
    protected = {entry["id"]: entry["reasons"] for entry in run.plan["protected"]}
    assert {protected[ids[name]][0] for name in (PAUSE_IMAGE, SITE, PINNED, POLICY)} == {"pinned"}, protected
    assert protected[ids[SLEEPER]] == ["in_use"]
    # Dated from CRI-O's image store: pulled before the kubelet started, so seen at its first pass.
    sources = {entry["id"]: entry["first_detected_source"] for entry in run.plan["order"]}
    assert {sources[ids[name]] for name in UNUSED} == {"kubelet_start"}, sources
    pruned = notes["prune"]
    assert pruned["code"] == 0, pruned["stderr"]
    actions = {item["id"]: item["action"] for item in pruned["document"]["results"]}
    assert [image_id for image_id, action in actions.items() if action == "removed"] == [pruned["late"]], actions
    assert pruned["late"] not in pruned["left"] and kept <= pruned["left"]

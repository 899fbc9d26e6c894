"""The pin policy against real containerd 1.7 and 2.1: patterns from files, drop-ins, env and flags;
ls reasons and drift; pin by pattern; sync and prune, checked with ctr and the CRI."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import one_containerd
from tests.harness import cri, images
from tests.harness.containerd import ContainerdDaemon
from tests.integration.pinctl_runner import assert_one_line_error, pinctl

PIN = "io.cri-containerd.pinned"
MANAGED = "io.pinctl.managed"
LoadImages = Callable[..., list[images.ImageInfo]]


@pytest.fixture
def ctd(modern_containerd: ContainerdDaemon) -> ContainerdDaemon:
    """containerd 1.7, then 2.1 (each test runs on both), k8s.io holding only the sandbox image."""
    return modern_containerd


@pytest.fixture
def zoo(ctd: ContainerdDaemon, load_images: LoadImages) -> dict[str, images.ImageInfo]:
    infos = load_images(ctd, [
        images.recipe("registry.example/base/os:1", "registry.example/base/os:latest", seed="os"),
        images.recipe("registry.example/base/tools:2", seed="tools"),
        images.recipe("myregistry.example/base/fake:1", seed="fake"),
        images.recipe("example.test/fedora-builder:3", seed="fedora"),
        images.recipe("example.test/app:1", seed="app"),
    ])
    return {info.refs[0]: info for info in infos}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def run(daemon: ContainerdDaemon, config: Path | None, *args: str, env: dict[str, str] | None = None) -> Any:
    extra = {"PINCTL_CONFIG": str(config)} if config else {}
    return pinctl(daemon, *args, env={**extra, **(env or {})})


def run_json(daemon: ContainerdDaemon, config: Path | None, *args: str, expect: int = 0, env: dict[str, str] | None = None) -> Any:
    result = run(daemon, config, *args, "-o", "json", env=env)
    assert result.returncode == expect, result.stderr
    return json.loads(result.stdout)


def labels(daemon: ContainerdDaemon) -> dict[str, dict[str, str]]:
    return {row.ref: row.labels for row in daemon.images()}


def pattern_reasons(doc: Any) -> dict[str, list[tuple[str, str]]]:
    return {
        img["ref"]: [(r["detail"], r["source"]) for r in img["reasons"] if r["kind"] == "pattern"]
        for img in doc["images"]
    }


@one_containerd  # pinctl's matching and its sources; what the CRI then pins: sync, on every engine
def test_ls_names_every_pattern_and_its_source(ctd: ContainerdDaemon, zoo: dict, tmp_path: Path) -> None:
    main = write(tmp_path / "config.toml", 'pinned_images = [\n  "registry.example/base/*",\n]\n')
    write(tmp_path / "config.d" / "10-team.toml", 'pinned_images = ["*fedora*"]\n')
    doc = run_json(ctd, main, "ls", "--pinned-image", "example.test/app:1", env={"PINCTL_PINNED_IMAGES": "*tools*"})
    reasons = pattern_reasons(doc)
    assert reasons["registry.example/base/os:latest"] == [("registry.example/base/*", f"{main}:2")]
    assert sorted(reasons["registry.example/base/tools:2"]) == [
        ("*tools*", "env PINCTL_PINNED_IMAGES"), ("registry.example/base/*", f"{main}:2")]
    assert reasons["example.test/fedora-builder:3"] == [("*fedora*", f"{tmp_path}/config.d/10-team.toml:1")]
    assert reasons["example.test/app:1"] == [("example.test/app:1", "flag --pinned-image")]
    # Anchored by default: a look-alike host is not covered.
    assert reasons["myregistry.example/base/fake:1"] == []
    # A pattern alone pins nothing in containerd.
    assert not any(img["pinned"] for img in doc["images"] if img["ref"] != ctd.sandbox_image and not img["ref"].startswith("sha256:"))


def test_sync_labels_what_the_policy_covers(ctd: ContainerdDaemon, zoo: dict, tmp_path: Path) -> None:
    main = write(tmp_path / "config.toml", 'pinned_images = ["registry.example/base/*"]\n')
    doc = run_json(ctd, main, "sync")
    assert doc["command"] == "sync" and doc["status"] == "success"
    changed = {r["ref"] for r in doc["results"] if r["action"] == "pinned"}
    assert changed == {"registry.example/base/os:1", "registry.example/base/os:latest", "registry.example/base/tools:2"}
    found = labels(ctd)
    for ref in changed:
        assert found[ref][PIN] == "pinned" and found[ref][MANAGED] == "true"
    assert PIN not in found["myregistry.example/base/fake:1"] and PIN not in found["example.test/app:1"]
    os_id = zoo["registry.example/base/os:1"].image_id
    cri.wait_for(ctd.address, lambda imgs: any(i.id == os_id and i.pinned for i in imgs), 60)
    again = run_json(ctd, main, "sync")
    assert {r["action"] for r in again["results"]} == {"already-pinned"}


def test_prune_removes_only_what_sync_added(ctd: ContainerdDaemon, zoo: dict, tmp_path: Path) -> None:
    main = write(tmp_path / "config.toml", 'pinned_images = ["registry.example/base/*", "example.test/app:1"]\n')
    run_json(ctd, main, "sync")
    ctd.label_image("example.test/fedora-builder:3", {PIN: "pinned"})  # an operator's own pin
    write(main, 'pinned_images = ["registry.example/base/tools:2"]\n')
    plan = run_json(ctd, main, "sync", "--prune", "--dry-run")
    assert plan["dry_run"] and PIN in labels(ctd)["example.test/app:1"]
    doc = run_json(ctd, main, "sync", "--prune")
    pruned = {r["ref"] for r in doc["results"] if r["action"] == "pruned"}
    assert pruned == {"registry.example/base/os:1", "registry.example/base/os:latest", "example.test/app:1"}
    found = labels(ctd)
    assert PIN not in found["example.test/app:1"] and MANAGED not in found["example.test/app:1"]
    assert found["registry.example/base/tools:2"][PIN] == "pinned"
    assert found["example.test/fedora-builder:3"][PIN] == "pinned"
    app_id = zoo["example.test/app:1"].image_id
    cri.wait_for(ctd.address, lambda imgs: any(i.id == app_id and not i.pinned for i in imgs), 60)


@one_containerd  # pinctl's refusal; a prune's write: the test before, on every engine
def test_prune_with_an_empty_policy_is_refused(ctd: ContainerdDaemon, zoo: dict, tmp_path: Path) -> None:
    main = write(tmp_path / "config.toml", 'pinned_images = ["example.test/app:1"]\n')
    run_json(ctd, main, "sync")
    write(main, "pinned_images = []\n")
    assert_one_line_error(run(ctd, main, "sync", "--prune"), 2, "no pinned_images", "--allow-empty-policy")
    assert labels(ctd)["example.test/app:1"][PIN] == "pinned"
    doc = run_json(ctd, main, "sync", "--prune", "--allow-empty-policy")
    assert [r["ref"] for r in doc["results"] if r["action"] == "pruned"] == ["example.test/app:1"]


@one_containerd  # pinctl's patterns and dialects; the label write: test_core, on every engine
def test_pin_and_unpin_by_pattern(ctd: ContainerdDaemon, zoo: dict) -> None:
    doc = run_json(ctd, None, "pin", "registry.example/base/*")
    assert {r["ref"] for r in doc["results"]} == {
        "registry.example/base/os:1", "registry.example/base/os:latest", "registry.example/base/tools:2"}
    assert PIN not in labels(ctd)["myregistry.example/base/fake:1"]
    crio = run_json(ctd, None, "pin", "--pattern-dialect", "crio", "registry.example/base/*")
    assert "myregistry.example/base/fake:1" in {r["ref"] for r in crio["results"] if r["action"] == "pinned"}
    doc = run_json(ctd, None, "unpin", "*base*")
    assert not [ref for ref, found in labels(ctd).items() if "base" in ref and PIN in found]
    missing = run(ctd, None, "pin", "nothing.example/*")
    assert missing.returncode == 1 and "no image matches nothing.example/*" in missing.stderr


@one_containerd  # pinctl's drift from labels and policy, and its rendering
def test_drift_shows_both_directions(ctd: ContainerdDaemon, zoo: dict, tmp_path: Path) -> None:
    main = write(tmp_path / "config.toml", 'pinned_images = ["example.test/app:1"]\n')
    ctd.label_image("registry.example/base/tools:2", {PIN: "pinned"})
    doc = run_json(ctd, main, "ls", "--drift")
    drift = {img["ref"]: img["drift"] for img in doc["images"]}
    assert drift["example.test/app:1"] == "unlabelled"
    assert drift["registry.example/base/tools:2"] == "uncovered"
    assert "registry.example/base/os:1" not in drift
    table = run(ctd, main, "ls", "--drift").stdout
    assert "DRIFT" in table and "pinctl sync" in table


@one_containerd  # settings and their sources: pinctl's alone
def test_config_show_and_precedence(ctd: ContainerdDaemon, tmp_path: Path) -> None:
    main = write(tmp_path / "config.toml", 'timeout = 5\nnamespaces = ["k8s.io"]\npinned_images = ["a.example/*"]\n')
    write(tmp_path / "config.d" / "20-b.toml", "timeout = 7\n")
    doc = run_json(ctd, main, "config", "show", "--timeout", "9", env={"CONTAINERD_NAMESPACE": "moby"})
    assert doc["config"]["timeout"] == {"value": 9.0, "source": "flag"}
    assert doc["config"]["namespaces"] == {"value": ["moby"], "source": "env CONTAINERD_NAMESPACE"}
    assert doc["files"] == [str(main), f"{tmp_path}/config.d/20-b.toml"]
    doc = run_json(ctd, main, "config", "show")
    assert doc["config"]["timeout"]["value"] == 7 and doc["config"]["timeout"]["source"].startswith(f"{tmp_path}/config.d/20-b.toml")


@one_containerd  # lint reads names only; listing them on 2.1 is tested by ls
def test_config_lint(ctd: ContainerdDaemon, zoo: dict, tmp_path: Path) -> None:
    main = write(tmp_path / "config.toml", "\n".join([
        'pinned_images = [',
        '  "registry.example/base/*",',
        '  "registry.example/base/os:1",',
        '  "gone.example/*",',
        '  "*",',
        ']',
    ]) + "\n")
    result = run(ctd, main, "config", "lint")
    assert result.returncode == 1, result.stderr
    kinds = {line.split(": ")[1] for line in result.stdout.splitlines()}
    assert kinds == {"invalid", "shadowed", "unmatched", "crio-differs"}
    assert "myregistry.example/base/fake:1" in result.stdout
    clean = write(tmp_path / "clean" / "config.toml", 'pinned_images = ["example.test/app:1"]\n')
    ok = run(ctd, clean, "config", "lint")
    assert ok.returncode == 0 and ok.stdout == ""


@one_containerd  # refused before containerd is asked
def test_invalid_policy_stops_every_command_with_one_line(ctd: ContainerdDaemon, tmp_path: Path) -> None:
    main = write(tmp_path / "config.toml", 'pinned_images = ["a.example/*/b"]\n')
    assert_one_line_error(run(ctd, main, "ls"), 2, "a.example/*/b")
    bad_key = write(tmp_path / "k" / "config.toml", 'timeout = 2\npinned_image = ["x"]\n')
    assert_one_line_error(run(ctd, bad_key, "ls"), 2, f"{bad_key}:2", "pinned_image")


@one_containerd  # refused before containerd is asked
def test_writable_config_is_refused_as_root(ctd: ContainerdDaemon, tmp_path: Path) -> None:
    main = write(tmp_path / "config.toml", 'pinned_images = ["example.test/app:1"]\n')
    os.chmod(main, 0o666)
    assert_one_line_error(run(ctd, main, "sync"), 2, str(main), "chmod go-w")


@one_containerd  # CRI-O's dialect: pinctl's alone
def test_from_crio_reads_crio_patterns_in_its_dialect(ctd: ContainerdDaemon, zoo: dict, tmp_path: Path) -> None:
    crio = write(tmp_path / "crio.conf", '[crio.image]\npinned_images = ["registry.example/base/*"]\n')
    doc = run_json(ctd, None, "ls", f"--from-crio={crio}")
    reasons = pattern_reasons(doc)
    # CRI-O does not anchor globs: the look-alike host is covered there.
    assert reasons["myregistry.example/base/fake:1"] == [("registry.example/base/*", f"crio {crio}")]


@one_containerd  # the node's namespaces, as a fleet's shared config names them
def test_a_namespace_the_config_names_and_the_node_lacks_is_read_as_empty(
        ctd: ContainerdDaemon, zoo: dict, tmp_path: Path) -> None:
    """A one-shot command on a node without a namespace its config names reads that namespace as
    empty and says so in one line; the same name given with -n is refused, as a likely typo."""
    main = write(tmp_path / "config.toml", 'namespaces = ["k8s.io", "absent-here"]\n'
                 'pinned_images = ["example.test/app:1"]\n')
    listed = run(ctd, main, "ls", "-q")
    assert listed.returncode == 0, listed.stderr
    assert "example.test/app:1" in listed.stdout.splitlines()
    warned = [line for line in listed.stderr.splitlines() if "absent-here" in line]
    assert len(warned) == 1 and str(main) in warned[0] and "read as empty" in warned[0], listed.stderr
    synced = run(ctd, main, "sync")
    assert synced.returncode == 0, synced.stderr + synced.stdout
    assert labels(ctd)["example.test/app:1"].get(PIN) == "pinned"
    assert "absent-here" not in ctd.ctr("namespaces", "ls", "-q").stdout.split()  # read, not made
    assert_one_line_error(run(ctd, main, "ls", "-n", "absent-here"), 2, "namespace absent-here does not exist")

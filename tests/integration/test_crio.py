"""pinctl on a CRI-O node, against the real CRI-O v1.34.0: no containerd anywhere.

CRI-O's pins are its files: what `pinctl ls` says is pinned must be what `crictl images` says
CRI-O pins, pattern by pattern (the corpus below), and pin, unpin and sync work through pinctl's
own drop-in and a reload, keeping the site's items. check tells a drop-in not yet re-read and
one that overrides pinctl's. The session's CRI-O (tests/harness/crio_fixtures.py) is shared: each
test leaves its drop-in directory empty and CRI-O reloaded.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from pinctl.refs import DEFAULT_DOMAIN
from tests.harness import crio as crio_harness
from tests.harness import images
from tests.harness import registry as reg
from tests.harness.crictl import Crictl
from tests.harness.crio import PAUSE_IMAGE, CrioDaemon
from tests.harness.crio_fixtures import CRIO_TEST_IMAGES, pull, registry_path

D = DEFAULT_DOMAIN
BUSYBOX = f"{D}/library/busybox:1.36"
REDIS_7, REDIS_LATEST = f"{D}/library/redis:7", f"{D}/library/redis:latest"
APP_1, APP_2 = f"{D}/team/app:1.0", f"{D}/team/app:2.0"
APPDB = f"{D}/team/appdb:3"
WEB = f"{D}/team/web:V2"
FEDORA = f"{D}/fedora/tools:39"
MIRRORED = f"{D}/mirror/team/app:1.0"
BY_DIGEST = f"{D}/team/bydigest"
ALPHA, BETA, GAMMA = CRIO_TEST_IMAGES
# Each tuple: the tags of one image, pushed together.
CORPUS_IMAGES = ((BUSYBOX,), (REDIS_7, REDIS_LATEST), (APP_1,), (APP_2,), (APPDB,), (WEB,), (FEDORA,), (MIRRORED,),
                 (f"{BY_DIGEST}:push",))
SITE = "10-site.conf"


def run_pinctl(crio: CrioDaemon, *args: str, config: pathlib.Path | None = None,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """pinctl as an operator on a CRI-O node runs it: -r at CRI-O, no containerd, no Docker."""
    full = {key: value for key, value in os.environ.items()
            if key not in ("CONTAINERD_ADDRESS", "PINCTL_CONTAINERD_CONFIG", "CONTAINERD_NAMESPACE", "DOCKER_HOST",
                           "PINCTL_CONFIG")}
    full["CONTAINER_RUNTIME_ENDPOINT"] = crio.endpoint
    if config is not None:
        full["PINCTL_CONFIG"] = str(config)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "pinctl", *args], capture_output=True, text=True, env=full, timeout=120)


def pinctl_json(crio: CrioDaemon, *args: str, expect: int = 0, config: pathlib.Path | None = None) -> dict[str, Any]:
    done = run_pinctl(crio, *args, "-o", "json", config=config)
    assert done.returncode == expect, done.stderr
    assert "containerd" not in done.stderr, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def cri_pinned_ids(crictl: Crictl) -> set[str]:
    return {image.id for image in crictl.images() if image.pinned}


def pinctl_pinned_ids(crio: CrioDaemon) -> set[str]:
    return {row["id"] for row in pinctl_json(crio, "ls")["images"] if row["pinned"]}


def registry_digest(ref: str) -> str:
    """The manifest digest the registry serves for ref (skopeo may rewrite what it pushed)."""
    done = subprocess.run([reg.SKOPEO_BIN, "inspect", "--tls-verify=false", "--format", "{{.Digest}}", f"docker://{ref}"],
                          capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def corpus(crio: CrioDaemon, crio_crictl: Crictl, crio_registry: reg.Registry,
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The corpus's images pushed and pulled through the CRI (one by digest only); their IDs."""
    work = tmp_path_factory.mktemp("crio-corpus")
    digest = ""
    for tags in CORPUS_IMAGES:
        pushed = [f"{crio_registry.host}/{registry_path(tag)}" for tag in tags]
        crio_registry.push(work, images.recipe(*pushed, seed=tags[0]))
        if tags[0].startswith(BY_DIGEST):
            digest = registry_digest(pushed[0])
    pull(crio_crictl, [PAUSE_IMAGE, *CRIO_TEST_IMAGES, *(tag for tags in CORPUS_IMAGES[:-1] for tag in tags),
                       f"{BY_DIGEST}@{digest}"])
    listed = crio_crictl.images()
    ids = {name: image.id for image in listed for name in (*image.repo_tags, *image.repo_digests)}
    return {"ids": ids, "digest_name": f"{BY_DIGEST}@{digest}", "all_ids": {image.id for image in listed}}


@pytest.fixture
def node(crio: CrioDaemon, crio_crictl: Crictl, corpus: dict[str, Any]) -> Iterator[Crictl]:
    crio.remove_dropins()
    crio.reload()
    yield crio_crictl
    crio.remove_dropins()
    crio.reload()


def corpus_patterns(corpus: dict[str, Any]) -> list[str]:
    app_id = corpus["ids"][APP_1]
    return [
        # exact, in every spelling CRI-O compares
        BUSYBOX, "busybox:1.36", f"{D}/library/busybox", BUSYBOX.upper(), APP_1, f"{D}/team/app", REDIS_LATEST,
        WEB, WEB.lower(), f"{D}/team/web:v2 ", " " + APP_1, corpus["digest_name"], corpus["digest_name"].upper(),
        # never the ID
        f"sha256:{app_id}", app_id, f"*{app_id[10:18]}*", f"{app_id[:12]}*", "sha256:*", "*sha256*", "*@sha256:*",
        # globs: a prefix anywhere in the name, case aside
        f"{D}/team/*", "team/*", f"{D}/team/app:*", f"{D}/team/app*", f"{D}/TEAM/*", f"{D}/library/*",
        f"{D}/library/redis:*", "*/app:1.0*", f"{D}/mirror/*", f"{D}/fedora/*", f"{D}/pinctl-test/crio-*",
        # keywords
        "*db*", "*fedora*", "*FEDORA*", "*team*", "*app*", "*:1.0*", "*bydigest*", "*redis:7*", "*latest*",
        # neither a name nor a pattern that can match
        "", "  ", "**", "example.invalid/none:1", "*nothing-here*",
    ]


def test_ls_pins_exactly_what_crio_pins_for_every_pattern_of_the_corpus(
        crio: CrioDaemon, node: Crictl, corpus: dict[str, Any]) -> None:
    patterns = corpus_patterns(corpus)
    assert len(patterns) >= 40
    differ: list[str] = []
    for pattern in patterns:
        crio.write_dropin(SITE, crio_harness.pinned_images_dropin([pattern]))
        crio.reload()
        truth, said = cri_pinned_ids(node), pinctl_pinned_ids(crio)
        if truth != said:
            differ.append(f"{pattern!r}: CRI-O pins {sorted(truth)}, pinctl says {sorted(said)}")
    assert not differ, "\n".join(differ)


def test_ls_names_the_file_and_line_and_the_pause_image(crio: CrioDaemon, node: Crictl) -> None:
    crio.write_dropin(SITE, "# the site's own\n[crio.image]\npinned_images = [\n  \"*fedora*\",\n]\n")
    crio.reload()
    rows = {row["ref"]: row for row in pinctl_json(crio, "ls")["images"]}
    fedora = rows[FEDORA]
    assert fedora["pinned"] and fedora["namespace"] is None
    assert fedora["reasons"] == [{"kind": "crio-config", "detail": "*fedora*",
                                  "source": f"{crio.dropin_dir / SITE}:4"}]
    pause = rows[PAUSE_IMAGE]
    assert pause["pinned"] and [r["kind"] for r in pause["reasons"]] == ["sandbox"]
    assert not rows[APP_1]["pinned"]
    table = run_pinctl(crio, "ls")
    assert table.returncode == 0 and "containerd" not in table.stderr + table.stdout


def test_pin_unpin_and_sync_through_pinctls_dropin_keep_the_sites_items(
        crio: CrioDaemon, node: Crictl, tmp_path: pathlib.Path) -> None:
    crio.write_dropin(SITE, crio_harness.pinned_images_dropin([BETA]))
    crio.reload()
    pinned = pinctl_json(crio, "pin", ALPHA)
    assert [(r["ref"], r["action"], r["namespace"]) for r in pinned["results"]] == [(ALPHA, "pinned", "")]
    dropin = crio.dropin_dir / "zz-pinctl.conf"
    assert ALPHA in dropin.read_text() and BETA in dropin.read_text()
    by_tag = {tag: image.pinned for image in node.images() for tag in image.repo_tags}
    assert by_tag[ALPHA] and by_tag[BETA] and not by_tag[GAMMA]  # the site's item carried over

    again = pinctl_json(crio, "pin", ALPHA)
    assert [r["action"] for r in again["results"]] == ["already-pinned"]

    done = run_pinctl(crio, "unpin", BETA, "-o", "json")
    assert done.returncode == 0, done.stderr
    assert f"{crio.dropin_dir / SITE}:" in done.stderr  # the site keeps it pinned, and says where
    assert {tag: image.pinned for image in node.images() for tag in image.repo_tags}[BETA]

    unpinned = pinctl_json(crio, "unpin", ALPHA)
    assert [r["action"] for r in unpinned["results"]] == ["unpinned"]
    assert not {tag: image.pinned for image in node.images() for tag in image.repo_tags}[ALPHA]

    policy = tmp_path / "pinctl.toml"
    policy.write_text('pinned_images = ["*gamma*"]\n')
    synced = pinctl_json(crio, "sync", config=policy)
    assert (GAMMA, "pinned") in [(r["ref"], r["action"]) for r in synced["results"]]
    tags = {tag: image.pinned for image in node.images() for tag in image.repo_tags}
    assert tags[GAMMA] and tags[BETA] and not tags[ALPHA]
    assert (crio.dropin_dir / SITE).read_text() == crio_harness.pinned_images_dropin([BETA])  # never edited


def test_check_agrees_and_names_a_reload_not_yet_done(crio: CrioDaemon, node: Crictl) -> None:
    agreed = run_pinctl(crio, "check", "-o", "json")
    assert agreed.returncode == 0, agreed.stdout + agreed.stderr
    crio.write_dropin(SITE, crio_harness.pinned_images_dropin([APP_2]))  # not reloaded
    stale = pinctl_json(crio, "check", expect=1)
    (item,) = [item for item in stale["images"] if APP_2 in item["refs"]]
    assert "has not re-read its configuration" in item["cause"]
    assert f"kill -HUP {crio.pid}" in item["fix"]
    crio.reload()
    assert run_pinctl(crio, "check").returncode == 0


def test_check_reports_a_dropin_overriding_pinctls(crio: CrioDaemon, node: Crictl, tmp_path: pathlib.Path) -> None:
    policy = tmp_path / "pinctl.toml"
    policy.write_text(f'pinned_images = ["{APPDB}"]\n')
    pinctl_json(crio, "sync", config=policy)
    crio.write_dropin("zzz-later.conf", crio_harness.pinned_images_dropin([BUSYBOX]))
    crio.reload()
    found = pinctl_json(crio, "check", expect=1, config=policy)
    (item,) = [item for item in found["images"] if APPDB in item["refs"]]
    assert "zzz-later.conf" in item["cause"] and "sorts after pinctl's drop-in" in item["cause"]


def test_export_followed_as_written_keeps_the_sites_pins(crio: CrioDaemon, node: Crictl, tmp_path: pathlib.Path) -> None:
    crio.write_dropin(SITE, crio_harness.pinned_images_dropin([BETA]))
    crio.reload()
    policy = tmp_path / "pinctl.toml"
    policy.write_text(f'pinned_images = ["{APP_1}"]\n')
    exported = run_pinctl(crio, "config", "export", "--for", "crio", config=policy)
    assert exported.returncode == 0, exported.stderr
    crio.write_dropin("zz-export.conf", exported.stdout)
    crio.reload()
    tags = {tag: image.pinned for image in node.images() for tag in image.repo_tags}
    assert tags[APP_1] and tags[BETA]


def test_gc_plan_reads_crio_through_the_cri(crio: CrioDaemon, node: Crictl) -> None:
    plan = run_pinctl(crio, "gc", "plan", "--usage", "95", "-o", "json")
    assert plan.returncode in (0, 1), plan.stderr
    assert "containerd" not in plan.stderr
    document = json.loads(plan.stdout)
    protected = {image["refs"][0] for image in document["gc"]["protected"] if "pinned" in image["reasons"]}
    assert PAUSE_IMAGE in protected


def test_a_wrong_socket_is_one_line_naming_the_cri_endpoint(crio: CrioDaemon, tmp_path: pathlib.Path) -> None:
    done = run_pinctl(crio, "ls", env={"CONTAINER_RUNTIME_ENDPOINT": f"unix://{tmp_path}/nothing.sock"})
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing.sock" in lines[0] and "Traceback" not in done.stderr, done.stderr


def tags_pinned(crictl: Crictl) -> dict[str, bool]:
    return {tag: image.pinned for image in crictl.images() for tag in image.repo_tags}


def test_pin_carries_a_site_file_changed_since_pinctls_last_write(crio: CrioDaemon, node: Crictl) -> None:
    pinctl_json(crio, "pin", ALPHA)
    # The site's new drop-in sorts before pinctl's, which replaces it: it counts once carried over.
    crio.write_dropin(SITE, crio_harness.pinned_images_dropin([GAMMA]))
    crio.reload()
    assert not tags_pinned(node)[GAMMA]
    synced = pinctl_json(crio, "sync", "--allow-empty-policy")
    assert (GAMMA, "pinned") in [(r["ref"], r["action"]) for r in synced["results"]]
    assert tags_pinned(node)[GAMMA] and tags_pinned(node)[ALPHA]


def test_pull_pins_through_the_dropin_and_import_says_crio_cannot(crio: CrioDaemon, node: Crictl,
                                                                  tmp_path: pathlib.Path) -> None:
    pulled = pinctl_json(crio, "pull", "--pin", BETA)
    (item,) = pulled["pulls"]
    assert item["pin"] == "pinned" and item["namespace"] == "", item
    assert tags_pinned(node)[BETA]
    archive = tmp_path / "x.tar"
    archive.write_bytes(b"")
    refused = run_pinctl(crio, "import", str(archive))
    assert refused.returncode == 2
    assert "CRI-O" in refused.stderr and "containerd" not in refused.stderr and len(refused.stderr.splitlines()) <= 4


def test_sync_watch_rewrites_pinctls_dropin_when_another_changes(crio: CrioDaemon, node: Crictl,
                                                                 tmp_path: pathlib.Path) -> None:
    policy = tmp_path / "pinctl.toml"
    policy.write_text(f'pinned_images = ["{APP_2}"]\n')
    env = {key: value for key, value in os.environ.items() if key not in ("CONTAINERD_ADDRESS", "DOCKER_HOST")}
    env.update({"CONTAINER_RUNTIME_ENDPOINT": crio.endpoint, "PINCTL_CONFIG": str(policy)})
    watcher = subprocess.Popen([sys.executable, "-m", "pinctl", "sync", "--watch"], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: tags_pinned(node)[APP_2], "the policy's image pinned")
        crio.write_dropin(SITE, crio_harness.pinned_images_dropin([FEDORA]))
        wait_until(lambda: tags_pinned(node)[FEDORA], "the site's new item carried over and CRI-O reloaded")
        assert tags_pinned(node)[APP_2]
    finally:
        watcher.terminate()
        log, _ = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, log
    assert "containerd" not in log and "CRI-O's configuration changed" in log, log


def wait_until(done: Any, what: str, timeout: float = 90.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        time.sleep(0.2)

"""The CRI-O harness against the real CRI-O v1.34.0: its CRI, pulls from the loopback registry,
``pinned_images`` from drop-ins applied on SIGHUP, its pause image pin, and that it stays inside
its own directories.

One daemon for the session (``crio``); each test starts from an empty drop-in directory,
reloaded, with the images it needs pulled through the CRI.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest

from tests.harness import crio as crio_harness
from tests.harness.crictl import Crictl, by_tag
from tests.harness.registry import Registry
from tests.harness.crio import PAUSE_IMAGE, CrioDaemon
from tests.harness.crio_fixtures import CRIO_TEST_IMAGES, pull, wait_for_pinned

ALPHA, BETA, GAMMA = CRIO_TEST_IMAGES


@pytest.fixture(scope="module")
def pulled(crio: CrioDaemon, crio_crictl: Crictl) -> tuple[str, ...]:
    """The pause image and the test images, pulled through the CRI once for the module."""
    names = (PAUSE_IMAGE, *CRIO_TEST_IMAGES)
    pull(crio_crictl, names)
    return names


@pytest.fixture
def node(crio: CrioDaemon, crio_crictl: Crictl, pulled: tuple[str, ...]) -> Iterator[Crictl]:
    """crictl on the session's CRI-O with no drop-ins (reloaded); drop-ins removed again after."""
    crio.remove_dropins()
    crio.reload()
    yield crio_crictl
    crio.remove_dropins()
    crio.reload()


def test_version_names_cri_o_1_34(crio: CrioDaemon, crio_crictl: Crictl) -> None:
    version, name, runtime_version = crio.version()
    assert (version, name, runtime_version) == ("0.1.0", "cri-o", "1.34.0")
    fields = crio_crictl.version()
    assert fields["RuntimeName"] == "cri-o"
    assert fields["RuntimeVersion"] == "1.34.0"


def test_pid_is_crio_itself(crio: CrioDaemon) -> None:
    # The SIGHUP of reload() must reach crio, not a wrapper: setpriv, unshare and sh exec into it.
    assert crio.pid is not None
    assert pathlib.Path(os.readlink(f"/proc/{crio.pid}/exe")) == crio.binary.resolve()
    # ... and it runs in a mount namespace of its own.
    assert os.readlink(f"/proc/{crio.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")


def test_pulled_images_are_listed(node: Crictl, pulled: tuple[str, ...]) -> None:
    listed = by_tag(node.images())
    assert set(pulled) <= set(listed)
    for name in pulled:
        assert listed[name].id
        repo = name.rsplit(":", 1)[0]
        assert any(digest.startswith(f"{repo}@sha256:") for digest in listed[name].repo_digests), listed[name].raw


def test_only_the_pause_image_is_pinned_without_dropins(node: Crictl) -> None:
    wait_for_pinned(node, {PAUSE_IMAGE})


def test_dropin_pins_exactly_its_images(crio: CrioDaemon, node: Crictl) -> None:
    crio.write_dropin("10-pins.conf", crio_harness.pinned_images_dropin([ALPHA, GAMMA]))
    crio.reload()
    wait_for_pinned(node, {ALPHA, GAMMA, PAUSE_IMAGE})
    # Removing the drop-in and reloading unpins them again (not the pause image).
    crio.remove_dropins()
    crio.reload()
    wait_for_pinned(node, {PAUSE_IMAGE})


def test_changed_dropin_needs_a_reload(crio: CrioDaemon, node: Crictl) -> None:
    crio.write_dropin("10-pins.conf", crio_harness.pinned_images_dropin([ALPHA]))
    crio.reload()
    wait_for_pinned(node, {ALPHA, PAUSE_IMAGE})
    crio.write_dropin("10-pins.conf", crio_harness.pinned_images_dropin([BETA]))
    # Not re-read by itself: still the old pins (a bounded look, not a wait for a change).
    assert {image for image in _pinned_now(node)} == {ALPHA, PAUSE_IMAGE}
    crio.reload()
    wait_for_pinned(node, {BETA, PAUSE_IMAGE})


def test_later_sorting_dropin_overrides(crio: CrioDaemon, node: Crictl) -> None:
    crio.write_dropin("10-first.conf", crio_harness.pinned_images_dropin([ALPHA]))
    crio.write_dropin("20-second.conf", crio_harness.pinned_images_dropin([BETA]))
    crio.reload()
    wait_for_pinned(node, {BETA, PAUSE_IMAGE})
    # A later drop-in that does not set the key leaves the earlier value alone.
    crio.write_dropin("30-other.conf", '[crio.runtime]\nlog_level = "info"\n')
    crio.reload()
    wait_for_pinned(node, {BETA, PAUSE_IMAGE})


def test_subdirectory_dropins_sort_by_their_path(crio: CrioDaemon, node: Crictl) -> None:
    # filepath.Walk: 10-first.conf, 15.d/x.conf, 20-second.conf; 15.d is read where it sorts.
    crio.write_dropin("10-first.conf", crio_harness.pinned_images_dropin([ALPHA]))
    crio.write_dropin("15.d/x.conf", crio_harness.pinned_images_dropin([GAMMA]))
    crio.reload()
    wait_for_pinned(node, {GAMMA, PAUSE_IMAGE})
    crio.write_dropin("20-second.conf", crio_harness.pinned_images_dropin([BETA]))
    crio.reload()
    wait_for_pinned(node, {BETA, PAUSE_IMAGE})
    # Any file name counts, not only *.conf.
    crio.write_dropin("90-no-suffix", crio_harness.pinned_images_dropin([ALPHA]))
    crio.reload()
    wait_for_pinned(node, {ALPHA, PAUSE_IMAGE})


def test_empty_and_blank_patterns_pin_nothing(crio: CrioDaemon, node: Crictl) -> None:
    crio.write_dropin("10-blank.conf", crio_harness.pinned_images_dropin(["", " "]))
    crio.reload()
    wait_for_pinned(node, {PAUSE_IMAGE})


def test_image_id_pattern_pins_nothing(crio: CrioDaemon, node: Crictl) -> None:
    # Patterns match an image's names only, never its ID.
    image = by_tag(node.images())[ALPHA]
    bare = image.id.removeprefix("sha256:")
    crio.write_dropin("10-id.conf", crio_harness.pinned_images_dropin([f"sha256:{bare}", bare]))
    crio.reload()
    wait_for_pinned(node, {PAUSE_IMAGE})


def test_glob_and_keyword_patterns(crio: CrioDaemon, node: Crictl) -> None:
    # A trailing "*" is a prefix glob; "*...*" a keyword, case-insensitive.
    crio.write_dropin("10-glob.conf", crio_harness.pinned_images_dropin([ALPHA.rsplit("-", 1)[0] + "-be*", "*GAMMA*"]))
    crio.reload()
    wait_for_pinned(node, {BETA, GAMMA, PAUSE_IMAGE})


def test_patterns_match_tags_only_unanchored_and_case_insensitive(crio: CrioDaemon, node: Crictl) -> None:
    # A glob is not anchored at the start: "pinctl-test/crio-alpha*" pins docker.io/pinctl-test/...
    without_domain = ALPHA.split("/", 1)[1].rsplit(":", 1)[0] + "*"
    crio.write_dropin("10-glob.conf", crio_harness.pinned_images_dropin([without_domain]))
    crio.reload()
    wait_for_pinned(node, {ALPHA, PAUSE_IMAGE})
    # An exact name is anchored at both ends (the bare "name:tag" pins nothing), but case-insensitive.
    crio.write_dropin("10-glob.conf", crio_harness.pinned_images_dropin([ALPHA.split("/")[-1], BETA.upper()]))
    crio.reload()
    wait_for_pinned(node, {BETA, PAUSE_IMAGE})
    # The digested name crictl shows is not among the names matched.
    digested = by_tag(node.images())[GAMMA].repo_digests[0]
    crio.write_dropin("10-glob.conf", crio_harness.pinned_images_dropin([digested, f"*{digested.split('@')[1]}*"]))
    crio.reload()
    wait_for_pinned(node, {PAUSE_IMAGE})
    # "**", an empty keyword, pins everything (other modules share the daemon and add images).
    crio.write_dropin("10-glob.conf", crio_harness.pinned_images_dropin(["**"]))
    crio.reload()
    wait_for_pinned(node, {tag for image in node.images() for tag in image.repo_tags})


def test_unparsable_dropin_keeps_the_old_pins(crio: CrioDaemon, node: Crictl) -> None:
    crio.write_dropin("10-pins.conf", crio_harness.pinned_images_dropin([ALPHA]))
    crio.reload()
    wait_for_pinned(node, {ALPHA, PAUSE_IMAGE})
    crio.write_dropin("20-broken.conf", "[crio.image]\npinned_images = [\n")
    with pytest.raises(crio_harness.CrioError, match="refused the reload"):
        crio.reload()
    assert crio.is_alive()
    wait_for_pinned(node, {ALPHA, PAUSE_IMAGE})


def test_a_lone_star_pattern_crashes_crio(
    crio: CrioDaemon, crio_registry: Registry, crio_crictl: Crictl, tmp_path: pathlib.Path
) -> None:
    # "*" is taken as "*...*" with nothing between: CompileRegexpsForPinnedImages slices
    # pattern[1:0] and panics, in the reload goroutine, so the whole daemon exits. A daemon
    # of its own, so the session's survives.
    own = CrioDaemon(tmp_path / "crio", crio_registry.host).start()
    try:
        own.write_dropin("10-star.conf", crio_harness.pinned_images_dropin(["*"]))
        with pytest.raises(crio_harness.CrioError):
            own.reload()
        assert own.wait_exited(), own.log_tail()
        assert "slice bounds out of range" in own.log_text()
    finally:
        own.stop()


def test_pause_image_stays_pinned_across_reloads(crio: CrioDaemon, node: Crictl) -> None:
    crio.write_dropin("10-pins.conf", crio_harness.pinned_images_dropin([ALPHA]))
    crio.reload()
    crio.reload()
    wait_for_pinned(node, {ALPHA, PAUSE_IMAGE})
    assert by_tag(node.images())[PAUSE_IMAGE].pinned


def test_nothing_written_outside_its_directories(crio: CrioDaemon, node: Crictl) -> None:
    # crio has pulled, listed and reloaded by now (and pulls once more here).
    pull(node, [GAMMA])
    assert crio.host_before, "the snapshot is taken before crio starts"
    assert crio_harness.host_snapshot() == crio.host_before
    # What it did write is in its own tree: the blob-info cache went to the private /var/lib.
    assert (crio.host_dir / "var-lib" / "containers" / "cache" / "blob-info-cache-v1.sqlite").is_file()


def _pinned_now(crictl: Crictl) -> set[str]:
    return {tag for image in crictl.images() if image.pinned for tag in image.repo_tags}

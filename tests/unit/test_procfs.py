"""What pinctl reads of other processes: flags as Go programs take them, and cri-dockerd's own words."""

from __future__ import annotations

import os

import pytest

from pinctl.backends import cri_dockerd, procfs


@pytest.mark.parametrize(("argv", "flags"), [
    (["cri-dockerd", "--pinned-images=a:1,b", "--pinned-images", "c*"], {"--pinned-images": "a:1,b,c*"}),
    (["pinctl", "cri-proxy", "-r", "unix:///run/x.sock", "--listen", "/run/p.sock"],
     {"-r": "unix:///run/x.sock", "--listen": "/run/p.sock"}),
    (["kubelet", "--v", "--config=/etc/k.yaml"], {"--v": "true", "--config": "/etc/k.yaml"}),
])
def test_flags_are_read_in_both_forms(argv: list[str], flags: dict[str, str]) -> None:
    assert procfs.parse_flags(argv) == flags


def test_a_socket_path_is_the_same_with_or_without_its_scheme() -> None:
    assert procfs.socket_path("unix:///run/a.sock") == procfs.socket_path("/run/a.sock") == "/run/a.sock"


def test_this_process_is_found_and_started_before_now() -> None:
    me = os.getpid()
    assert me in procfs.pids() and procfs.cmdline(me)
    started = procfs.started_at(me)
    assert started is not None and started.timestamp() > 0
    assert procfs.socket_owner("/nonexistent/pinctl-test.sock") is None


def test_a_start_time_is_read_to_the_clock_tick_not_the_second() -> None:
    # btime alone is whole seconds: gc plan compares the kubelet's start with image records.
    import subprocess
    import time

    before = time.time()
    child = subprocess.Popen(["sleep", "5"])
    try:
        started = procfs.started_at(child.pid)
    finally:
        child.kill()
        child.wait()
    assert started is not None and abs(started.timestamp() - before) < 0.1


@pytest.mark.parametrize(("text", "version"), [
    ("cri-dockerd 0.4.3 (4b5e6fd)\n", "0.4.3"),
    ("cri-dockerd v0.4.10 (HEAD)", "0.4.10"),
    ("cri-dockerd dev (HEAD)", ""),
    ("", ""),
])
def test_cri_dockerd_says_its_release(text: str, version: str) -> None:
    assert cri_dockerd.parse_version(text) == version


def test_what_a_cri_dockerd_can_pin_follows_its_release_or_its_help() -> None:
    old_help = "Flags:\n      --docker-endpoint string\n      --pod-infra-container-image string\n"
    new_help = old_help + "      --pinned-images strings\n      --pinned-image-labels strings\n"
    old = cri_dockerd.describe_process(7, ["cri-dockerd", "--pod-infra-container-image", "x/pause:1"], "0.4.3", old_help)
    assert old.has_selectors is False and old.sandbox_image == "x/pause:1" and old.describe() == "cri-dockerd 0.4.3"
    dev = cri_dockerd.describe_process(8, ["cri-dockerd", "--pinned-images=a:1"], "", new_help)
    assert dev.has_selectors is True and dev.pinned_images == ("a:1",) and dev.describe() == "cri-dockerd"
    unknown = cri_dockerd.describe_process(9, ["cri-dockerd"], "0.4.9", "")
    assert unknown.has_selectors is True  # no help text: the release decides
    assert cri_dockerd.describe_process(9, ["cri-dockerd"], "", "").has_selectors is None

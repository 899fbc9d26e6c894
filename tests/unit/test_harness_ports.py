"""The harness's port picker: below the ephemeral range, free, and never handed out twice."""

from __future__ import annotations

import pathlib
import socket

from tests.harness import ports


def test_ports_are_free_below_the_ephemeral_range_and_distinct() -> None:
    low = ports.ephemeral_low()
    picked = [ports.free_port() for _ in range(50)]
    assert len(set(picked)) == len(picked)
    assert all(max(1024, low - ports.SPAN) <= port < low for port in picked)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", picked[0]))  # free, as said


def test_a_port_taken_meanwhile_is_not_handed_out(tmp_path: pathlib.Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        assert not ports._bindable("127.0.0.1", taken)


def test_the_range_is_read_from_the_kernels_setting(tmp_path: pathlib.Path) -> None:
    setting = tmp_path / "ip_local_port_range"
    setting.write_text("40000\t60999\n")
    assert ports.ephemeral_low(str(setting)) == 40000
    assert ports.ephemeral_low(str(tmp_path / "absent")) == 32768

"""Reading dockerd's HTTP answers and Docker hosts (pure logic); the exchanges themselves run
against real dockerd in tests/integration/test_docker.py."""

from __future__ import annotations

import socket

import pytest

from pinctl.backends.docker import _refusal_text, _Wire, parse_answer
from pinctl.errors import UsageError


def test_an_answer_read_to_its_end() -> None:
    data = b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n[{"Id":"sha256:1"}]\n'
    assert parse_answer(data) == (200, b'[{"Id":"sha256:1"}]\n')


def test_content_length_bounds_the_body_and_a_short_body_is_refused() -> None:
    assert parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]trailing") == (200, b"[]")
    with pytest.raises(ValueError, match="cut short"):
        parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n[]")


def test_a_chunked_answer_is_joined() -> None:
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n[{}\r\n1;x=y\r\n]\r\n0\r\n\r\n"
    assert parse_answer(data) == (200, b"[{}]")
    with pytest.raises(ValueError, match="cut short"):
        parse_answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n[{}")


@pytest.mark.parametrize("data", [b"", b"SSH-2.0-OpenSSH_9.2\r\n", b"HTTP/1.0 200 OK\r\nno end of headers"])
def test_what_is_not_http_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        parse_answer(data)


def test_a_refusal_in_dockerds_words() -> None:
    assert _refusal_text(409, b'{"message":"conflict: unable to delete 1a2b (cannot be forced)"}\n') == \
        "conflict: unable to delete 1a2b (cannot be forced) (HTTP 409)"
    assert _refusal_text(500, b"") == "no reason given (HTTP 500)"
    assert _refusal_text(502, b"bad gateway\nmore") == "bad gateway (HTTP 502)"


@pytest.mark.parametrize(("host", "family", "address"), [
    ("unix:///run/docker.sock", socket.AF_UNIX, "/run/docker.sock"),
    ("tcp://example.test:2376", socket.AF_INET, ("example.test", 2376)),
    ("tcp://example.test", socket.AF_INET, ("example.test", 2375)),
    ("http://[::1]:2375", socket.AF_INET, ("::1", 2375)),
])
def test_hosts_pinctl_reaches(host: str, family: int, address: object) -> None:
    wire = _Wire.to(host, 2.0)
    assert (wire.family, wire.address) == (family, address)


@pytest.mark.parametrize("host", ["ssh://admin@example.test", "npipe:////./pipe/docker_engine", "unix://",
                                  "tcp://example.test:port"])
def test_other_hosts_get_one_line_naming_the_fix(host: str) -> None:
    with pytest.raises(UsageError) as refused:
        _Wire.to(host, 2.0)
    assert host in refused.value.message and "DOCKER_HOST" in refused.value.hint

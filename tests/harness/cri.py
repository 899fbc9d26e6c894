"""A tiny, dependency-free CRI client: just enough to ask what the kubelet sees.

Debian ships no crictl and the test environment has no grpcio, so this speaks
gRPC's wire format directly: HTTP/2 with prior knowledge over the unix socket,
one unary call per connection, hand-decoded protobuf. It only needs to read
``ListImages`` (id, tags, digests, size, pinned), the field the kubelet's image
GC honours.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
import time
from collections.abc import Callable, Iterable

# The only containerd namespace the CRI plugin (and so the kubelet) looks at.
NAMESPACE = "k8s.io"
LIST_IMAGES = "/runtime.v1.ImageService/ListImages"
CALL_TIMEOUT_S = 30.0

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
_END_STREAM, _ACK, _END_HEADERS, _PADDED = 0x1, 0x1, 0x4, 0x8
_STREAM = 1
_MAX_WINDOW = 2**31 - 1
_DEFAULT_WINDOW = 65535


class CriError(RuntimeError):
    """The CRI call failed or returned something unreadable."""


@dataclasses.dataclass(frozen=True)
class CriImage:
    """The fields of ``runtime.v1.Image`` the harness cares about."""

    id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    size: int
    pinned: bool


def list_images(address: str) -> list[CriImage]:
    """``ListImages`` against the CRI plugin listening on ``address`` (a unix socket path)."""
    payload = unary_call(address, LIST_IMAGES, b"")
    return [_decode_image(raw) for field, raw in _fields(payload) if field == 1 and isinstance(raw, bytes)]


def wait_for(
    address: str, predicate: Callable[[list[CriImage]], bool], timeout: float = 30.0
) -> list[CriImage]:
    """Poll ``ListImages`` until ``predicate`` holds.

    The CRI plugin learns about image changes from containerd events, so it
    lags behind ``ctr`` by a few milliseconds to seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        listed = list_images(address)
        if predicate(listed):
            return listed
        if time.monotonic() > deadline:
            raise CriError(f"CRI image list did not settle in {timeout}s: {listed[:20]}")
        time.sleep(0.05)


def wait_for_refs(address: str, refs: Iterable[str], timeout: float = 60.0) -> list[CriImage]:
    """Wait until every ref appears among the CRI's repo tags."""
    wanted = set(refs)
    return wait_for(address, lambda imgs: wanted <= {t for i in imgs for t in i.repo_tags}, timeout)


def by_tag(listed: Iterable[CriImage]) -> dict[str, CriImage]:
    """Index a ``ListImages`` result by each repo tag."""
    return {tag: image for image in listed for tag in image.repo_tags}


def unary_call(address: str, method: str, request: bytes) -> bytes:
    """Send one gRPC request; return the response message bytes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(CALL_TIMEOUT_S)
        sock.connect(address)
        sock.sendall(_request_bytes(method, request))
        body = _read_response(sock)
    if len(body) < 5:
        # grpc-status sits in HPACK-compressed trailers we do not decode.
        raise CriError(f"{method}: no response message (call failed on the server)")
    compressed, length = struct.unpack(">BI", body[:5])
    if compressed:
        raise CriError(f"{method}: compressed responses are not supported")
    return body[5 : 5 + length]


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream) + payload


def _hpack_literal(name: str, value: str) -> bytes:
    # "Literal without indexing, new name", no Huffman: lengths must fit 7 bits.
    n, v = name.encode(), value.encode()
    if len(n) > 126 or len(v) > 126:
        raise CriError(f"header too long for this encoder: {name}")
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def _request_bytes(method: str, request: bytes) -> bytes:
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", method),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    block = b"".join(_hpack_literal(n, v) for n, v in headers)
    # A huge window up front means we never have to send WINDOW_UPDATEs.
    settings = struct.pack(">HI", 0x2, 0) + struct.pack(">HI", 0x4, _MAX_WINDOW)
    window = struct.pack(">I", _MAX_WINDOW - _DEFAULT_WINDOW)
    message = struct.pack(">BI", 0, len(request)) + request
    return b"".join(
        [
            _PREFACE,
            _frame(_SETTINGS, 0, 0, settings),
            _frame(0x8, 0, 0, window),
            _frame(_HEADERS, _END_HEADERS, _STREAM, block),
            _frame(_DATA, _END_STREAM, _STREAM, message),
        ]
    )


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise CriError("connection closed mid-response")
        chunks += chunk
    return bytes(chunks)


def _read_response(sock: socket.socket) -> bytes:
    """Collect stream 1's DATA until END_STREAM, answering SETTINGS and PING."""
    body = bytearray()
    while True:
        header = _recv_exact(sock, 9)
        length = int.from_bytes(header[:3], "big")
        kind, flags, stream = struct.unpack(">BBI", header[3:])
        payload = _recv_exact(sock, length)
        stream &= 0x7FFFFFFF
        if kind == _SETTINGS and not flags & _ACK:
            sock.sendall(_frame(_SETTINGS, _ACK, 0, b""))
        elif kind == _PING and not flags & _ACK:
            sock.sendall(_frame(_PING, _ACK, 0, payload))
        elif kind in (_RST_STREAM, _GOAWAY) and stream in (0, _STREAM):
            raise CriError(f"server ended the call (frame type {kind}, payload {payload.hex()})")
        elif kind == _DATA and stream == _STREAM:
            body += _strip_padding(payload, flags)
        if stream == _STREAM and kind in (_DATA, _HEADERS) and flags & _END_STREAM:
            return bytes(body)


def _strip_padding(payload: bytes, flags: int) -> bytes:
    if not flags & _PADDED:
        return payload
    pad = payload[0]
    return payload[1 : len(payload) - pad]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """Top-level protobuf fields as (number, int-or-bytes); fixed-width fields are skipped."""
    pos = 0
    result: list[tuple[int, int | bytes]] = []
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            result.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            result.append((number, data[pos : pos + length]))
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise CriError(f"unsupported protobuf wire type {wire}")
    return result


def _decode_image(raw: bytes) -> CriImage:
    strings: dict[int, list[str]] = {1: [], 2: [], 3: []}
    ints: dict[int, int] = {}
    for number, value in _fields(raw):
        if isinstance(value, bytes) and number in strings:
            strings[number].append(value.decode())
        elif isinstance(value, int):
            ints[number] = value
    return CriImage(
        id=strings[1][0] if strings[1] else "",
        repo_tags=tuple(strings[2]),
        repo_digests=tuple(strings[3]),
        size=ints.get(4, 0),
        pinned=bool(ints.get(8, 0)),
    )

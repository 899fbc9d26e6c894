"""A tiny CRI client for checking results: just enough to ask what the kubelet sees.

Debian ships no crictl. grpcio carries the call; the reply is decoded here by field number,
independently of pinctl's own .proto files, so a wrong field number there cannot hide in a
test that reads through the same definitions. It reads ``ListImages`` (id, tags, digests,
size, and ``pinned``, the field the kubelet's image GC honours).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable

from tests.harness import protowire

# The only containerd namespace the CRI plugin (and so the kubelet) looks at.
NAMESPACE = "k8s.io"
LIST_IMAGES = "/runtime.v1.ImageService/ListImages"
CALL_TIMEOUT_S = 30.0


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
    return [_decode_image(raw) for field, raw in protowire.decode(payload) if field == 1 and isinstance(raw, bytes)]


def wait_for(
    address: str, predicate: Callable[[list[CriImage]], bool], timeout: float = 30.0
) -> list[CriImage]:
    """Poll ``ListImages`` until ``predicate`` holds.

    The CRI plugin learns about image changes from containerd events, so it
    lags behind ``ctr`` by a few milliseconds to seconds; a CRI not yet serving is waited for too.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            listed = list_images(address)
        except CriError as exc:
            # containerd 2.x answers before its CRI has initialized ("server is not initialized
            # yet"), longer so on a busy machine: not yet, rather than a failure.
            if "UNAVAILABLE" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
            continue
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
    """Send one gRPC request with raw bytes; return the raw response message."""
    import grpc

    with grpc.insecure_channel(f"unix://{address}") as channel:
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        try:
            reply: bytes = call(request, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as err:
            raise CriError(f"{method}: {err.code().name}: {err.details()}") from None
    return reply


def _decode_image(raw: bytes) -> CriImage:
    strings: dict[int, list[str]] = {1: [], 2: [], 3: []}
    ints: dict[int, int] = {}
    for number, value in protowire.decode(raw):
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

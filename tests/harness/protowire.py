"""Protocol Buffers wire format by field number, for the harness's CRI calls.

The harness talks to the CRI without pinctl's .proto files (and without any generated code),
so a wrong field number in pinctl cannot hide behind the same mistake here. Requests are
written as nested lists of ``(field number, value)`` and replies are read back the same way;
the numbers are transcribed, with their message names, in ``tests/harness/cri_pods.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

# A field's value: an int (varint), text or bytes (length-delimited), or a nested message.
Value = Union[int, bool, str, bytes, "Message"]
Message = Sequence[tuple[int, Value]]


class WireError(ValueError):
    """Bytes that are not a protobuf message this module can read."""


def encode(message: Message) -> bytes:
    """Serialise ``[(number, value), ...]``; repeat a number for a repeated field."""
    out = bytearray()
    for number, value in message:
        if isinstance(value, bool) or isinstance(value, int):
            out += _varint(number << 3) + _varint(_as_uint64(int(value)))
        else:
            payload = value.encode() if isinstance(value, str) else value if isinstance(value, bytes) else encode(value)
            out += _varint(number << 3 | 2) + _varint(len(payload)) + payload
    return bytes(out)



def decode(data: bytes) -> list[tuple[int, int | bytes]]:
    """Top-level fields as (number, int-or-bytes); fixed-width fields come back as bytes."""
    pos = 0
    fields: list[tuple[int, int | bytes]] = []
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            fields.append((number, value))
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            fields.append((number, data[pos : pos + length]))
            pos += length
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            fields.append((number, data[pos : pos + width]))
            pos += width
        else:
            raise WireError(f"unsupported protobuf wire type {wire} for field {number}")
    if pos != len(data):
        raise WireError("truncated protobuf message")
    return fields


class Reader:
    """Field access on one decoded message: ``Reader(raw).text(1)``, ``.message(2).integer(1)``."""

    def __init__(self, raw: bytes) -> None:
        self.fields = decode(raw)

    def all_bytes(self, number: int) -> list[bytes]:
        return [value for field, value in self.fields if field == number and isinstance(value, bytes)]

    def text(self, number: int) -> str:
        found = self.all_bytes(number)
        return found[-1].decode() if found else ""

    def texts(self, number: int) -> list[str]:
        return [value.decode() for value in self.all_bytes(number)]

    def integer(self, number: int) -> int:
        found = [value for field, value in self.fields if field == number and isinstance(value, int)]
        return _as_int64(found[-1]) if found else 0

    def message(self, number: int) -> Reader:
        found = self.all_bytes(number)
        return Reader(found[-1] if found else b"")

    def messages(self, number: int) -> list[Reader]:
        return [Reader(raw) for raw in self.all_bytes(number)]


def _as_uint64(value: int) -> int:
    # Negative int64 values travel as their two's complement, ten bytes long.
    return value & (2**64 - 1) if value < 0 else value


def _as_int64(value: int) -> int:
    return value - 2**64 if value >= 2**63 else value


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise WireError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


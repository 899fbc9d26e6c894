"""What a long-running service tells monitoring besides its own counters: the CRI runtime it
works with (the info metric) and a health answer (/healthz, /readyz). Plain data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Runtime:
    """The CRI runtime as it names itself, for the info metric."""

    name: str
    version: str


@dataclass(frozen=True)
class Verdict:
    """An answer of /healthz or /readyz: whether all is well, and why, in one line."""

    ok: bool
    reason: str

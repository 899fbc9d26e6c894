"""How pinctl waits on gRPC calls at scale: a window of calls in flight, and a listing awaited
while the engine still answers (backends/_grpc.py). Fake futures; the real daemon's side is
tests/integration/test_slow_engine.py."""

from __future__ import annotations

from typing import Any, Optional

import grpc
import pytest

from pinctl.backends import _grpc


class FakeCall:
    """A future that times out `misses` times, then answers (or raises `error`)."""

    def __init__(self, misses: int = 0, error: Optional[grpc.RpcError] = None, answer: Any = "answer") -> None:
        self.misses, self.error, self.answer = misses, error, answer
        self.cancelled = False

    def result(self, timeout: Optional[float] = None) -> Any:
        if self.misses:
            self.misses -= 1
            raise grpc.FutureTimeoutError()
        if self.error is not None:
            raise self.error
        return self.answer

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class Deadline(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED


def failed(err: Any, waited: float) -> Exception:
    return RuntimeError(f"no answer within {waited:g}s")


def test_a_window_never_has_more_calls_in_flight_than_its_size() -> None:
    started: list[int] = []
    finished: list[int] = []
    most = 0
    def start(i: int) -> FakeCall:
        started.append(i)
        return FakeCall(answer=i)

    for item, call in _grpc.in_window(range(100), start, size=8):
        most = max(most, len(started) - len(finished))
        assert call.result() == item
        finished.append(item)
    assert finished == list(range(100)) and most == 8


def test_calls_in_flight_are_cancelled_when_the_caller_stops_early() -> None:
    calls: list[FakeCall] = []

    def start(_i: int) -> FakeCall:
        calls.append(FakeCall())
        return calls[-1]

    window = _grpc.in_window(range(100), start, size=8)
    next(window)
    window.close()  # type: ignore[attr-defined]  # a generator, typed as the Iterator it is used as
    assert len(calls) == 8 and [c.cancelled for c in calls] == [False] + [True] * 7


def test_a_slow_listing_is_awaited_while_the_probe_answers() -> None:
    answer, probes = FakeCall(misses=5, answer="records"), list[FakeCall]()
    deadlines: list[float] = []

    def start(deadline: float) -> FakeCall:
        deadlines.append(deadline)
        return answer

    def probe() -> FakeCall:
        probes.append(FakeCall())
        return probes[-1]

    found = _grpc.listing(start, probe, 2.0, failed)
    assert found == "records" and len(probes) == 6 and all(p.cancelled for p in probes)
    assert deadlines == [2.0 * _grpc.PATIENCE]


def test_a_listing_whose_probe_goes_unanswered_fails_after_one_timeout() -> None:
    answer = FakeCall(misses=100)
    with pytest.raises(RuntimeError, match="within 2s"):
        _grpc.listing(lambda _d: answer, lambda: FakeCall(error=Deadline()), 2.0, failed)
    assert answer.cancelled


def test_a_listing_that_outlasts_its_patience_names_the_whole_wait() -> None:
    with pytest.raises(RuntimeError, match=f"within {2 * _grpc.PATIENCE}s"):
        _grpc.listing(lambda _d: FakeCall(error=Deadline()), FakeCall, 2.0, failed)


def test_the_listing_deadline_stays_within_what_grpc_accepts() -> None:
    deadlines: list[float] = []

    def start(deadline: float) -> FakeCall:
        deadlines.append(deadline)
        return FakeCall()

    _grpc.listing(start, FakeCall, 86400.0, failed)
    assert deadlines == [86400.0]  # a day: beyond it gRPC's deadline overflows

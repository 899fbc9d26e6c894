"""check --wait's polling loop, on a fake clock: when it stops, what it reports, how it sleeps."""

from __future__ import annotations

from pinctl.backends.cri import RuntimeVersion
from pinctl.check.compare import POLL_SECONDS, CheckItem, CheckResult, wait_for_agreement


class FakeClock:
    def __init__(self) -> None:
        self.time = 100.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.time

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.time += seconds


def result(disagreeing: int) -> CheckResult:
    items = [CheckItem(f"sha256:{i}", [f"example.test/app:{i}"], True, False, cause="lagging") for i in range(disagreeing)]
    items.append(CheckItem("sha256:ok", ["example.test/ok:1"], True, True))
    return CheckResult("unix:///x", RuntimeVersion("containerd", "1.7.24", "v1"), items)


class Runtime:
    """Disagrees on fewer images at each read; each read takes read_seconds of the clock."""

    def __init__(self, clock: FakeClock, disagreements: list[int], read_seconds: float = 0.2) -> None:
        self.clock = clock
        self.disagreements = disagreements
        self.read_seconds = read_seconds
        self.reads = 0

    def read(self) -> CheckResult:
        self.clock.time += self.read_seconds
        count = self.disagreements[min(self.reads, len(self.disagreements) - 1)]
        self.reads += 1
        return result(count)


def test_stops_as_soon_as_they_agree_and_says_how_long_it_took() -> None:
    clock = FakeClock()
    runtime = Runtime(clock, [2, 1, 0])
    heard: list[tuple[int, float]] = []
    final, waited = wait_for_agreement(runtime.read, 30, clock,
                                       lambda r, left: heard.append((sum(not i.agrees for i in r.items), left)))
    assert final.agree and runtime.reads == 3
    assert clock.sleeps == [POLL_SECONDS, POLL_SECONDS]
    assert abs(waited - (3 * 0.2 + 2 * POLL_SECONDS)) < 1e-9
    assert [count for count, _ in heard] == [2, 1]
    assert abs(heard[0][1] - 29.8) < 1e-9 and heard[1][1] < heard[0][1]


def test_gives_up_at_the_deadline_with_the_last_result() -> None:
    clock = FakeClock()
    runtime = Runtime(clock, [1])
    final, waited = wait_for_agreement(runtime.read, 2.5, clock)
    assert not final.agree
    assert abs(waited - 2.5) < 0.2 + 1e-9  # never more than one read past the deadline
    assert all(s <= POLL_SECONDS for s in clock.sleeps) and abs(sum(clock.sleeps) + 0.2 * runtime.reads - waited) < 1e-9


def test_without_a_wait_it_reads_once_and_never_sleeps() -> None:
    clock = FakeClock()
    runtime = Runtime(clock, [3])
    heard: list[float] = []
    final, waited = wait_for_agreement(runtime.read, 0, clock, lambda _r, left: heard.append(left))
    assert runtime.reads == 1 and clock.sleeps == [] and heard == []
    assert not final.agree and abs(waited - 0.2) < 1e-9

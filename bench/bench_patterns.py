"""Pattern matching benchmark: Matcher(1,000 patterns) over 10,000 names beside the naive double loop.

Run from the repository root:  .venv/bin/python -m bench.bench_patterns [--patterns 1000] [--names 10000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from typing import Callable

from bench.common import Row, report, timed
from pinctl.pins.patterns import Matcher, Pattern, matches, parse_pattern

GOAL_SECONDS = 0.5
PEER_SAMPLE = 100
SEED = 20240611


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patterns", type=int, default=1000)
    parser.add_argument("--names", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    rng = random.Random(SEED)
    names = make_names(rng, opts.names)
    patterns = make_patterns(rng, names, opts.patterns)
    print(report([bench_matcher(patterns, names, opts.repeat)]))
    return 0


def make_names(rng: random.Random, count: int) -> list[str]:
    """Fully qualified names of about 50 characters, spread over a few registries and teams."""
    names = []
    for number in range(count):
        host = f"registry{rng.randrange(8)}.example" + (":5000" if rng.random() < 0.2 else "")
        repo = f"team{rng.randrange(40)}/service-{rng.randrange(400):03d}-{rng.choice(['api', 'worker', 'web', 'cron'])}"
        names.append(f"{host}/{repo}:v{rng.randrange(20)}.{rng.randrange(10)}.{number}")
    return names


def make_patterns(rng: random.Random, names: list[str], count: int) -> list[Pattern]:
    """A third each of exact names (some absent), prefix globs and keywords, in the pinctl dialect."""
    makers: list[Callable[[], str]] = [
        lambda: rng.choice(names) if rng.random() < 0.8 else f"registry.example/absent/app:{rng.randrange(10**6)}",
        lambda: rng.choice(names).rsplit("/", 1)[0] + "/*",
        lambda: f"*service-{rng.randrange(400):03d}-{rng.choice(['api', 'worker', 'web', 'cron'])}*",
    ]
    return [parse_pattern(makers[index % 3](), source="bench") for index in range(count)]


def bench_matcher(patterns: list[Pattern], names: list[str], repeat: int) -> Row:
    ours = statistics.median(timed(lambda: Matcher(patterns).match(names)) for _ in range(repeat))
    sample = patterns[:PEER_SAMPLE]
    naive = timed(lambda: [[i for i, pattern in enumerate(sample) if matches(pattern, name)] for name in names])
    peer_time = naive * len(patterns) / len(sample)
    peer = f"naive matches() loop, {len(sample)} patterns extrapolated to {len(patterns)}"
    name = f"Matcher.match, {len(patterns)} patterns x {len(names)} names"
    return (name, ours, peer, peer_time, f"< {GOAL_SECONDS:g} s", ours < GOAL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())

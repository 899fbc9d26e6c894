"""Config loading and `config lint --offline` with many patterns, beside tomllib reading the same file.

Run from the repository root:  .venv/bin/python -m bench.bench_config [--patterns 10000 20000] [--repeat 5]

No engine is needed. The file lists the patterns one per line, mostly exact names with some
prefix globs and a few keywords, as a large fleet's policy would. config.load is timed in this
process beside tomllib.loads of the same text (the parse alone: what loading cannot avoid);
lint runs the real CLI beside a Python process that only parses the file.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from bench.common import PINCTL, Row, report, timed
from pinctl.config import loader as config
from pinctl.config.files import toml_reader

LOAD_GOAL_SECONDS = 0.2
LINT_GOAL_SECONDS = 3.0
SEED = 20241130
# Of every 100 patterns: globs and keywords, the rest exact names.
GLOBS_PER_100 = 5
KEYWORDS_PER_100 = 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patterns", type=int, nargs="+", default=[10000, 20000])
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="pinctl-bench-config-") as tmp:
        for count in opts.patterns:
            path = Path(tmp) / str(count) / "config.toml"
            path.parent.mkdir()
            path.write_text(config_text(random.Random(SEED), count))
            rows.append(bench_load(str(path), count, opts.repeat))
            rows.append(bench_lint(str(path), count, opts.repeat))
        rows += bench_pathological(Path(tmp), opts.repeat)
    print(report(rows))
    return 0


# Issue 23: a dotted key of 50,000 parts took tomllib over 15 s (quadratic); it is timed on
# fewer parts here, and pinctl refuses the full one before tomllib is given it.
PATHOLOGICAL_PARTS = 50_000
PEER_PARTS = 5_000
REFUSE_GOAL_SECONDS = 1.0


def bench_pathological(tmp: Path, repeat: int) -> list[Row]:
    """pinctl refusing a 50,000-part key and a 2 MiB line, beside tomllib reading a 5,000-part key."""
    toml = toml_reader()
    peer_text = "a" + ".a" * (PEER_PARTS - 1) + " = 1\n"
    peer_time = median(lambda: toml.loads(peer_text), repeat)
    cases = {f"a key of {PATHOLOGICAL_PARTS:,} dotted parts": "a" + ".a" * (PATHOLOGICAL_PARTS - 1) + " = 1\n",
             "a line of 2 MiB": 'pinned_images = ["' + "x" * (2 << 20) + '"]\n'}
    rows: list[Row] = []
    for name, text in cases.items():
        path = tmp / f"pathological-{len(rows)}.toml"
        path.write_text(text)
        env = {**os.environ, "PINCTL_CONFIG": str(path)}
        ours = median(lambda: run([PINCTL, "config", "lint", "--offline"], env, {2}), repeat)
        rows.append((f"config lint refuses {name}", ours, f"tomllib.loads, a key of {PEER_PARTS:,} parts",
                     peer_time, f"< {REFUSE_GOAL_SECONDS:g} s", ours < REFUSE_GOAL_SECONDS))
    return rows


def config_text(rng: random.Random, count: int) -> str:
    """pinned_images with `count` patterns, one per line, plus a few other keys."""
    patterns = [make_pattern(rng, number) for number in range(count)]
    lines = ["timeout = 5", 'namespaces = ["k8s.io"]', "pinned_images = ["]
    lines += [f'  "{pattern}",' for pattern in patterns]
    lines += ["]", ""]
    return "\n".join(lines)


def make_pattern(rng: random.Random, number: int) -> str:
    team, service = rng.randrange(40), rng.randrange(400)
    kind = rng.randrange(100)
    if kind < KEYWORDS_PER_100:
        return f"*service-{service:03d}-{rng.choice(['api', 'worker', 'web', 'cron'])}*"
    if kind < KEYWORDS_PER_100 + GLOBS_PER_100:
        return f"registry{rng.randrange(8)}.example/team{team}/*"
    return f"registry{rng.randrange(8)}.example/team{team}/service-{service:03d}:v{number}"


def bench_load(path: str, count: int, repeat: int) -> Row:
    toml = toml_reader()
    text = Path(path).read_text()
    loaded = config.load({}, {}, config_path=path)
    assert len(loaded.patterns) == count, len(loaded.patterns)
    ours = median(lambda: config.load({}, {}, config_path=path), repeat)
    peer_time = median(lambda: toml.loads(text), repeat)
    return (f"config.load, {count} patterns", ours, "tomllib.loads of the same text", peer_time,
            f"< {LOAD_GOAL_SECONDS:g} s", ours < LOAD_GOAL_SECONDS)


def bench_lint(path: str, count: int, repeat: int) -> Row:
    env = {**os.environ, "PINCTL_CONFIG": path}
    parse_only = [sys.executable, "-c", "import sys, tomllib; tomllib.load(open(sys.argv[1], 'rb'))", path]
    ours = median(lambda: run([PINCTL, "config", "lint", "--offline"], env, {0, 1}), repeat)
    peer_time = median(lambda: run(parse_only, env, {0}), repeat)
    return (f"config lint --offline, {count} patterns", ours, "python -c tomllib.load(file)", peer_time,
            f"< {LINT_GOAL_SECONDS:g} s", ours < LINT_GOAL_SECONDS)


def run(argv: Sequence[str], env: dict[str, str], codes: set[int]) -> None:
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode not in codes:
        raise SystemExit(f"{argv[0]} exited {done.returncode}: {done.stderr.strip()}")


def median(work: Callable[[], object], repeat: int) -> float:
    work()  # warm-up: imports, page cache
    return statistics.median(timed(work) for _ in range(repeat))


if __name__ == "__main__":
    sys.exit(main())

"""A long-lived containerd with sample images, for trying pinctl by hand.

Run ``python -m tests.harness.sandbox`` (as root, from the repo root; or use
``scripts/sandbox``). The daemon is detached, so it keeps running after this
exits; a later run re-uses it and refreshes its images. ``--stop`` ends it.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Sequence

from tests.harness import cri, debs, images
from tests.harness.containerd import ContainerdDaemon, DaemonError

DEFAULT_DIR = pathlib.Path("/tmp/pinctl-sandbox")
DEFAULT_ENGINE = "containerd-1.7"
PIN_KEY = "io.cri-containerd.pinned"
POLICY = 'pinned_images = ["example.test/alpha:*", "*beta*"]\n'
REPO = pathlib.Path(__file__).resolve().parents[2]

PINNED_BY_LABEL = "example.test/gamma:1.0"
LABELLED_TRUE = "example.test/delta:1.0"


def sample_recipes() -> list[images.ImageRecipe]:
    """A small zoo covering what pinctl must handle."""
    return [
        # One image, three refs; the policy's "alpha:*" matches two of them.
        images.recipe("example.test/alpha:1.0", "example.test/alpha:latest", "localhost:5000/team/alpha:1.0", seed="alpha"),
        # A multi-platform index, matched by the policy's "*beta*".
        images.recipe("example.test/beta:2.0", seed="beta", platforms=("linux/amd64", "linux/arm64")),
        images.recipe(PINNED_BY_LABEL, seed="gamma"),
        images.recipe(LABELLED_TRUE, seed="delta"),
        images.recipe("example.test/epsilon:3.1", seed="epsilon", labels={"org.example.team": "payments"}),
        images.recipe("localhost:5000/tools/zeta:0.9", seed="zeta", docker_media_types=True),
    ]


def _state_path(base: pathlib.Path) -> pathlib.Path:
    return base / "sandbox.json"


def _read_state(base: pathlib.Path) -> dict[str, object]:
    try:
        data = json.loads(_state_path(base).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_state(base: pathlib.Path, daemon: ContainerdDaemon) -> None:
    state = {"pid": daemon.pid, "engine": daemon.engine, "address": daemon.address}
    tmp = _state_path(base).with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(_state_path(base))


def _running_daemon(base: pathlib.Path, engine: str) -> ContainerdDaemon | None:
    """The sandbox daemon recorded in the state file, if it is still alive."""
    state = _read_state(base)
    pid, recorded = state.get("pid"), state.get("engine")
    if not isinstance(pid, int) or not isinstance(recorded, str) or recorded not in debs.ENGINES:
        return None
    daemon = ContainerdDaemon(recorded, base, detached=True)
    daemon.pid = pid
    if not daemon.is_alive():
        return None
    if recorded != engine:
        daemon.stop()
        return None
    return daemon.adopt(pid)


def start(base: pathlib.Path, engine: str) -> ContainerdDaemon:
    daemon = _running_daemon(base, engine)
    if daemon is None:
        daemon = ContainerdDaemon(engine, base, detached=True).start()
        print(f"started {engine} {daemon.version} (pid {daemon.pid})")
    else:
        print(f"re-using {engine} {daemon.version} (pid {daemon.pid})")
    _write_state(base, daemon)
    return daemon


def populate(daemon: ContainerdDaemon) -> list[images.ImageInfo]:
    """Reset ``k8s.io`` to the sample images and their labels."""
    daemon.clear_images(cri.NAMESPACE)
    images.ensure_sandbox_image(daemon)
    infos = images.load_images(daemon, daemon.base_dir / "archives", sample_recipes())
    daemon.label_image(images.normalize_ref(PINNED_BY_LABEL), {PIN_KEY: "pinned"})
    # "true" looks like a pin but the CRI only honours the exact value "pinned".
    daemon.label_image(images.normalize_ref(LABELLED_TRUE), {PIN_KEY: "true"})
    return infos


def write_policy(base: pathlib.Path) -> pathlib.Path:
    policy = base / "config.toml"
    policy.write_text(POLICY)
    return policy


def run_pinctl_ls(daemon: ContainerdDaemon, policy: pathlib.Path) -> None:
    pinctl = REPO / ".venv" / "bin" / "pinctl"
    if not pinctl.exists():
        print(f"\nnote: {pinctl} is not installed yet; skipping `pinctl ls`.")
        return
    env = {**os.environ, "CONTAINERD_ADDRESS": daemon.address, "PINCTL_CONFIG": str(policy)}
    # The daemon's own config tells pinctl which image is the CRI sandbox image.
    env["PINCTL_CONTAINERD_CONFIG"] = str(daemon.config_path)
    argv = [str(pinctl), "ls"]
    print(f"\n$ {' '.join(argv)}", flush=True)
    result = subprocess.run(argv, env=env, check=False)
    if result.returncode != 0:
        print(f"(pinctl ls exited {result.returncode})")


def print_instructions(daemon: ContainerdDaemon, policy: pathlib.Path) -> None:
    print(
        "\n# To use pinctl against the sandbox in your shell:\n"
        f"export CONTAINERD_ADDRESS={daemon.address}\n"
        f"export PINCTL_CONFIG={policy}\n"
        f"export PINCTL_CONTAINERD_CONFIG={daemon.config_path}\n"
        f"export PATH={REPO}/.venv/bin:$PATH\n"
        f"# ctr for comparison: {daemon.bin_dir}/ctr -a {daemon.address} -n k8s.io images ls\n"
        f"# Stop it with: scripts/sandbox --stop   (or: kill {daemon.pid})"
    )


def stop(base: pathlib.Path) -> int:
    daemon = _running_daemon(base, str(_read_state(base).get("engine", DEFAULT_ENGINE)))
    if daemon is None:
        print(f"no sandbox running in {base}")
        return 0
    pid = daemon.pid
    daemon.stop()
    _state_path(base).unlink(missing_ok=True)
    print(f"stopped sandbox containerd (pid {pid})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.sandbox", description=__doc__)
    parser.add_argument("--stop", action="store_true", help="stop the sandbox daemon")
    parser.add_argument("--dir", type=pathlib.Path, default=DEFAULT_DIR, help="sandbox directory")
    engines = sorted(name for name in debs.ENGINES if name.startswith("containerd-"))
    parser.add_argument("--engine", default=DEFAULT_ENGINE, choices=engines)
    args = parser.parse_args(argv)
    base = args.dir.resolve()
    if args.stop:
        return stop(base)
    base.mkdir(parents=True, exist_ok=True)
    try:
        daemon = start(base, args.engine)
        populate(daemon)
    except (debs.EngineUnavailable, DaemonError, cri.CriError) as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 1
    policy = write_policy(base)
    run_pinctl_ls(daemon, policy)
    print_instructions(daemon, policy)
    return 0


if __name__ == "__main__":
    sys.exit(main())

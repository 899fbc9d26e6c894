"""A long-lived containerd with sample images, for trying pinctl by hand.

Run ``python -m tests.harness.sandbox`` (as root, from the repo root; or use
``scripts/sandbox``). The daemon is detached, so it keeps running after this
exits. A later run re-uses it and leaves its images, labels and policy as the
user left them; one whose containerd has stopped (killed, or a stop of its own)
starts it again on the same directory, which keeps them too. ``--reset`` starts
over with the samples. ``--stop`` ends it and removes its directory, unmounting
anything containerd left mounted below it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence

from tests.harness import archives, cri, debs, images
from tests.harness.containerd import ContainerdDaemon, DaemonError

DEFAULT_DIR = pathlib.Path("/tmp/pinctl-sandbox")
# What --help says: the docstring's content, for the shell (no markup, no module path).
HELP = ("Start a long-lived containerd with sample images under /tmp/pinctl-sandbox, for trying "
        "pinctl by hand (as root). It keeps running after this exits; a later run re-uses it, "
        "or starts it again on the same directory when it has stopped, keeping your images, labels "
        "and policy. --reset starts over with the samples; --stop ends it and removes the directory.")
DEFAULT_ENGINE = "containerd-1.7"
PIN_KEY = "io.cri-containerd.pinned"
POLICY = 'pinned_images = ["example.test/alpha:*", "*beta*"]\n'
REPO = pathlib.Path(__file__).resolve().parents[2]

PINNED_BY_LABEL = "example.test/gamma:1.0"
LABELLED_TRUE = "example.test/delta:1.0"
KEEPING = "sandbox already running, keeping your images and labels; --reset to start over"
RESTARTED = "sandbox containerd had stopped: started it again, keeping your images and labels; --reset to start over"
MNT_DETACH = 2


class SandboxError(RuntimeError):
    """The sandbox cannot be stopped or removed as asked; the message says what to do."""


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


# The `pinctl import` examples of docs/pull-and-import.md, ready in archives/ (images the samples do not hold): an OCI
# layout, docker save's format gzipped, a zstd-compressed layout, and a two-platform index.
SAMPLE_ARCHIVES: dict[str, tuple[str, str, list[images.ImageRecipe]]] = {
    "agent.tar": ("oci", "", [images.recipe("example.test/agent:2.1", seed="agent")]),
    "csi-node.tar.gz": ("docker", "gzip", [images.recipe("example.test/csi-node:1.9", seed="csi-node")]),
    "tools.tar.zst": ("oci", "zstd", [images.recipe("localhost:5000/tools/debug:1.0", seed="tools")]),
    "multiarch.tar": ("oci", "", [images.recipe("example.test/multiarch:1.0", seed="multiarch",
                                                platforms=("linux/amd64", "linux/arm64"))]),
}


def write_archives(base: pathlib.Path) -> pathlib.Path:
    """The sample archives in base/archives, each unless the user already has a file of its name."""
    folder = base / "archives"
    folder.mkdir(parents=True, exist_ok=True)
    for name, (layout, compress, recipes) in SAMPLE_ARCHIVES.items():
        if not (folder / name).exists():
            build = archives.oci_archive if layout == "oci" else archives.docker_archive
            build(folder / name, recipes, compress=compress)
    return folder


def _state_path(base: pathlib.Path) -> pathlib.Path:
    return base / "sandbox.json"


def _read_state(base: pathlib.Path) -> dict[str, object]:
    try:
        data = json.loads(_state_path(base).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_state(base: pathlib.Path, daemon: ContainerdDaemon, populated: bool) -> None:
    # populated: the samples were loaded once; from then on what is in k8s.io is the user's.
    state = {"pid": daemon.pid, "engine": daemon.engine, "address": daemon.address, "populated": populated}
    tmp = _state_path(base).with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(_state_path(base))


def _daemon(base: pathlib.Path, engine: str) -> ContainerdDaemon:
    """A handle on the sandbox daemon of base, at the socket its state file recorded."""
    daemon = ContainerdDaemon(engine, base, detached=True)
    address = _read_state(base).get("address")
    if isinstance(address, str) and address != daemon.address:
        # A --dir too long for a socket path gets a new /tmp/ctd-* per handle: use the recorded one.
        with contextlib.suppress(OSError):
            daemon.socket_dir.rmdir()
        daemon.socket_dir = pathlib.Path(address).parent
        daemon.address = address
    return daemon


def _live_daemon(base: pathlib.Path) -> ContainerdDaemon | None:
    """The sandbox daemon recorded in the state file, if that process still runs."""
    state = _read_state(base)
    pid, recorded = state.get("pid"), state.get("engine")
    if not isinstance(pid, int) or not isinstance(recorded, str) or recorded not in debs.ENGINES:
        return None
    daemon = _daemon(base, recorded)
    daemon.pid = pid
    return daemon if daemon.is_alive() else None


def _running_daemon(base: pathlib.Path, engine: str) -> ContainerdDaemon | None:
    """The live sandbox daemon of this engine, answering; one of another engine is stopped."""
    daemon = _live_daemon(base)
    if daemon is None or daemon.pid is None:
        return None
    if daemon.engine != engine:
        daemon.stop()
        return None
    return daemon.adopt(daemon.pid)


def start(base: pathlib.Path, engine: str) -> tuple[ContainerdDaemon, bool]:
    """The sandbox daemon, and whether it was already running (its state is then the user's)."""
    populated = _was_populated(base, engine)
    daemon = _running_daemon(base, engine)
    running = daemon is not None
    if daemon is None:
        daemon = ContainerdDaemon(engine, base, detached=True).start()
        print(f"started {engine} {daemon.version} (pid {daemon.pid})")
    else:
        print(f"re-using {engine} {daemon.version} (pid {daemon.pid})")
    _write_state(base, daemon, populated)
    return daemon, running


def _was_populated(base: pathlib.Path, engine: str) -> bool:
    """Whether base holds a sandbox of this engine that got its samples once: containerd keeps its
    images and labels in its root, so starting it again there finds them as the user left them."""
    state = _read_state(base)
    if state.get("engine") != engine:
        return False  # another engine's root is not this one's to read: start over
    # Sandboxes made before the state said so: containerd's metadata is there.
    return bool(state.get("populated")) or (base / "root" / "io.containerd.metadata.v1.bolt" / "meta.db").is_file()


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
    """The sample policy, unless the user already has one there."""
    policy = base / "config.toml"
    if not policy.exists():
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
    env["PINCTL_HISTORY_DIR"] = str(history_dir(daemon.base_dir))
    argv = [str(pinctl), "ls"]
    print(f"\n$ {' '.join(argv)}", flush=True)
    result = subprocess.run(argv, env=env, check=False)
    if result.returncode != 0:
        print(f"(pinctl ls exited {result.returncode})")


def history_dir(base: pathlib.Path) -> pathlib.Path:
    return base / "history"


def print_instructions(daemon: ContainerdDaemon, policy: pathlib.Path) -> None:
    folder = daemon.base_dir / "archives"
    print(
        "\n# To use pinctl against the sandbox in your shell:\n"
        f"export CONTAINERD_ADDRESS={daemon.address}\n"
        f"export PINCTL_CONFIG={policy}\n"
        f"export PINCTL_CONTAINERD_CONFIG={daemon.config_path}\n"
        # The same socket serves the CRI: without it, every CRI command says which one it picked.
        f"export CONTAINER_RUNTIME_ENDPOINT=unix://{daemon.address}\n"
        # The deletion journal sync --watch writes and pinctl history reads, beside the rest.
        f"export PINCTL_HISTORY_DIR={history_dir(daemon.base_dir)}\n"
        f"export PATH={REPO}/.venv/bin:$PATH\n"
        f"# ctr for comparison: {daemon.bin_dir}/ctr -a {daemon.address} -n k8s.io images ls\n"
        f"# Archives to import (docs/pull-and-import.md): cd {folder}; pinctl import --pin {' '.join(SAMPLE_ARCHIVES)}\n"
        f"# After a reboot or a containerd stop, {_script(daemon.base_dir)} starts it again as you left it\n"
        f"# Start over with: {_script(daemon.base_dir, '--reset')}\n"
        f"# Stop it and remove {daemon.base_dir} with: {_script(daemon.base_dir, '--stop')}"
    )


def _script(base: pathlib.Path, *args: str) -> str:
    where = [] if base == DEFAULT_DIR else ["--dir", str(base)]
    return " ".join(["scripts/sandbox", *where, *args])


def stop(base: pathlib.Path) -> int:
    """Stop the daemon and remove base (and a socket directory outside it)."""
    if not base.exists():
        print(f"no sandbox in {base}")
        return 0
    if not _is_sandbox_dir(base):
        raise SandboxError(f"{base} holds no sandbox (no containerd.toml or sandbox.json); leaving it alone")
    daemon = _live_daemon(base)  # answering or not: it is stopped either way
    socket_dir = _daemon(base, DEFAULT_ENGINE).socket_dir
    if daemon is not None:
        pid = daemon.pid
        daemon.stop()
        print(f"stopped sandbox containerd (pid {pid})")
    remove_tree(base)
    # The harness's own /tmp/ctd-* for a --dir too long for sockets; nothing else outside base.
    if socket_dir.parent == pathlib.Path("/tmp") and socket_dir.name.startswith("ctd-") and socket_dir.is_dir():
        remove_tree(socket_dir)
    print(f"removed {base}")
    return 0


def _is_sandbox_dir(base: pathlib.Path) -> bool:
    # --dir can name any directory: never delete one this script did not make.
    return (base / "containerd.toml").is_file() or _state_path(base).is_file()


def remove_tree(path: pathlib.Path) -> None:
    """Unmount everything at or below path, deepest first, then delete it.

    rmtree would otherwise descend into a mount (a snapshot containerd left mounted) and delete
    what lies in it, or fail on a busy mount point.
    """
    for point in sorted(mounts_below(path), key=lambda p: len(p.parts), reverse=True):
        _unmount(point)
    left = mounts_below(path)
    if left:
        raise SandboxError(f"{left[0]} is still mounted; unmount it (umount -l {left[0]}) and run --stop again")
    shutil.rmtree(path, ignore_errors=False)


def mounts_below(path: pathlib.Path) -> list[pathlib.Path]:
    """Mount points at or below path, from /proc/self/mountinfo."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
        for line in table:
            point = pathlib.Path(_unescape(line.split()[4]))
            if point.is_relative_to(path):
                found.append(point)
    return found


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes (\040 ...).
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def _unmount(point: pathlib.Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(point), 0) == 0:
        return
    # Busy (a process still has it open): detach it now; the kernel frees it when released.
    if libc.umount2(os.fsencode(point), MNT_DETACH) != 0:
        error = ctypes.get_errno()
        raise SandboxError(f"cannot unmount {point}: {os.strerror(error)}; unmount it and run --stop again")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/sandbox", description=HELP)
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--stop", action="store_true", help="stop the sandbox daemon and remove its directory")
    action.add_argument("--reset", action="store_true",
                        help="start over: stop and remove the sandbox, then start it with the sample images")
    parser.add_argument("--dir", type=pathlib.Path, default=DEFAULT_DIR, help="sandbox directory")
    engines = sorted(name for name in debs.ENGINES if name.startswith("containerd-"))
    parser.add_argument("--engine", default=DEFAULT_ENGINE, choices=engines)
    args = parser.parse_args(argv)
    base = args.dir.resolve()
    try:
        if args.stop:
            return stop(base)
        if args.reset:
            stop(base)
        return run(base, args.engine)
    except (debs.EngineUnavailable, DaemonError, cri.CriError, SandboxError) as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 1


def run(base: pathlib.Path, engine: str) -> int:
    base.mkdir(parents=True, exist_ok=True)
    populated = _was_populated(base, engine)
    daemon, running = start(base, engine)
    if running:
        print(KEEPING)
    elif populated:
        print(RESTARTED)
    else:
        populate(daemon)
        _write_state(base, daemon, populated=True)
    policy = write_policy(base)
    write_archives(base)
    run_pinctl_ls(daemon, policy)
    print_instructions(daemon, policy)
    return 0


if __name__ == "__main__":
    sys.exit(main())

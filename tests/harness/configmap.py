"""A Kubernetes ConfigMap volume as the kubelet keeps it on the node, and as a container sees it.

The kubelet's AtomicWriter (pkg/volume/util/atomic_writer.go) writes each version of the data
into a new timestamped directory (mode 0755, files at the volume's defaultMode), points a
``..data`` symlink at it by renaming a fresh symlink over the old one, and makes each key a
symlink through ``..data``; the old directory is removed after the swap. So a key's path is never
written: only what it resolves to changes. The volume's own directory is an emptyDir's, mode
0777 (pkg/volume/emptydir: ``perm = 0777``, no sticky bit), and the kubelet bind-mounts it into
the container read-only.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
from collections.abc import Iterator, Mapping

# The emptyDir a ConfigMap volume is made in.
EMPTYDIR_MODE = 0o777
TIMESTAMP_DIR_MODE = 0o755


class ConfigMapVolume:
    """The volume's directory on the node; write() is one update of the ConfigMap."""

    def __init__(self, root: pathlib.Path, default_mode: int = 0o444, root_mode: int = EMPTYDIR_MODE) -> None:
        self.root = root
        self.default_mode = default_mode
        self.generation = 0
        root.mkdir(parents=True)
        root.chmod(root_mode)  # chmod: mkdir's mode is cut by the umask

    def write(self, files: Mapping[str, str]) -> pathlib.Path:
        """The ConfigMap's data now (key path -> text); returns the new timestamped directory."""
        self.generation += 1
        new = self.root / f"..2024_01_01_00_00_00.{self.generation:09d}"
        new.mkdir()
        new.chmod(TIMESTAMP_DIR_MODE)
        for name, text in files.items():
            target = new / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.parent.chmod(TIMESTAMP_DIR_MODE)
            target.write_text(text)
            target.chmod(self.default_mode)
        data = self.root / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        staged = self.root / "..data_tmp"
        staged.symlink_to(new.name)
        os.rename(staged, data)
        for top in {name.split("/", 1)[0] for name in files}:
            link = self.root / top
            if not link.is_symlink():
                link.symlink_to(f"..data/{top}")
        if old is not None:
            _remove_tree(self.root / old)
        return new

    @property
    def current(self) -> pathlib.Path:
        """The timestamped directory ``..data`` points at."""
        return self.root / os.readlink(self.root / "..data")


def _remove_tree(path: pathlib.Path) -> None:
    for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        child.chmod(0o755) if child.is_dir() else None
        child.rmdir() if child.is_dir() else child.unlink()
    path.rmdir()


@contextlib.contextmanager
def read_only_view(source: pathlib.Path, target: pathlib.Path) -> Iterator[pathlib.Path]:
    """source bind-mounted read-only at target: the container's view of the volume."""
    target.mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(source), str(target))
    try:
        _mount("-o", "remount,bind,ro", str(target))
        yield target
    finally:
        for argv in (["umount", str(target)], ["umount", "-l", str(target)]):
            if subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0:
                break


def _mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0:
        raise OSError(f"mount {' '.join(args)}: {proc.stderr.strip()}")

"""tests.harness.crio's view of /proc/cgroups: a controller no hierarchy mounts reads disabled."""

from __future__ import annotations

import pathlib

import pytest

from tests.harness import crio

PROC_CGROUPS = """#subsys_name\thierarchy\tnum_cgroups\tenabled
cpu\t2\t10\t1
memory\t4\t12\t1
hugetlb\t0\t6\t1
rdma\t0\t1\t0
"""


def write(tmp_path: pathlib.Path, mounts: str) -> tuple[str, str]:
    (tmp_path / "cgroups").write_text(PROC_CGROUPS)
    (tmp_path / "mounts").write_text(mounts)
    return str(tmp_path / "cgroups"), str(tmp_path / "mounts")


@pytest.fixture(autouse=True)
def cgroup_v1(monkeypatch: pytest.MonkeyPatch) -> None:
    real = crio.os.path.exists
    monkeypatch.setattr(crio.os.path, "exists",
                        lambda path: False if path == "/sys/fs/cgroup/cgroup.controllers" else real(path))


def test_an_unmounted_controller_is_shown_disabled(tmp_path: pathlib.Path) -> None:
    cgroups, mounts = write(tmp_path, "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
                                      "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n")
    text = crio.cgroups_as_mounted(cgroups, mounts)
    assert text is not None
    rows = {line.split()[0]: line.split()[3] for line in text.splitlines()[1:]}
    assert rows == {"cpu": "1", "memory": "1", "hugetlb": "0", "rdma": "0"}
    assert text.splitlines()[0] == PROC_CGROUPS.splitlines()[0]


def test_nothing_to_hide_gives_none(tmp_path: pathlib.Path) -> None:
    cgroups, mounts = write(tmp_path, "cgroup /sys/fs/cgroup/a cgroup rw,cpu,memory 0 0\n"
                                      "cgroup /sys/fs/cgroup/h cgroup rw,hugetlb 0 0\n")
    assert crio.cgroups_as_mounted(cgroups, mounts) is None

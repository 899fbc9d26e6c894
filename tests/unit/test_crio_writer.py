"""The writers' lock on CRI-O's drop-in directory (node.crio_lock), held across real processes,
and reading a reload's outcome out of CRI-O's log (node.crio_process)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from pinctl.errors import PinctlError
from pinctl.node import crio_lock, crio_process
from pinctl.node.crio_process import CrioLog, ReloadLine, reload_outcome

# Holds the lock on argv[1] until its stdin closes; says "held" once it has it.
HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def _holder(directory: pathlib.Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_free_lock_is_taken_without_a_word(tmp_path: pathlib.Path) -> None:
    heard: list[str] = []
    with crio_lock.held(str(tmp_path), heard.append):
        fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert crio_lock.holder_of(fd) == os.getpid()
        finally:
            os.close(fd)
    assert heard == []


def test_a_busy_lock_is_waited_for_then_refused_naming_its_holder(tmp_path: pathlib.Path) -> None:
    holder = _holder(tmp_path)
    heard: list[str] = []
    try:
        with pytest.raises(PinctlError) as raised:
            with crio_lock.held(str(tmp_path), heard.append, wait=0.2):
                pytest.fail("the lock was taken while another process held it")
    finally:
        holder.communicate("")
    name = pathlib.Path(sys.executable).name[:15]
    assert heard == [f"waiting for the writers' lock on {tmp_path}, held by pid {holder.pid} ({name})"]
    assert f"lock on {tmp_path} has been held by pid {holder.pid} ({name}) for over 0.2 s" in str(raised.value)
    assert "run pinctl again" in str(raised.value)


def test_a_lock_whose_holder_dies_is_taken(tmp_path: pathlib.Path) -> None:
    holder = _holder(tmp_path)
    holder.kill()
    holder.wait()
    heard: list[str] = []
    with crio_lock.held(str(tmp_path), heard.append, wait=30):
        pass  # the kernel let go of the dead holder's lock


def test_a_missing_directory_is_one_line_and_nothing_is_made(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "crio.conf.d"
    with pytest.raises(PinctlError) as raised:
        with crio_lock.held(str(missing), lambda _line: None):
            pass
    assert str(missing) in str(raised.value) and "restart CRI-O" in str(raised.value)
    assert not missing.exists()


@pytest.mark.parametrize(("text", "expected"), [
    ('time="2026-12-04T20:00:00Z" level=info msg="Configuration reload completed"\n', ReloadLine(True)),
    ('time="x" level=error msg="Unable to reload configuration: update config from path: walk path: unable to '
     'decode configuration /etc/crio/crio.conf.d/10-site.conf: toml: line 2 (last key \\"crio.image\\"): '
     'incompatible types"\n',
     ReloadLine(False, 'update config from path: walk path: unable to decode configuration '
                       '/etc/crio/crio.conf.d/10-site.conf: toml: line 2 (last key "crio.image"): incompatible types')),
    ('{"level":"error","msg":"Unable to reload configuration: read /etc/crio/crio.conf.d: is a directory"}\n',
     ReloadLine(False, "read /etc/crio/crio.conf.d: is a directory")),
    # journald's bare message
    ("Unable to reload configuration: bad\nConfiguration reload completed\n", ReloadLine(True)),
    ('time="x" level=info msg="Reloading configuration"\n', None),
    ("", None),
])
def test_the_reload_outcome_is_read_from_cri_os_log(text: str, expected: ReloadLine | None) -> None:
    assert reload_outcome(text) == expected


def test_a_log_file_is_read_from_the_mark_on(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "crio.log"
    path.write_text('level=error msg="Unable to reload configuration: old"\n')
    log = CrioLog(path=str(path))
    mark = log.mark()
    assert crio_process.last_refusal(log) == "old"
    with path.open("a") as handle:
        handle.write('level=info msg="Configuration reload completed"\n')
    assert reload_outcome(log.since(mark, 0.0) or "") == ReloadLine(True)
    assert crio_process.last_refusal(log) is None
    assert CrioLog(path=str(tmp_path / "gone")).since(0, 0.0) is None

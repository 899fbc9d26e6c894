"""The cyclic garbage collector: off for a one-shot command, on again for a service."""

from __future__ import annotations

import gc
import subprocess
import sys

from pinctl.service import memory

# main() ends in sys.exit: an exit handler reports the collector's state as the command leaves it.
_REPORT = ("import atexit, gc, sys; atexit.register(lambda: print('enabled' if gc.isenabled() else 'disabled')); "
           "sys.argv = ['pinctl', '--version']; from pinctl.cli import main; main()")


def test_a_one_shot_command_runs_without_the_cyclic_collector() -> None:
    out = subprocess.run([sys.executable, "-c", _REPORT], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines()[-1] == "disabled"


def test_a_service_turns_the_collector_back_on() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        memory.serve_for_long()
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()

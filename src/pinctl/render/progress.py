"""The live display of a batch command (pull, import) on a terminal: spinners and a count line.

One place for what both commands need alike: a display on stderr only when stderr is a terminal
(nothing of it reaches a pipe or a log), started by the first event (not while the command still
opens the node), erased at the end, and drawn under a lock since pull's workers report from their
own threads. rich is imported only once a display is shown, so `pinctl --help` never loads it.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, TextIO

from pinctl.display import visible

# heard(key, state): what one key (an archive, a reference) is doing now; finished(key): it is done.
Callbacks = tuple[Callable[[str, str], None], Callable[[str], None]]


@contextmanager
def live_progress(command: str, in_flight: bool, stream: Optional[TextIO] = None) -> Iterator[Callbacks]:
    """A spinner line per key and "COMMAND: N done" under them, on a terminal only.

    in_flight: each key keeps its spinner until it finishes and the count line adds "M in flight"
    (pull's parallel workers). Otherwise one spinner shows the key heard last, and stays after it
    finishes (import: one archive at a time, which finishes once per reference it names)."""
    err = stream or sys.stderr
    if not err.isatty():
        yield (lambda _key, _state: None), (lambda _key: None)
        return
    from rich.console import Console, Group
    from rich.live import Live
    from rich.spinner import Spinner
    from rich.text import Text

    lock = threading.Lock()
    states: dict[str, str] = {}
    done = {"count": 0}
    # stdout stays where it is (it may be a pipe); a warning on stderr meanwhile shows above the lines.
    live = Live(Text(""), console=Console(file=err, highlight=False), transient=True, redirect_stdout=False,
                refresh_per_second=8)

    def redraw() -> None:
        spinners = [Spinner("dots", text=f"{visible(key)}: {state}") for key, state in states.items()]
        count = f"{command}: {done['count']} done" + (f", {len(states)} in flight" if in_flight else "")
        live.update(Group(*spinners, Text(count)))

    def heard(key: str, state: str) -> None:
        with lock:
            if not live.is_started:
                live.start()
            if not in_flight:
                states.clear()
            states[key] = state
            redraw()

    def finished(key: str) -> None:
        with lock:
            if in_flight:
                states.pop(key, None)
            done["count"] += 1
            if live.is_started:
                redraw()

    try:
        yield heard, finished
    finally:
        if live.is_started:
            live.stop()

"""cri-proxy's compiled data path: pinctl-cri-relay (cri-relay/, in Go) serves the socket and
forwards every call, and this process answers its questions over a pipe.

Python's gRPC adds about 0.5 ms to each call it relays and more for large answers (a
ListImages of 1,000 images through it takes 1.3x as long as direct); the relay adds a fifth of
that, and a pin read here never holds up the calls it forwards: the relay answers with the set
it was pushed last. pinctl keeps what needs its libraries: reading the pins, the config, the log.

The channel is JSON lines: the relay's stdout brings `ready`, `remove` (a request), `removed` (a
forwarded RemoveImage's outcome), `log`, and `stats` and `taken` (answers); its stdin takes `pins`
(each new pinned set, pushed: the first before the relay serves, answered `taken` with its id
once calls use it), `remove` (an answer) and `stats` (a request, answered with its id).

A RemoveImage is decided here, not in the relay (remove.py): the relay holds the call, sends
its request bytes with the caller's pid and name (from the socket's peer credentials), and
forwards or refuses as told; then it sends the runtime's status code, and this process appends
the journal entry. One writer of the journal, in pinctl's own format and lock, rather than a
second implementation of both in Go; and the decision needs a fresh read of the pins with
their reasons, which only this process can make.
When pinctl goes, the relay's stdin ends and it stops too.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Optional

from pinctl.errors import RelayFailed, UsageError
from pinctl.model import LogFn

from pinctl.criproxy.stats import ERROR_CODES
from pinctl.criproxy.remove import Caller, Decision, RemoveGuard, forwarded_outcome
from pinctl.journal import REQUEST_FAILED, REQUEST_REFUSED

if TYPE_CHECKING:
    from pinctl.criproxy.pins import PinnedKeys

RELAY_NAME = "pinctl-cri-relay"
READY_SECONDS = 10.0
STOP_SECONDS = 5.0
STATS_SECONDS = 2.0
MAX_REMOVING = 256


def find_relay(choice: str) -> Optional[str]:
    """The relay to run for --relay CHOICE: None means forwarding in Python."""
    if choice == "python":
        return None
    if choice != "auto":
        if not (os.path.isfile(choice) and os.access(choice, os.X_OK)):
            raise UsageError(f"--relay {choice} is not an executable file",
                             f"give the path of {RELAY_NAME}, or auto, or python")
        return choice
    beside = Path(sys.executable).parent / RELAY_NAME  # where scripts/build-relay puts it in a venv
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(RELAY_NAME)


class Relay:
    """One pinctl-cri-relay process, serving listen and forwarding to upstream."""

    def __init__(self, binary: str, listen: str, upstream: str, pins: Callable[[], Optional[PinnedKeys]],
                 log: LogFn, guard: Optional[RemoveGuard] = None) -> None:
        self.binary = binary
        self.argv = [binary, "--listen", listen, "--upstream", upstream, "--first-pins", f"{READY_SECONDS}s"]
        self.pins = pins  # the set as last read, sent before the relay serves
        self.log = log
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._exit_code: Optional[int] = None
        self._last_sent: Optional[PinnedKeys] = None  # the pins the running relay has
        self._write_lock = threading.Lock()
        self._pins_lock = threading.Lock()
        self._ready = threading.Event()
        self._answers: dict[int, dict[str, Any]] = {}  # by request id: stats, taken
        self._answer_arrived = threading.Condition()
        self._request_id = 0
        self.guard = guard
        # A RemoveImage decided and forwarded, by the relay's id, until its outcome comes.
        self._removing: dict[int, tuple[Decision, Caller]] = {}

    def start(self) -> None:
        self._ready.clear()
        self._last_sent = None
        # The relay's stderr is pinctl's: a Go panic or a listen error reaches the same log.
        self._proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      start_new_session=True)  # a terminal's ^C goes to pinctl, which stops it
        proc = self._proc
        threading.Thread(target=self._read, args=(proc,), name="cri-relay-reader", daemon=True).start()
        # The pins before anything else: the relay serves once it has them (no call without them).
        first = self._next_id()
        self._send_pins(self.pins(), first)
        # The reader sets ready on the relay's "ready", or when its stdout ends (it exited).
        if not self._ready.wait(READY_SECONDS) or proc.poll() is not None:
            self.stop()
            raise RelayFailed(f"{self.binary} did not start serving (exit code {self._exit_code}; its own message, "
                              "if any, is above)", "run it with --relay python to forward in Python meanwhile")
        with self._answer_arrived:
            self._answers.pop(first, None)  # its "taken" came before "ready": nobody waits for it

    def exited(self) -> Optional[int]:
        """The relay's exit code once it has stopped, else None."""
        return self._proc.poll() if self._proc is not None else self._exit_code

    def push(self, keys: Optional[PinnedKeys]) -> bool:
        """Hand the relay a new pinned set (None: unreadable, pass answers through) and wait until
        its calls use it; False when it does not say so within STATS_SECONDS."""
        request_id = self._next_id()
        self._send_pins(keys, request_id)
        return self._answer(request_id) is not None

    def stats(self) -> Optional[dict[str, Any]]:
        """What the relay counted, or None when it does not answer within STATS_SECONDS."""
        answer = self._ask("stats")
        return None if answer is None else answer.get("stats") or {}

    def _ask(self, kind: str) -> Optional[dict[str, Any]]:
        """Send a request of that type and wait for the relay's answer with the same id."""
        wanted = self._next_id()
        self._send({"type": kind, "id": wanted})
        return self._answer(wanted)

    def _next_id(self) -> int:
        with self._answer_arrived:
            self._request_id += 1
            return self._request_id

    def _answer(self, wanted: int) -> Optional[dict[str, Any]]:
        with self._answer_arrived:
            self._answer_arrived.wait_for(lambda: wanted in self._answers, STATS_SECONDS)
            return self._answers.pop(wanted, None)

    def _send_pins(self, keys: Optional[PinnedKeys], request_id: int) -> None:
        with self._pins_lock:  # "same" refers to the set sent last: one sender at a time
            if keys is not None and keys == self._last_sent:
                # The relay keeps what it has: no set of 10,000 IDs to encode and decode again.
                self._send({"type": "pins", "id": request_id, "ok": True, "same": True})
                return
            sets = {} if keys is None else {"ids": sorted(keys.ids), "known_ids": sorted(keys.known_ids),
                                            "names": sorted(keys.names)}
            self._send({"type": "pins", "id": request_id, "ok": keys is not None, **sets})
            self._last_sent = keys

    def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass  # stdin's unsent pins to a relay that is gone: nothing to flush them to
        self._exit_code = proc.returncode
        self._proc = None

    def _send(self, message: dict[str, Any]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._write_lock:
            try:
                proc.stdin.write(line)
                proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass  # the relay is gone: wait notices and starts another

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        stdout: Optional[IO[bytes]] = proc.stdout
        if stdout is None:
            return
        for line in stdout:
            try:
                message = json.loads(line)
            except ValueError:
                self.log("error", "unreadable message from the relay", line=line[:200].decode(errors="replace"))
                continue
            self._dispatch(message)
        proc.wait()
        self._ready.set()  # a start waiting for "ready" learns that none will come

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "ready":
            self._ready.set()
        elif kind == "log":
            self.log(message.get("level", "info"), message.get("message", ""), **message.get("fields", {}))
        elif kind == "remove":
            # A fresh read of the pins: the reader goes on meanwhile, as for "pins".
            threading.Thread(target=self._answer_remove, args=(message,), daemon=True).start()
        elif kind == "removed":
            self._removed(message)
        elif kind in ("stats", "taken"):
            with self._answer_arrived:
                self._answers[message.get("id", 0)] = message
                self._answer_arrived.notify_all()

    def _answer_remove(self, message: dict[str, Any]) -> None:
        """A RemoveImage the relay holds: refuse or forward, decided here on pins read now."""
        request_id = message.get("id", 0)
        caller = Caller(int(message.get("pid") or 0), str(message.get("client") or ""))
        if self.guard is None:
            self._send({"type": "remove", "id": request_id})
            return
        try:
            request = base64.b64decode(message.get("request") or "")
        except ValueError:
            request = b""
        decision = self.guard.decide(request)
        if decision.refused:
            self.guard.record(decision, caller, REQUEST_REFUSED)
            self._send({"type": "remove", "id": request_id, "refuse": True, "message": decision.message})
            return
        with self._answer_arrived:
            if len(self._removing) >= MAX_REMOVING:  # outcomes that never came (a relay replaced)
                self._removing.pop(next(iter(self._removing)))
            self._removing[request_id] = (decision, caller)
        self._send({"type": "remove", "id": request_id})

    def _removed(self, message: dict[str, Any]) -> None:
        """The runtime's answer to a RemoveImage the relay forwarded: journaled."""
        with self._answer_arrived:
            found = self._removing.pop(message.get("id", 0), None)
        if found is None or self.guard is None:
            return
        decision, caller = found
        number = int(message.get("code") or 0)  # gRPC's numeric code
        code = "OK" if number == 0 else ERROR_CODES[number - 1] if number <= len(ERROR_CODES) else str(number)
        outcome = forwarded_outcome(code)
        error = f"{code}: {message.get('message', '')}" if outcome == REQUEST_FAILED else ""
        self.guard.record(decision, caller, outcome, error)

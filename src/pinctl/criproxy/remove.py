"""cri-proxy's RemoveImage: refused for an image pinctl keeps pinned, and every one recorded in
the deletion journal. Both data paths decide here: the Python Forwarder calls RemoveGuard
directly; the relay asks over its control pipe (relay.py) and forwards or refuses as told.

How a request is decided:

1. The image it names is resolved by the runtime itself: an ImageStatus with the request's own
   ImageSpec, upstream. Whatever the runtime would remove for that spec (an ID, a short ID, a
   digest, a reference) is what ImageStatus names; an image it does not know is forwarded, and the
   runtime answers as it always does.
2. The pins are read now (PinnedSet.rows_now), never taken from the cache: a label added a moment
   ago defends the image, one removed a moment ago does not.
3. A pin the proxy's answers report (the label in the namespace the runtime reads, a policy
   pattern, a Docker config label, the sandbox image, or the runtime reporting it pinned itself,
   by its own pinned_images or otherwise) refuses the call with FAILED_PRECONDITION and one line naming the image, the
   pin and the fix; --allow-remove-pinned forwards it instead (and the journal says it was pinned).

When the pins or the image cannot be read, the call is forwarded: the proxy never stops the
kubelet's GC by being unable to read, as its answers pass through unchanged then too.

The journal is written by one thread of its own (JournalWriter): a call is never delayed by the
journal's lock or fsync, and a journal that cannot be written is one warning line, not an error.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Final, Optional, Sequence

from pinctl.journal import REQUEST_FAILED, REQUEST_FORWARDED, REQUEST_OUTCOMES, REQUEST_REFUSED, RemoveRequest
from pinctl.model import (
    REASON_CONTAINERD_CONFIG,
    REASON_CRIO_CONFIG,
    REASON_CRIO_PIN,
    REASON_DOCKER_LABEL,
    REASON_LABEL,
    REASON_PATTERN,
    REASON_SANDBOX,
    ImageRow,
    LogFn,
    Reason,
)

from pinctl.criproxy.pins import IMAGE_STATUS, RUNTIME_NAMESPACES, PinnedSet, counts
from pinctl.journal.store import Journal, JournalError

if TYPE_CHECKING:
    import grpc

REMOVE_IMAGE: Final = "/runtime.v1.ImageService/RemoveImage"
ALLOW_FLAG: Final = "--allow-remove-pinned"
# The runtime's own pinned_images: it pins by them, and removes on request all the same.
RUNTIME_CONFIG_KINDS = (REASON_CONTAINERD_CONFIG, REASON_CRIO_CONFIG, REASON_CRIO_PIN)
QUEUED_ENTRIES = 1024  # a journal that cannot keep up drops entries past this, with a warning


@dataclass(frozen=True)
class Caller:
    """The process at the other end of the socket: its pid from SO_PEERCRED, its name from
    /proc/PID/comm; 0 and "" when unknown."""

    pid: int = 0
    name: str = ""


def process_name(pid: int) -> str:
    """/proc/PID/comm ("kubelet", "crictl"); "" when the process is gone or unreadable."""
    if pid <= 0:
        return ""
    try:
        with open(f"/proc/{pid}/comm", "rb") as stream:
            return stream.read(64).decode(errors="replace").strip()
    except OSError:
        return ""


def caller_from_pid(pid: int) -> Caller:
    return Caller(pid, process_name(pid)) if pid > 0 else Caller()


@dataclass(frozen=True)
class Decision:
    """What to do with one RemoveImage: refuse it (message is the status's one line) or forward it."""

    ref: str
    image_id: str = ""
    pin: str = ""  # the pin that defends the image, "" when none
    refused: bool = False
    message: str = ""


@dataclass(frozen=True)
class Pin:
    what: str  # "policy pattern example.test/web:* (/etc/pinctl/config.toml)"
    fix: str  # "pinctl unpin example.test/web:1"


def describe(reason: Reason, row: ImageRow) -> Pin:
    """A reason that keeps the image, as the refusal names it, with what lifts that pin."""
    where = f" ({reason.source})" if reason.source else ""
    ref = row.ref or row.digest or row.image_id
    if reason.kind == REASON_LABEL:
        return Pin(f"the pin label on {reason.detail or ref}", f"pinctl unpin {ref}")
    if reason.kind == REASON_PATTERN:
        return Pin(f"policy pattern {reason.detail}{where}", f"drop the pattern {reason.detail} from the policy")
    if reason.kind == REASON_DOCKER_LABEL:
        return Pin(f"Docker config label {reason.detail}", "rebuild it without that label")
    if reason.kind == REASON_SANDBOX:
        return Pin(f"the runtime's sandbox image {reason.detail}", "configure another sandbox image first")
    if reason.kind == REASON_CRIO_PIN:
        return Pin(f"pinctl's CRI-O pin {reason.detail}{where}", f"pinctl unpin {ref}")
    if reason.kind == REASON_CRIO_CONFIG:
        return Pin(f"CRI-O pinned_images {reason.detail}{where}", "remove it from that file")
    return Pin(f"containerd pinned_images {reason.detail}", "remove it from containerd's config")


def find_pin(rows: Sequence[ImageRow], image_id: str, names: Sequence[str],
             keeps: Callable[[Reason, ImageRow], bool]) -> Optional[Pin]:
    """The first reason that keeps the image the runtime named (by its ID, or by one of its
    names for an image whose ID pinctl has no rows for), as the proxy's answers match images."""
    known = {row.image_id for row in rows if row.image_id}
    wanted = set(names)
    for row in rows:
        same = row.image_id == image_id if image_id in known else bool(wanted & {row.ref, row.digest} - {""})
        if not same:
            continue
        for reason in row.reasons:
            if keeps(reason, row):
                return describe(reason, row)
    return None


def refusal(ref: str, image_id: str, pin: Pin) -> str:
    """The status message: one line naming the image, the pin and the fix."""
    shown = f"{ref} ({image_id[:19]})" if image_id and image_id != ref else ref
    return (f"cri-proxy refused to remove {shown}: pinctl keeps it pinned by {pin.what}; to remove it, "
            f"{pin.fix}, or run cri-proxy with {ALLOW_FLAG}")


class RemoveGuard:
    """Decides each RemoveImage and records it. status(request) asks the runtime ImageStatus for
    the request's ImageSpec: (image ID, its names, whether the runtime pins it), None when it
    does not know the image; it raises when the runtime cannot be asked."""

    def __init__(self, pins: PinnedSet, status: Callable[[bytes], ImageNamed],
                 allow_pinned: bool, journal: Optional[JournalWriter], log: LogFn) -> None:
        self.pins = pins
        self.status = status
        self.allow_pinned = allow_pinned
        self.journal = journal
        self.log = log
        self.outcomes: Counter[str] = Counter(dict.fromkeys(REQUEST_OUTCOMES, 0))

    def decide(self, request: bytes) -> Decision:
        from pinctl.proto import cri_pb2

        try:
            ref = cri_pb2.RemoveImageRequest.FromString(request).image.image
        except Exception:  # noqa: BLE001 - the runtime answers a request it cannot read itself
            return Decision("")
        try:
            named = self.status(request)
        except Exception as err:  # noqa: BLE001 - cannot resolve: forwarded, as answers pass through
            self.log("warning", "cannot ask the runtime which image a RemoveImage names; forwarding it",
                     image=ref, error=str(err))
            return Decision(ref)
        if named is None:
            return Decision(ref)  # the runtime does not know it: it answers as it always does
        image_id, names, runtime_pinned = named
        read = self.pins.rows_now()
        if read is None:
            self.log("warning", "cannot read the pins; forwarding RemoveImage unchecked", image=ref)
            return Decision(ref, image_id)
        rows, runtime_name = read
        # Defended: what the proxy's own answers report pinned, no more (the kubelet never asks
        # to remove what it lists pinned, and crictl rmi --all skips it): what pinctl pins, and
        # what the runtime pins itself, named by its config where pinctl read that.
        label_namespace = RUNTIME_NAMESPACES.get(runtime_name)
        pin = find_pin(rows, image_id, names, lambda reason, row: counts(reason.kind, row, label_namespace))
        if pin is None and runtime_pinned:
            pin = find_pin(rows, image_id, names, lambda reason, _: reason.kind in RUNTIME_CONFIG_KINDS) or Pin(
                f"the runtime's own pin ({runtime_name} reports it pinned)", "unpin it in the runtime")
        if pin is None:
            return Decision(ref, image_id)
        if self.allow_pinned:
            return Decision(ref, image_id, pin.what)
        return Decision(ref, image_id, pin.what, True, refusal(ref, image_id, pin))

    def record(self, decision: Decision, caller: Caller, outcome: str, error: str = "") -> None:
        """Count the request and queue its journal entry (never waits for the journal)."""
        self.outcomes[outcome] += 1
        if outcome == REQUEST_REFUSED:
            detail = decision.pin
            self.log("warning", "refused RemoveImage of a pinned image", image=decision.ref,
                     image_id=decision.image_id, pin=decision.pin, client=caller.name, pid=str(caller.pid))
        elif outcome == REQUEST_FAILED:
            detail = error
        else:
            detail = f"pinned by {decision.pin}, removed as {ALLOW_FLAG} allows" if decision.pin else ""
        if self.journal is not None:
            self.journal.put(RemoveRequest(time.time(), decision.ref, outcome, decision.image_id, caller.name,
                                           caller.pid, detail))


ImageNamed = Optional[tuple[str, list[str], bool]]
STATUS_SECONDS = 30.0


def upstream_status(channel: grpc.Channel) -> Callable[[bytes], ImageNamed]:
    """Asks the runtime ImageStatus for a RemoveImage request's own ImageSpec: the image it would
    remove, as (ID, tags and digests, pinned by the runtime), or None when it knows none."""
    call: Any = channel.unary_unary(IMAGE_STATUS)

    def status(request: bytes) -> ImageNamed:
        import grpc

        from pinctl.proto import cri_pb2

        spec = cri_pb2.RemoveImageRequest.FromString(request).image
        try:
            reply = cri_pb2.ImageStatusResponse.FromString(
                call(cri_pb2.ImageStatusRequest(image=spec).SerializeToString(), timeout=STATUS_SECONDS))
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        if not reply.HasField("image") or not reply.image.id:
            return None
        image = reply.image
        return image.id, [*image.repo_tags, *image.repo_digests], image.pinned

    return status


def forwarded_outcome(code_name: str) -> str:
    """The outcome of a forwarded call by the runtime's status code name ("OK" or another)."""
    return REQUEST_FORWARDED if code_name == "OK" else REQUEST_FAILED


class JournalWriter:
    """Appends entries to the journal on a thread of its own, in the order they came."""

    def __init__(self, directory: str, log: LogFn) -> None:
        self.journal = Journal(directory)
        self.log = log
        self._queue: queue.Queue[Optional[RemoveRequest]] = queue.Queue(QUEUED_ENTRIES)
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="cri-proxy-journal", daemon=True)
        self._thread.start()

    def put(self, entry: RemoveRequest) -> None:
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            self._warn("the journal does not keep up; a RemoveImage entry was dropped")

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (for up to timeout seconds), then stop."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            entry = self._queue.get()
            if entry is None:
                return
            try:
                self.journal.append(entry)
            except (JournalError, OSError) as err:
                self._warn(f"cannot write the journal in {self.journal.directory}: {err}")
            else:
                self._failing = False

    def _warn(self, text: str) -> None:
        if not self._failing:  # one line per stretch of failures, not one per call
            self.log("warning", text + "; calls go on unrecorded")
        self._failing = True

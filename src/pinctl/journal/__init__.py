"""The deletion journal's entries and their one-line-of-JSON form.

Three kinds of entry, each one line of JSON in the journal's files (pinctl.journal.store):

- ``deleted``: an image reference went from the node (`sync --watch` saw it go): when, which
  references, the image, whether pinctl wanted it and whether it was pinned at that moment, and
  who deleted it as far as the node can tell, with the evidence for that verdict.
- ``remove-request``: a RemoveImage that `cri-proxy` saw, from which client, and what became of
  it (forwarded, refused as pinned). The watcher joins a deletion to the request before it.
- ``restored``: a wanted image deleted anyway and brought back (imported again, pulled again),
  or the attempt that failed.

Every line carries ``v``, the version of this format. A reader skips a line of a newer version
and says so once; it never stops on one. Times are RFC 3339 in UTC with milliseconds, so that
the files read well with `less` and `grep`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, Optional, Union

JOURNAL_VERSION = 1
DEFAULT_DIR = "/var/lib/pinctl/history"

KIND_DELETED = "deleted"
KIND_REMOVE_REQUEST = "remove-request"
KIND_RESTORED = "restored"

# Who deleted an image, as far as the node can tell (Deletion.deleter); Deletion.evidence says how.
DELETER_KUBELET = "kubelet"  # a RemoveImage from the kubelet, seen by cri-proxy (its GC: it removes nothing else)
DELETER_CRI_CLIENT = "cri-client"  # a RemoveImage from another CRI client (crictl rmi), seen by cri-proxy
DELETER_OUTSIDE_CRI = "outside-cri"  # cri-proxy ran and saw no RemoveImage for it: ctr, nerdctl, docker rmi
DELETER_KUBELET_LOG = "kubelet-log"  # no cri-proxy, but the kubelet's own log names the image ID
DELETER_UNKNOWN = "unknown"  # nothing on the node says
DELETERS = (DELETER_KUBELET, DELETER_CRI_CLIENT, DELETER_OUTSIDE_CRI, DELETER_KUBELET_LOG, DELETER_UNKNOWN)

# What became of a RemoveImage that cri-proxy saw (RemoveRequest.outcome).
REQUEST_FORWARDED = "forwarded"  # passed to the runtime, which answered OK
REQUEST_FAILED = "failed"  # passed to the runtime, which answered an error (detail says which)
REQUEST_REFUSED = "refused"  # refused by cri-proxy: the image is pinned (detail names the pin)
REQUEST_OUTCOMES = (REQUEST_FORWARDED, REQUEST_FAILED, REQUEST_REFUSED)

# How a restore went (Restore.outcome).
RESTORE_DONE = "restored"
RESTORE_FAILED = "failed"
RESTORE_SKIPPED = "skipped"  # not tried: over the disk budget, no source to restore from


@dataclass(frozen=True)
class Deletion:
    """References that went from the node, all of one image, seen within a moment of each other."""

    time: float  # seconds since the epoch, when the watcher saw the first of them go
    runtime: str  # "containerd", "docker" or "cri-o"
    namespace: str  # the containerd namespace ("k8s.io", "moby"); "" where the runtime has none
    refs: tuple[str, ...]  # the references that went, as the runtime names them
    image_id: str = ""  # "sha256:..." (the config digest, what the kubelet and crictl call the image ID); "" unknown
    size: Optional[int] = None  # bytes, as the runtime reported the image; None unknown
    image_gone: bool = True  # no reference of the image is left (False: an untag; the image stays)
    wanted: tuple[str, ...] = ()  # why pinctl wanted it kept ("pattern web:*", "import_dirs /dir", "pin"); () not wanted
    pinned: tuple[str, ...] = ()  # how it was pinned the moment before ("label", "runtime config FILE", "cri"); () not
    deleter: str = DELETER_UNKNOWN  # one of DELETERS
    client: str = ""  # the CRI client's process name where cri-proxy saw it ("kubelet", "crictl")
    evidence: str = ""  # one sentence: what the deleter verdict rests on
    kind: str = field(default=KIND_DELETED, init=False)


@dataclass(frozen=True)
class RemoveRequest:
    """A RemoveImage that cri-proxy saw."""

    time: float
    ref: str  # the request's image spec, as the client sent it
    outcome: str  # one of REQUEST_OUTCOMES
    image_id: str = ""  # the image it named, where cri-proxy could tell
    client: str = ""  # the calling process's name (its /proc/PID/comm), "" unknown
    pid: int = 0  # the calling process, from the socket's peer credentials; 0 unknown
    detail: str = ""  # the runtime's error, or the pin that refused it
    kind: str = field(default=KIND_REMOVE_REQUEST, init=False)


@dataclass(frozen=True)
class Restore:
    """A wanted image deleted anyway, and what was done to bring it back."""

    time: float
    refs: tuple[str, ...]
    outcome: str  # RESTORE_DONE, RESTORE_FAILED or RESTORE_SKIPPED
    how: str = ""  # "import ARCHIVE", "pull"
    image_id: str = ""
    detail: str = ""  # the error, or why it was skipped
    namespace: str = ""
    runtime: str = ""
    kind: str = field(default=KIND_RESTORED, init=False)


Entry = Union[Deletion, RemoveRequest, Restore]
_TYPES: dict[str, type] = {KIND_DELETED: Deletion, KIND_REMOVE_REQUEST: RemoveRequest, KIND_RESTORED: Restore}
_TUPLES = ("refs", "wanted", "pinned")


class NewerEntry(ValueError):
    """A line written by a newer pinctl: another version of the format, or a kind this one lacks."""


def stamp(seconds: float) -> str:
    """RFC 3339 in UTC with milliseconds: 2026-12-06T14:03:01.123Z."""
    moment = datetime.fromtimestamp(seconds, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_stamp(text: str) -> float:
    """The seconds of a stamp(); ValueError for anything else."""
    if not text.endswith("Z"):
        raise ValueError(f"not a UTC time: {text!r}")
    return datetime.fromisoformat(text[:-1] + "+00:00").timestamp()


def encode(entry: Entry) -> str:
    """One line of JSON, without its newline; keys in a fixed order, so lines diff and grep well."""
    data: dict[str, Any] = {"v": JOURNAL_VERSION, "kind": entry.kind, "time": stamp(entry.time)}
    for name, value in vars(entry).items():
        if name in ("kind", "time"):
            continue
        data[name] = list(value) if isinstance(value, tuple) else value
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def decode(line: str) -> Entry:
    """The entry of one line. ValueError for a line that is not one of ours (corrupt, cut short);
    NewerEntry for one a newer pinctl wrote."""
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    version = data.pop("v", None)
    if not isinstance(version, int):
        raise ValueError("no version")
    if version > JOURNAL_VERSION:
        raise NewerEntry(f"journal version {version}")
    kind = data.pop("kind", None)
    cls = _TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise NewerEntry(f"kind {kind!r}")
    time_text = data.pop("time", None)
    if not isinstance(time_text, str):
        raise ValueError("no time")
    values: dict[str, Any] = {"time": parse_stamp(time_text)}
    known = {spec.name for spec in fields(cls) if spec.name not in ("kind", "time")}
    for name, value in data.items():
        if name not in known:
            continue  # a field a later release of this version added: ignored, as JSON readers do
        if name in _TUPLES:
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise ValueError(f"{name} is not a list of strings")
            value = tuple(value)
        values[name] = value
    try:
        entry: Entry = cls(**values)
    except TypeError as err:  # a required field missing
        raise ValueError(str(err)) from None
    _check_types(entry)
    return entry


def _check_types(entry: Entry) -> None:
    for spec in fields(entry):
        name = spec.name
        value = getattr(entry, name)
        default = spec.default
        if name == "size":
            ok = value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)
        elif isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, str) or name in ("ref", "outcome", "runtime", "namespace"):
            ok = isinstance(value, str)
        else:
            ok = True
        if not ok:
            raise ValueError(f"{name} has the wrong type")

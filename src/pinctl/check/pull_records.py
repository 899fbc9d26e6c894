"""The kubelet's image pull records (KEP-2535) under its root dir, read as the kubelet reads them:
image_manager/pulled/sha256-<sha256 of the image ID> (ImagePulledRecord) and
image_manager/pulling/sha256-<sha256 of the pod's image name> (ImagePullIntent), JSON in the
kubelet.config.k8s.io group, decoded strictly (an unknown field fails).

The files are untrusted input: each one read is checked whole, and what is wrong with it is one
line in problems, never an exception. Only the records of the images asked about are read.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Optional, Sequence

from pinctl.check.credentials import (Credentials, IntentEntry, KubeletPolicy, PulledEntry, PulledRecord, Unreadable,
                                      policy_from_config)
from pinctl.errors import PinctlError
from pinctl.gc.kubelet import DEFAULT_CONFIG, read_kubelet_config

IMAGE_MANAGER = "image_manager"
GROUP = "kubelet.config.k8s.io"
# The versions kubelet 1.37 decodes (it writes v1beta1, and migrates v1alpha1 on start).
VERSIONS = (f"{GROUP}/v1alpha1", f"{GROUP}/v1beta1")
PULLED_KIND, INTENT_KIND = "ImagePulledRecord", "ImagePullIntent"
# A record is a few hundred bytes; a record that holds many secrets, some KiB.
MAX_RECORD_BYTES = 1 << 20
_PULLED_FIELDS = {"kind", "apiVersion", "lastUpdatedTime", "imageRef", "credentialMapping"}
_INTENT_FIELDS = {"kind", "apiVersion", "image"}
_CREDENTIAL_FIELDS = {"kubernetesSecrets", "kubernetesServiceAccounts", "nodePodsAccessible"}
_SECRET_FIELDS = {"uid", "namespace", "name", "credentialHash"}
_ACCOUNT_FIELDS = {"uid", "namespace", "name"}


def record_file(key: str) -> str:
    """The file name the kubelet gives the record of key (an image ID or an image name)."""
    return "sha256-" + hashlib.sha256(key.encode()).hexdigest()


@dataclass
class RecordsRead:
    """The records of the images asked about: pulled by image ID, intents by name."""

    directory: str
    present: bool  # the kubelet's image_manager directory exists
    pulled: dict[str, PulledEntry] = field(default_factory=dict)
    intents: dict[str, IntentEntry] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def read_records(root_dir: str, image_ids: Iterable[str], names: Iterable[str]) -> RecordsRead:
    """The pulled record of each image ID and the pull intent of each name under root_dir."""
    directory = os.path.join(root_dir, IMAGE_MANAGER)
    found = RecordsRead(directory, os.path.isdir(directory))
    if not found.present:
        return found
    for image_id in dict.fromkeys(image_ids):
        path = os.path.join(directory, "pulled", record_file(image_id))
        entry, problem = _read(path, lambda raw: parse_pulled(raw, path, image_id))
        found.pulled[image_id] = entry
        _note(found, path, problem)
    for name in dict.fromkeys(names):
        path = os.path.join(directory, "pulling", record_file(name))
        intent, problem = _read(path, lambda raw: parse_intent(raw, path, name))
        found.intents[name] = intent
        _note(found, path, problem)
    return found


# One line for the whole directory, however many records it holds.
_DENIED = "permission denied"


def _note(found: RecordsRead, path: str, problem: Optional[str]) -> None:
    line = (f"kubelet records {found.directory}: permission denied: run pinctl as root" if problem == _DENIED
            else f"kubelet record {path}: {problem}")
    if problem and line not in found.problems and all(path not in known for known in found.problems):
        found.problems.append(line)


def _read(path: str, parse: Any) -> tuple[Any, Optional[str]]:
    """(entry, problem) for one record file: None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except IsADirectoryError:
        return _unreadable(path, "is a directory, not a file")
    except PermissionError:
        return Unreadable(path, "permission denied", certain=False), _DENIED
    except OSError as err:
        return _unreadable(path, f"cannot be read: {os.strerror(err.errno or errno.EIO)}")
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            return _unreadable(path, "is a directory, not a file")
        if not stat.S_ISREG(mode):
            # The kubelet would read a FIFO or device; pinctl reads only files, and cannot tell.
            return Unreadable(path, "not a regular file", certain=False), "is not a regular file: not read"
        raw = os.read(fd, MAX_RECORD_BYTES + 1)
    except OSError as err:
        return _unreadable(path, f"cannot be read: {os.strerror(err.errno or errno.EIO)}")
    finally:
        os.close(fd)
    if len(raw) > MAX_RECORD_BYTES:
        return Unreadable(path, "larger than 1 MiB", certain=False), "is larger than 1 MiB: not read"
    return parse(raw)


def _unreadable(path: str, problem: str) -> tuple[Unreadable, str]:
    return Unreadable(path, problem), problem


class _Bad(ValueError):
    """What makes a record undecodable, in a few words."""


def _document(raw: bytes, kind: str, fields: set[str]) -> tuple[dict[str, Any], Optional[Unreadable]]:
    """The record's object; raises _Bad. The second value: a record of the kubelet's group in a
    version pinctl does not know (a newer kubelet's), or of another group (no kubelet's)."""
    try:
        document = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError:
        raise _Bad("not UTF-8 text") from None
    except ValueError as err:
        raise _Bad(f"not JSON ({str(err).splitlines()[0]})") from None
    if not isinstance(document, dict):
        raise _Bad(f"not a JSON object but {type(document).__name__}")
    version = document.get("apiVersion")
    if not isinstance(version, str) or not version:
        raise _Bad("no apiVersion")
    if document.get("kind") != kind:
        raise _Bad(f"kind is {document.get('kind')!r}, not {kind}")
    if version not in VERSIONS:
        if version.startswith(GROUP + "/"):
            return document, Unreadable("", f"apiVersion {version!r} is not one pinctl reads ({', '.join(VERSIONS)})",
                                        certain=False)
        raise _Bad(f"apiVersion {version!r} is not the kubelet's ({GROUP})")
    unknown = sorted(set(document) - fields)
    if unknown:
        raise _Bad(f"unknown field {unknown[0]!r} (the kubelet decodes strictly)")
    return document, None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"duplicate field {key!r}")
        found[key] = value
    return found


def parse_pulled(raw: bytes, path: str, image_ref: str) -> tuple[PulledEntry, Optional[str]]:
    """An ImagePulledRecord file's content: the record, or Unreadable, and the problem line.
    A record naming another image ID counts as none, as for the kubelet."""
    try:
        document, newer = _document(raw, PULLED_KIND, _PULLED_FIELDS)
        if newer:
            return Unreadable(path, newer.problem, certain=False), newer.problem
        ref = document.get("imageRef")
        if not isinstance(ref, str):
            raise _Bad("imageRef is not a string")
        _check_time(document.get("lastUpdatedTime"))
        mapping = _mapping(document.get("credentialMapping"))
    except _Bad as bad:
        return Unreadable(path, str(bad)), str(bad)
    if ref != image_ref:
        return None, f"names image {ref!r}, not {image_ref!r}: the kubelet ignores it"
    return PulledRecord(path, ref, mapping), None


def parse_intent(raw: bytes, path: str, name: str) -> tuple[IntentEntry, Optional[str]]:
    """An ImagePullIntent file's content: True when it is name's, Unreadable, and the problem line."""
    try:
        document, newer = _document(raw, INTENT_KIND, _INTENT_FIELDS)
        if newer:
            return Unreadable(path, newer.problem, certain=False), newer.problem
        image = document.get("image")
        if not isinstance(image, str):
            raise _Bad("image is not a string")
    except _Bad as bad:
        return Unreadable(path, str(bad)), str(bad)
    if image != name:
        return None, f"names image {image!r}, not {name!r}: the kubelet ignores it"
    return True, None


def _check_time(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise _Bad("lastUpdatedTime is not a time")
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _Bad(f"lastUpdatedTime {value!r} is not an RFC 3339 time") from None


def _mapping(value: Any) -> dict[str, Credentials]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Bad("credentialMapping is not an object")
    return {name: _credentials(name, entry) for name, entry in value.items()}


def _credentials(name: str, entry: Any) -> Credentials:
    if not isinstance(entry, dict):
        raise _Bad(f"credentialMapping[{name!r}] is not an object")
    unknown = sorted(set(entry) - _CREDENTIAL_FIELDS)
    if unknown:
        raise _Bad(f"credentialMapping[{name!r}] has unknown field {unknown[0]!r}")
    node_wide = entry.get("nodePodsAccessible", False)
    if not isinstance(node_wide, bool):
        raise _Bad(f"credentialMapping[{name!r}].nodePodsAccessible is not true or false")
    secrets = _named(entry.get("kubernetesSecrets"), _SECRET_FIELDS, f"credentialMapping[{name!r}].kubernetesSecrets")
    accounts = _named(entry.get("kubernetesServiceAccounts"), _ACCOUNT_FIELDS,
                      f"credentialMapping[{name!r}].kubernetesServiceAccounts")
    return Credentials(node_wide, secrets, accounts)


def _named(value: Any, fields: set[str], where: str) -> tuple[str, ...]:
    """namespace/name of each secret or service account."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _Bad(f"{where} is not a list")
    found = []
    for item in value:
        if not isinstance(item, dict):
            raise _Bad(f"{where} holds {type(item).__name__}, not an object")
        unknown = sorted(set(item) - fields)
        if unknown:
            raise _Bad(f"{where} has unknown field {unknown[0]!r}")
        if any(not isinstance(item.get(key, ""), str) for key in fields):
            raise _Bad(f"{where} has a field that is not a string")
        found.append(f"{item.get('namespace', '')}/{item.get('name', '')}")
    return tuple(found)


@dataclass(frozen=True)
class KubeletSide:
    """The kubelet's verification settings and where its records are, when this node has a kubelet."""

    policy: KubeletPolicy
    config: Optional[str]  # the config file read; None: none, the kubelet's defaults
    root_dir: str
    problems: list[str]

    def read(self, image_ids: Sequence[str], names: Sequence[str]) -> RecordsRead:
        return read_records(self.root_dir, image_ids, names)


def kubelet_side(config_path: Optional[str], root_dir: str) -> Optional[KubeletSide]:
    """The kubelet's policy from config_path (else its default file when it exists) and its root
    dir; None when neither a config file nor the records' directory is there (no kubelet here).
    A config file given that cannot be read is a ConfigError; the default one, a problem line."""
    where = config_path or DEFAULT_CONFIG
    document: Optional[dict[str, Any]] = None
    problems: list[str] = []
    if config_path is not None or os.path.exists(where):
        try:
            document = read_kubelet_config(where)
        except PinctlError as err:
            if config_path is not None:
                raise
            problems.append(f"{err.message}: the kubelet's default policy is assumed")
    if document is None and not problems and not os.path.isdir(os.path.join(root_dir, IMAGE_MANAGER)):
        return None
    policy, more = policy_from_config(document, where)
    return KubeletSide(policy, where if document is not None else None, root_dir, [*problems, *more])

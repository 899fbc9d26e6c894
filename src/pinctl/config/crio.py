"""CRI-O's configuration as CRI-O (v1.34.0) sees it: pinned_images and pause_image.

CRI-O reads crio.conf, then every file below crio.conf.d in the order Go's filepath.Walk
visits them (lexical, subdirectories included, dot files too); for a key, the last file that
sets it replaces what the earlier ones gave. It pins each image whose NAMES (tags, digested
names; never the ID) match an item, and always adds its pause_image to the list.

pinctl writes its own drop-in, PINCTL_DROPIN_NAME, named to sort after the usual NN-name.conf
files. Since the last file wins, that drop-in must carry over the site's own list: each item
there has a trailing comment saying whose it is ("# site: path:line", "# pinctl: pin",
"# pinctl: sync"), which is how reading it back tells pinctl's entries from the copy.

Pure reading (and writing of the drop-in): nothing here prints.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Optional, Sequence

from pinctl.config.files import LineIndex, key_line, list_directory, list_item_lines, os_error_text, read_toml, toml_reader
from pinctl.errors import ConfigError, PinctlError

CRIO_DEFAULT_PATH = "/etc/crio/crio.conf"
PINCTL_DROPIN_NAME = "zz-pinctl.conf"
# pkg/config/config_linux.go, DefaultPauseImage, in CRI-O v1.34.0.
PAUSE_IMAGE_DEFAULT = "registry.k8s.io/pause:3.10"
PAUSE_DEFAULT_WHERE = "CRI-O's default"

Owner = Literal["site", "pin", "sync"]

PINNED_KEY = "pinned_images"
PAUSE_KEY = "pause_image"
HEADER_MARK = "# Written by pinctl"
_FIX = "give the path of CRI-O's crio.conf"
_EXAMPLE = f'e.g. {PINNED_KEY} = ["registry.example/team/*"] under [crio.image]'
# One item per line as render_dropin writes it: the string, a comma, a trailing comment.
_ITEM_LINE = re.compile(r'^\s*("(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\')\s*,?\s*(?:#(?P<comment>.*))?$')
_OWN_COMMENT = re.compile(r"^\s*pinctl:\s*(?P<owner>pin|sync)\s*$")


@dataclass(frozen=True)
class CrioEntry:
    text: str  # the item exactly as written
    path: str
    line: int  # 1-based line of the item in its file (0 if unknown)
    owner: Owner = "site"

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


@dataclass(frozen=True)
class CrioConfig:
    main_path: str
    dropin_dir: str
    files: tuple[str, ...]
    pinned_images: tuple[CrioEntry, ...]
    pinned_from: Optional[str]
    pause_image: str
    pause_where: str
    site_entries: tuple[CrioEntry, ...]
    own_entries: tuple[CrioEntry, ...]
    overriding: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def dropin_path(self) -> str:
        return os.path.join(self.dropin_dir, PINCTL_DROPIN_NAME)


@dataclass(frozen=True)
class _File:
    path: str
    pinned: Optional[tuple[CrioEntry, ...]]  # None: the file leaves the key alone
    pause: Optional[tuple[str, str]]  # (value, where)
    copies: frozenset[int] = frozenset()  # lines of pinctl's drop-in carrying a '# site:' copy


def read_crio_config(path: str = CRIO_DEFAULT_PATH, explicit: bool = False,
                     dropin_dir: Optional[str] = None) -> CrioConfig:
    """CRI-O's effective pinned_images and pause_image from path and its drop-in directory
    (dropin_dir, CRI-O's --config-dir; path.d when not given).

    Raise ConfigError (one line naming the file, with a fix) on a file that cannot be read or
    parsed; a missing default path with no drop-ins is an empty config (CRI-O's defaults), a
    missing explicit one is an error. As root, files and directories others could change are
    refused (config.files.read_toml): whoever can edit them decides what CRI-O keeps.
    """
    dropin_dir = dropin_dir or f"{path}.d"
    dropin = os.path.join(dropin_dir, PINCTL_DROPIN_NAME)
    read = [_read_file(file, data, text, file == dropin) for file, data, text in _files(path, dropin_dir, explicit)]
    setting = [f for f in read if f.pinned is not None]
    effective = setting[-1] if setting else None
    site_files = [f for f in setting if f.path != dropin]
    own_file = next((f for f in setting if f.path == dropin), None)
    site = list(site_files[-1].pinned or ()) if site_files else []
    # Items added to pinctl's drop-in by hand (no owner comment) are the site's too: carry them over.
    if own_file is not None:
        site += [e for e in own_file.pinned or ()
                 if e.owner == "site" and e.path == own_file.path and e.line not in own_file.copies]
    own = tuple(e for e in (own_file.pinned or ()) if e.owner != "site") if own_file else ()
    pause = next((f.pause for f in reversed(read) if f.pause is not None), None)
    overriding = tuple(f.path for f in setting if _sorts_after_dropin(f.path, dropin_dir))
    pinned = tuple(effective.pinned or ()) if effective else ()
    return CrioConfig(
        main_path=path, dropin_dir=dropin_dir, files=tuple(f.path for f in read), pinned_images=pinned,
        pinned_from=effective.path if effective else None,
        pause_image=pause[0] if pause else PAUSE_IMAGE_DEFAULT, pause_where=pause[1] if pause else PAUSE_DEFAULT_WHERE,
        site_entries=_unique(site), own_entries=own, overriding=overriding,
        warnings=tuple(dict.fromkeys(w for e in (*pinned, *site) for w in _item_warnings(e))))


def _unique(entries: Sequence[CrioEntry]) -> tuple[CrioEntry, ...]:
    seen: set[str] = set()
    kept: list[CrioEntry] = []
    for entry in entries:
        if entry.text not in seen:
            seen.add(entry.text)
            kept.append(entry)
    return tuple(kept)


def _item_warnings(entry: CrioEntry) -> Iterator[str]:
    # CRI-O compiles an empty or blank item to ^$ or ^  $ (QuoteMeta keeps the spaces): no name
    # is that, so it starts and pins the other names; a lone * makes it panic at start.
    if not entry.text.strip():
        yield (f"{entry.where}: pinned_images item {entry.text!r} is {'empty' if not entry.text else 'blank'}: "
               "CRI-O reads it as an exact name no image has, so it pins nothing")
    elif entry.text == "*":
        yield f"{entry.where}: pinned_images item '*' makes CRI-O crash at start; name a prefix such as registry.example/*"


def _sorts_after_dropin(path: str, dropin_dir: str) -> bool:
    """Whether filepath.Walk reaches path after pinctl's drop-in: its first component below the
    drop-in directory sorts after the drop-in's name (Go compares bytes; for UTF-8 that is the
    order of code points, which is Python's)."""
    relative = os.path.relpath(path, dropin_dir)
    if relative.startswith(os.pardir):
        return False  # crio.conf itself, read before every drop-in
    return relative.split(os.sep, 1)[0] > PINCTL_DROPIN_NAME


# -- reading the files -------------------------------------------------------------------


def _files(path: str, dropin_dir: str, explicit: bool) -> Iterator[tuple[str, Any, str]]:
    main = read_toml(path, "CRI-O config", missing_ok=not explicit, fix=_FIX)
    if main is not None:
        yield (path, *main)
    for dropin in _dropins(dropin_dir):
        parsed = read_toml(dropin, "CRI-O drop-in", missing_ok=False, fix=f"check {dropin_dir}")
        if parsed is not None:
            yield (dropin, *parsed)


def _dropins(directory: str) -> list[str]:
    """Files below a CRI-O drop-in directory in the order Go's filepath.Walk visits them."""
    try:
        names = list_directory(directory)
    except NotADirectoryError:
        return []
    except PermissionError:
        raise ConfigError(f"cannot read CRI-O's drop-ins in {directory}", "run pinctl as root (sudo)") from None
    except OSError as err:
        raise ConfigError(f"cannot read CRI-O's drop-ins in {directory}: {os_error_text(err)}", _FIX) from None
    found: list[str] = []
    for name in sorted(names or []):
        child = os.path.join(directory, name)
        # As filepath.Walk: a symlink is a file, even one to a directory (which is then an error).
        found += _dropins(child) if _is_directory_itself(child) else [child]
    return found


def _is_directory_itself(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False  # read as a file, which names the problem


def _read_file(path: str, data: dict[str, Any], text: str, is_dropin: bool) -> _File:
    crio = data.get("crio")
    image = crio.get("image", {}) if isinstance(crio, dict) else {}
    if not isinstance(image, dict):
        image = {}
    lines = LineIndex(text)
    pause: Optional[tuple[str, str]] = None
    if PAUSE_KEY in image:
        value = image[PAUSE_KEY]
        where = _where(path, key_line(text, PAUSE_KEY, lines))
        if not isinstance(value, str):
            raise ConfigError(f"{where}: key '{PAUSE_KEY}' must be a string, got {_shown(value)}",
                              f'e.g. {PAUSE_KEY} = "{PAUSE_IMAGE_DEFAULT}" under [crio.image]')
        pause = (value, where) if value else None  # CRI-O keeps its default for ""
    if PINNED_KEY not in image:
        return _File(path, None, pause)
    items = _checked_items(image[PINNED_KEY], _where(path, key_line(text, PINNED_KEY, lines)))
    entries, copies = _entries(path, text, items, lines, is_dropin)
    return _File(path, entries, pause, copies)


def _checked_items(raw: Any, where: str) -> tuple[str, ...]:
    """The list as CRI-O's TOML decoder takes it; empty items are read, not refused (CRI-O
    starts with them)."""
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: key '{PINNED_KEY}' must be a list of strings, got {_shown(raw)}", _EXAMPLE)
    for index, item in enumerate(raw, 1):
        if not isinstance(item, str):
            raise ConfigError(f"{where}: key '{PINNED_KEY}' must be a list of strings, item {index} is "
                              f"{_shown(item)}", _EXAMPLE)
    return tuple(raw)


def _entries(path: str, text: str, items: tuple[str, ...], lines: LineIndex,
             is_dropin: bool) -> tuple[tuple[CrioEntry, ...], frozenset[int]]:
    """The entries, and in pinctl's drop-in the lines whose comment says they are the site's
    (a carried-over copy, not an entry of the drop-in's own)."""
    scanned = _scan_items(text, lines)
    if scanned is not None and [value for value, _, _ in scanned] == list(items):
        found: list[CrioEntry] = []
        copies: set[int] = set()
        for value, line, comment in scanned:
            owner = _owner(comment) if is_dropin else "site"
            if is_dropin and (comment or "").strip().startswith("site:"):
                copies.add(line)
                # A carried-over copy is named by where the site wrote it: that is what to edit.
                origin, _, at = (comment or "").strip()[len("site:"):].strip().rpartition(":")
                if origin and at.isdigit():
                    found.append(CrioEntry(value, origin, int(at), owner))
                    continue
            found.append(CrioEntry(value, path, line, owner))
        return tuple(found), frozenset(copies)
    item_lines = list_item_lines(text, PINNED_KEY, items, lines)
    return tuple(CrioEntry(item, path, line or 0) for item, line in zip(items, item_lines)), frozenset()


def _owner(comment: Optional[str]) -> Owner:
    own = _OWN_COMMENT.match(comment or "")
    if own is None:
        return "site"
    return "pin" if own["owner"] == "pin" else "sync"


def _scan_items(text: str, lines: LineIndex) -> Optional[list[tuple[str, int, Optional[str]]]]:
    """(value, line, trailing comment) of each item of a pinned_images written one item per
    line, as render_dropin writes it; None when it is written otherwise."""
    match = re.search(rf"(?m)^[ \t]*{PINNED_KEY}[ \t]*=[ \t]*\[[ \t]*(#.*)?$", text)
    if match is None:
        return None
    first = lines.at(match.start()) + 1
    found: list[tuple[str, int, Optional[str]]] = []
    for number, line in enumerate(text.splitlines()[first - 1 :], first):
        if re.fullmatch(r"\s*\]\s*(#.*)?", line):
            return found
        if not line.strip() or line.strip().startswith("#"):
            continue
        item = _ITEM_LINE.match(line)
        if item is None:
            return None
        try:
            value = toml_reader().loads(f"v = {item.group(1)}")["v"]
        except Exception:  # not a string this reading follows: let the general reading name lines
            return None
        found.append((value, number, item["comment"]))
    return None


def _where(path: str, line: Optional[int]) -> str:
    return f"{path}:{line}" if line else path


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return str(value)


# -- pinctl's drop-in --------------------------------------------------------------------


def render_dropin(site: Sequence[CrioEntry], own: Sequence[tuple[str, Owner]]) -> str:
    """pinctl's drop-in: the site's effective entries, each with '# site: <path>:<line>', then
    pinctl's own with '# pinctl: pin' or '# pinctl: sync'; first of equal items wins."""
    lines = [
        f"{HEADER_MARK}; do not edit: pinctl rewrites this file. The last file in",
        "# crio.conf.d that sets pinned_images replaces the lists before it, so the site's",
        "# own items are carried over here ('# site:'); edit them where they came from.",
        "# Make CRI-O read it: systemctl reload crio (or kill -HUP $(pidof crio)).",
        "[crio.image]",
        f"{PINNED_KEY} = [",
    ]
    seen: set[str] = set()
    items = [(e.text, f"site: {e.where}") for e in site] + [(text, f"pinctl: {owner}") for text, owner in own]
    for text, comment in items:
        if text in seen:
            continue
        seen.add(text)
        lines.append(f"  {_toml_string(text)},  # {_comment_safe(comment)}")
    lines.append("]")
    return "\n".join(lines) + "\n"


def _toml_string(value: str) -> str:
    """A TOML basic string: TOML forbids raw control characters (DEL too), and JSON's escapes
    would split astral characters into surrogates TOML refuses, hence this."""
    out = ['"']
    for char in value:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _comment_safe(text: str) -> str:
    # A newline in a path would end the comment and break the file; TOML comments take no controls.
    return "".join("?" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in text)


def write_dropin(path: str, text: str) -> None:
    """Write path atomically, mode 0644: a temp file beside the drop-in directory, not in it
    (CRI-O reads every file there, dot files too, so a reload must never meet a half-written
    one; its parent is on the same file system as a rule, which the rename needs), fsync,
    rename; the directory is made (0755) when missing."""
    directory = os.path.dirname(path) or "."
    staging = os.path.dirname(os.path.abspath(directory)) or directory
    temp = ""
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory, mode=0o755, exist_ok=True)
            os.chmod(directory, 0o755)  # umask must not narrow what CRI-O needs to read
        descriptor, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=staging)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), 0o644)
            os.fsync(handle.fileno())
        os.replace(temp, path)
        temp = ""
        _fsync_directory(directory)
    except PermissionError:
        raise PinctlError(f"cannot write CRI-O drop-in {path}: permission denied", "run as root (sudo)") from None
    except OSError as err:
        raise PinctlError(f"cannot write CRI-O drop-in {path}: {os_error_text(err)}",
                          f"check {directory}") from None
    finally:
        if temp:
            _remove_quietly(temp)


def _fsync_directory(directory: str) -> None:
    # The rename is durable only once the directory itself is on disk.
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

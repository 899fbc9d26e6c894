"""CRI-O's configuration as CRI-O (v1.34.0) sees it: pinned_images and pause_image.

CRI-O reads crio.conf, then every regular file below crio.conf.d in the order Go's
filepath.Walk visits them (lexical, subdirectories included, dot files and names without .conf
too); for a key, the last file that sets it replaces what the earlier ones gave. It pins each
image whose NAMES (tags, digested names; never the ID) match an item, and always adds its
pause_image to the list. Each file is decoded into typed structs, so a file where crio or
crio.image is not a table makes CRI-O refuse it, and so does this reading. filepath.Walk does not
follow a drop-in directory that is itself a symlink (CRI-O then fails on it with "is a
directory" and reads no drop-in), so such a directory is refused here too; symlinks to files
inside it are followed, as CRI-O does.

pinctl writes its own drop-in, PINCTL_DROPIN_NAME, named to sort after the usual NN-name.conf
files. Since the last file wins, that drop-in must carry over the site's own list: each item
there has a trailing comment saying whose it is ("# site: path:line" with the path as CRI-O
sees it, "# pinctl: pin", "# pinctl: sync"), which is how reading it back tells pinctl's
entries from the copy. The drop-in is written in the directory itself, under a name only once
it is whole (write_dropin); a temporary name a killed run left there (is_temp_name) is CRI-O's
to read but never the site's list, and the next write removes it.

Pure reading (and writing of the drop-in): nothing here prints.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Optional, Sequence

from pinctl.config import files as config_files
from pinctl.config.files import LineIndex, key_line, list_directory, list_item_lines, os_error_text, read_toml, toml_reader
from pinctl.errors import ConfigError, PinctlError

# CRI-O's own defaults for --config and --config-dir (pkg/config: CrioConfigPath, CrioConfigDropInPath).
CRIO_DEFAULT_PATH = "/etc/crio/crio.conf"
CRIO_DEFAULT_DIR = f"{CRIO_DEFAULT_PATH}.d"
PINCTL_DROPIN_NAME = "zz-pinctl.conf"
# write_dropin's temporary names, in the drop-in directory: .zz-pinctl.conf.<random>.tmp
TEMP_PREFIX = f".{PINCTL_DROPIN_NAME}."
TEMP_SUFFIX = ".tmp"
_TEMP_NAME = re.compile(rf"{re.escape(TEMP_PREFIX)}[A-Za-z0-9_]+{re.escape(TEMP_SUFFIX)}")
# Another process's root: node.crio reads CRI-O's files through it when CRI-O has its own mounts.
_PROCESS_ROOT = re.compile(r"/proc/[0-9]+/root(?=/|$)")
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
    # A temporary name of pinctl's (a killed run's) holds pinctl's items, not the site's.
    # A file read after pinctl's drop-in is no site list to carry over: it replaces pinctl's list
    # itself (overriding), and a copy of it would outlive it as if the site still set it.
    site_files = [f for f in setting if f.path != dropin and not _is_own_temp(f.path, dropin_dir)
                  and not _sorts_after_dropin(f.path, dropin_dir)]
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
    if os.path.islink(dropin_dir):
        target, resolved = _link_target(dropin_dir)
        raise ConfigError(f"CRI-O's drop-in directory {dropin_dir} is a symlink (to {target}); CRI-O reads it as one "
                          "file and fails ('is a directory'), so it reads none of the drop-ins there",
                          f"replace the link with the directory it points to, or start CRI-O with --config-dir {resolved}")
    for dropin in _dropins(dropin_dir):
        try:
            parsed = read_toml(dropin, "CRI-O drop-in", missing_ok=False, fix=f"check {dropin_dir}")
        except ConfigError as err:
            if _is_own_temp(dropin, dropin_dir):
                raise ConfigError(err.message, f"a killed pinctl run left it; remove it: rm {dropin}") from None
            raise
        if parsed is not None:
            yield (dropin, *parsed)


def _link_target(link: str) -> tuple[str, str]:
    """What a symlink says, and the directory it names as CRI-O would be given it."""
    target = os.readlink(link)
    seen = as_crio_sees_it(link)
    if seen == link:
        return target, os.path.realpath(link)
    # Read through /proc/PID/root: resolving here would leave CRI-O's root; join as CRI-O would.
    return target, os.path.normpath(os.path.join(os.path.dirname(seen), target))


def _is_own_temp(path: str, dropin_dir: str) -> bool:
    return os.path.dirname(path) == dropin_dir.rstrip("/") and is_temp_name(os.path.basename(path))


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
    lines = LineIndex(text)
    crio = data.get("crio", {})
    if not isinstance(crio, dict):
        raise ConfigError(f"{_where(path, key_line(text, 'crio', lines))}: key 'crio' must be a table, got "
                          f"{_shown(crio)}; CRI-O refuses this file (type mismatch)",
                          "write it as [crio] with its keys under it")
    image = crio.get("image", {})
    if not isinstance(image, dict):
        # Written as crio.image = ... the key's line is the one that starts with crio.
        line = key_line(text, "image", lines) or key_line(text, "crio", lines)
        raise ConfigError(f"{_where(path, line)}: key 'image' under [crio] must be a table, got {_shown(image)}; "
                          "CRI-O refuses this file (type mismatch)", "write it as [crio.image] with its keys under it")
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
    pinctl's own with '# pinctl: pin' or '# pinctl: sync'. An item of pinctl's equal to a site
    item is written too (CRI-O reads a repeated item once): it is pinctl's pin, which must outlive
    the site's item."""
    lines = [
        f"{HEADER_MARK}; do not edit: pinctl rewrites this file. The last file in",
        "# crio.conf.d that sets pinned_images replaces the lists before it, so the site's",
        "# own items are carried over here ('# site:'); edit them where they came from.",
        "# Make CRI-O read it: systemctl reload crio (or kill -HUP $(pidof crio)).",
        "[crio.image]",
        f"{PINNED_KEY} = [",
    ]
    site_items = [(e.text, f"site: {_where(as_crio_sees_it(e.path), e.line)}") for e in site]
    own_items = [(text, f"pinctl: {owner}") for text, owner in own]
    for items in (site_items, own_items):
        seen: set[str] = set()
        for text, comment in items:
            if text in seen:
                continue
            seen.add(text)
            lines.append(f"  {_toml_string(text)},  # {_comment_safe(comment)}")
    lines.append("]")
    return "\n".join(lines) + "\n"


def as_crio_sees_it(path: str) -> str:
    """path without a leading /proc/PID/root (how pinctl reaches a CRI-O with mounts of its
    own): that PID means nothing once the process is gone; the rest is CRI-O's own path."""
    found = _PROCESS_ROOT.match(path)
    return (path[found.end():] or "/") if found else path


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


def is_temp_name(name: str) -> bool:
    """Whether a file name is one of write_dropin's temporary names."""
    return _TEMP_NAME.fullmatch(name) is not None


def missing_dropin_dir(directory: str) -> PinctlError:
    """CRI-O's drop-in directory is not there: CRI-O reads only one it found at start."""
    return PinctlError(f"CRI-O's drop-in directory {directory} does not exist, and a running CRI-O reads only "
                       "the drop-in directory it found at start",
                       f"create it and restart CRI-O (mkdir -p {directory} && systemctl restart crio), "
                       "then run pinctl again")


def write_dropin(path: str, text: str) -> None:
    """Replace path with text, mode 0644, so that CRI-O (which reads every file in the drop-in
    directory, whatever its name) never reads a half-written drop-in, even on a reload meanwhile.

    The file is made in the directory itself, since a rename cannot cross file systems and
    crio.conf.d may be a mount of its own: an unnamed O_TMPFILE file, linked under a temporary
    name (TEMP_PREFIX...TEMP_SUFFIX) only once written and fsynced, then renamed over path;
    where the file system has no O_TMPFILE, a named temporary file. The caller holds the writers'
    lock (node.crio_lock, a flock on this directory), so one writer at a time gets here. A
    missing directory is not made: a running CRI-O would not read it before a restart.
    PinctlError (one line) on failure; the old drop-in is then whole and no temporary name is left.
    """
    directory = os.path.dirname(path) or "."
    if not os.path.lexists(directory):
        raise missing_dropin_dir(directory)
    try:
        directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            temp = _complete_temp(directory, directory_fd, text.encode("utf-8"))
            try:
                os.replace(temp, path)
            except BaseException:
                _remove_quietly(temp)
                raise
            # The rename is durable only once the directory itself is on disk.
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
    except PermissionError:
        raise PinctlError(f"cannot write CRI-O drop-in {path}: permission denied", "run as root (sudo)") from None
    except OSError as err:
        raise PinctlError(f"cannot write CRI-O drop-in {path}: {os_error_text(err)}",
                          f"check {directory}") from None


def remove_stale_temps(directory: str) -> list[str]:
    """Remove write_dropin's temporary files from directory; the paths removed.

    Called with the directory's lock held, so each is a killed run's. Only regular files (a
    symlink is not followed) and, as root, only root's: a name alone proves nothing.
    """
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    as_root = config_files._euid() == 0
    removed: list[str] = []
    for name in names:
        if not is_temp_name(name):
            continue
        temp = os.path.join(directory, name)
        try:
            found = os.lstat(temp)
            if not stat.S_ISREG(found.st_mode) or (as_root and found.st_uid != 0):
                continue
            os.unlink(temp)
        except OSError:
            continue  # gone meanwhile, or not ours to remove
        removed.append(temp)
    return removed


# A file system without O_TMPFILE says one of these (EISDIR: a kernel that predates it).
_NO_TMPFILE = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL)


def _complete_temp(directory: str, directory_fd: int, data: bytes) -> str:
    """A temporary name in directory (open as directory_fd) for a file holding data, mode 0644,
    on disk."""
    # os.urandom, as secrets.token_hex does: importing secrets loads OpenSSL's hashes (hmac), a
    # sixth of `pinctl ls`'s start.
    name = f"{TEMP_PREFIX}{os.urandom(8).hex()}{TEMP_SUFFIX}"
    if not os.path.isdir("/proc/self/fd"):
        return _named_temp(directory, directory_fd, name, data)  # no /proc to name an O_TMPFILE file through
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o644, dir_fd=directory_fd)
    except OSError as err:
        if err.errno not in _NO_TMPFILE:
            raise
        return _named_temp(directory, directory_fd, name, data)
    try:
        _write_all(fd, data)
        # linkat(AT_SYMLINK_FOLLOW): naming an O_TMPFILE file through /proc needs no capability.
        # A dir_fd it must have: Python 3.11 calls plain link(2), which never follows, without one.
        os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=directory_fd, follow_symlinks=True)
    finally:
        os.close(fd)
    return os.path.join(directory, name)


def _named_temp(directory: str, directory_fd: int, name: str, data: bytes) -> str:
    flags = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_WRONLY | os.O_CLOEXEC
    fd = os.open(name, flags, 0o644, dir_fd=directory_fd)
    try:
        _write_all(fd, data)
    except BaseException:
        _remove_quietly(os.path.join(directory, name))
        raise
    finally:
        os.close(fd)
    return os.path.join(directory, name)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fchmod(fd, 0o644)  # the umask must not narrow what CRI-O needs to read
    os.fsync(fd)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

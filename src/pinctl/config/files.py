"""Reading pinctl's config files safely: as root only what root alone could have written (sshd's
StrictModes, every directory up to /), only regular files, TOML parsed with one clear line for
each error, and the line each key or list item stands on."""

from __future__ import annotations

import errno
import os
import re
import stat
from bisect import bisect_left
from typing import Any, Callable, Optional, Sequence

from pinctl.errors import ConfigError

# -- reading files -----------------------------------------------------------------------


def _euid() -> int:
    """The effective uid; tests replace this to act as root or not."""
    return os.geteuid()


def _check_owner(path: str, st: os.stat_result) -> None:
    """As root, refuse what a non-root user could have written: it decides which images survive."""
    if _euid() != 0:
        return
    if st.st_uid != 0 or st.st_mode & 0o022:
        raise ConfigError(
            f"refusing {path}: it is writable by a user other than root "
            f"(owner uid {st.st_uid}, mode {st.st_mode & 0o7777:04o}) and decides which images are kept",
            f"chown root:root {path} && chmod go-w {path}",
        )


# The kernel's limit (MAXSYMLINKS): a walk that follows more is a loop, as open() would say.
_MAX_SYMLINKS = 40


def _look(path: str, guard: bool) -> os.stat_result:
    """stat() of path; FileNotFoundError when nothing is there.

    With guard, as root, path is followed one name at a time as the kernel would, and a
    directory on the way that a user other than root could change is refused, before anything
    is opened: opening is not harmless (a device, a FIFO) and nothing found through such a
    directory can be trusted.
    """
    if not (guard and _euid() == 0):
        return os.stat(path)
    found = _walk(path)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    return found


def _same_file(path: str, looked: os.stat_result, opened: os.stat_result, guard: bool) -> None:
    """As root, what was opened must be what the walk found (only root could swap it)."""
    if guard and _euid() == 0 and (looked.st_dev, looked.st_ino) != (opened.st_dev, opened.st_ino):
        raise ConfigError(f"{path} changed while pinctl read it", "run pinctl again")


_PROCESS_ROOT = re.compile(r"/proc/[0-9]+/root")


def _walk(path: str) -> Optional[os.stat_result]:
    """lstat of what path names after following its symlinks, or None when it does not exist;
    a ConfigError when a directory looked in on the way is not root's alone."""
    root = here = "/"
    here_st = os.lstat("/")
    absolute = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    pending = list(reversed(absolute.split("/")))
    found, links = here_st, 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            here = here if here == root else os.path.dirname(here)
            here_st = found = os.stat(here)
            continue
        entry = os.path.join(here, name)
        try:
            found = os.lstat(entry)
        except FileNotFoundError:
            _check_directory(path, here, here_st, entry, None)
            return None
        _check_directory(path, here, here_st, entry, found)
        if stat.S_ISLNK(found.st_mode) and _PROCESS_ROOT.fullmatch(entry):
            # Another process's root, in its own mount namespace (node.crio reads CRI-O's files
            # so): its readlink says only "/", so the walk goes on through the link itself.
            root = here = entry
            here_st = found = os.stat(entry)
        elif stat.S_ISLNK(found.st_mode):
            links += 1
            if links > _MAX_SYMLINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            target = os.readlink(entry)
            pending += reversed(target.split("/"))
            if target.startswith("/"):
                here, here_st = root, os.stat(root)
        elif pending and not stat.S_ISDIR(found.st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        else:
            here, here_st = entry, found
    return found


def _check_directory(path: str, directory: str, st: os.stat_result, entry: str,
                     entry_st: Optional[os.stat_result]) -> None:
    """Refuse looking up entry in a directory someone other than root could change it in.

    sshd refuses every group- or world-writable directory. A sticky one owned by root is
    accepted here for root's entries (and absent ones): nobody else can rename or remove
    those, and anything they add is theirs, which is refused in turn. That keeps /tmp usable.
    So is one owned by root on a read-only mount, where nobody can change an entry.
    """
    if st.st_uid == 0 and not st.st_mode & 0o022:
        return
    if st.st_uid == 0 and _read_only(directory):
        # Through a read-only mount nobody adds, renames or removes an entry (remounting takes
        # root). A Kubernetes ConfigMap volume is an emptyDir's 0777 directory that the kubelet
        # mounts read-only into the container.
        return
    if st.st_uid == 0 and st.st_mode & stat.S_ISVTX:
        if entry_st is None or entry_st.st_uid == 0:
            return
        subject = "it" if entry == path else entry
        raise ConfigError(
            f"refusing {path}: {subject} is owned by uid {entry_st.st_uid} in the shared directory {directory}, "
            f"who could replace it",
            f"chown -h root:root {entry}",
        )
    raise ConfigError(
        f"refusing {path}: directory {directory} is writable by a user other than root "
        f"(owner uid {st.st_uid}, mode {st.st_mode & 0o7777:04o}), who could replace what pinctl reads there",
        f"chown root:root {directory} && chmod go-w {directory}",
    )


def _read_only(directory: str) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


class NotRegularFile(Exception):
    """A path that names a FIFO, a device, a socket or a directory where a file is wanted."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _require_regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise NotRegularFile(next((kind for test, kind in _KINDS if test(mode)), "not a file"))


# O_NONBLOCK: opening a FIFO must not wait for a writer; it changes nothing for a regular file.
_OPEN_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_OPEN_DIRECTORY = _OPEN_FILE | os.O_DIRECTORY


def read_regular(path: str, guard: bool = False) -> bytes:
    """The bytes of the regular file at path.

    Raises FileNotFoundError, NotRegularFile or another OSError; with guard, a ConfigError when
    running as root and a user other than root could have changed the file or its directories.
    """
    # Looking first spares a device the side effects of an open; the open file's fstat decides.
    looked = _look(path, guard)
    _require_regular(looked.st_mode)
    fd = os.open(path, _OPEN_FILE)
    try:
        opened = os.fstat(fd)
        _require_regular(opened.st_mode)
        if guard:
            _check_owner(path, opened)
        _same_file(path, looked, opened, guard)
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def open_guarded(path: str) -> int:
    """A descriptor of the regular file at path, open for reading and held to what read_regular
    holds a guarded file to (as root: root's alone, and so is every directory up to /), for files
    too large to read whole (image archives). FileNotFoundError, NotRegularFile, OSError or
    ConfigError."""
    looked = _look(path, guard=True)
    _require_regular(looked.st_mode)
    fd = os.open(path, _OPEN_FILE)
    try:
        opened = os.fstat(fd)
        _require_regular(opened.st_mode)
        _check_owner(path, opened)
        _same_file(path, looked, opened, guard=True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def list_directory(path: str) -> Optional[list[str]]:
    """The names in a directory, root-guarded as the files are; None when nothing is at path."""
    try:
        looked = _look(path, guard=True)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise  # a dangling symlink is something
        return None
    if not stat.S_ISDIR(looked.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
    fd = os.open(path, _OPEN_DIRECTORY)
    try:
        opened = os.fstat(fd)
        _check_owner(path, opened)
        _same_file(path, looked, opened, guard=True)
        return os.listdir(fd)
    finally:
        os.close(fd)


def os_error_text(err: OSError) -> str:
    """"too many levels of symbolic links": the system's words, lower case, to follow a colon."""
    text = err.strerror or str(err)
    return text[:1].lower() + text[1:]


def unreadable(err: Exception, what: str, path: str, fix: str) -> ConfigError:
    """One line on why `what` (e.g. "config file") at path cannot be read, with a fix."""
    if isinstance(err, NotRegularFile):
        return ConfigError(f"{what} {path} is {err.kind}, not a regular file", fix)
    if isinstance(err, PermissionError):
        return ConfigError(f"cannot read {what} {path}", "run pinctl as root (sudo)")
    if isinstance(err, FileNotFoundError):
        if os.path.islink(path):
            return ConfigError(f"{what} {path} is a symlink to {os.readlink(path)}, which does not exist",
                               "restore the file it points to, or remove the link")
        return ConfigError(f"{what} {path} does not exist", fix)
    if isinstance(err, OSError):
        return ConfigError(f"cannot read {what} {path}: {os_error_text(err)}", fix)
    return ConfigError(f"cannot read {what} {path}: {err}", fix)


def read_toml(path: str, what: str, missing_ok: bool, fix: str) -> Optional[tuple[dict[str, Any], str]]:
    """Parsed TOML and text of one file; None when nothing is there and that is fine."""
    try:
        raw = read_regular(path, guard=True)
    except FileNotFoundError as err:
        if missing_ok and not os.path.lexists(path):
            return None  # as root, only after the walk found its directory root's alone
        raise unreadable(err, what, path, fix) from None
    except (OSError, NotRegularFile) as err:
        raise unreadable(err, what, path, fix) from None
    return _parse(path, raw)


def _parse(path: str, raw: bytes) -> tuple[dict[str, Any], str]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text", "TOML files must be UTF-8") from None
    _refuse_pathological(path, text)
    toml = toml_reader()
    try:
        return toml.loads(text), text
    except toml.TOMLDecodeError as err:
        raise ConfigError(_syntax_message(path, text, err), "fix the TOML syntax") from None
    except RecursionError:
        raise ConfigError(f"{path}: {TOO_DEEP}", "pinctl's keys are flat: strings, numbers and lists of strings") from None


# No real config has these; Python's TOML reader takes time quadratic in a dotted key's parts
# (50,000 parts: over 15 s), so such a file is refused before the reader sees it.
MAX_LINE_BYTES = 1024 * 1024  # 10,000 patterns of 100 characters on one line still fit
MAX_KEY_PARTS = 64
# A key before its "=", or a table's name in its brackets: bare and quoted parts, and dots.
_KEY = re.compile(r"[ \t]*\[{0,2}[ \t]*([\w\"' .-]+?)[ \t]*(?:=|\]{1,2})")


def _refuse_pathological(path: str, text: str) -> None:
    """A line of megabytes, or a key (or table name) of more than MAX_KEY_PARTS dotted parts:
    one line naming file and line, in time linear in the file."""
    for number, line in enumerate(text.split("\n"), 1):
        if len(line) > MAX_LINE_BYTES:
            raise ConfigError(f"{path}:{number}: a line of {len(line):,} characters; pinctl reads lines of up to "
                              f"{MAX_LINE_BYTES:,}", "split the list over several lines")
        key = _KEY.match(line)
        if key and key.group(1).count(".") >= MAX_KEY_PARTS:
            raise ConfigError(f"{path}:{number}: a key of {key.group(1).count('.') + 1:,} dotted parts; pinctl's "
                              "keys are flat", "write top-level keys: pinned_images = [...]")


# Python's TOML reader recurses once per level of nesting; "a = [[[[..." thousands deep exhausts the stack.
TOO_DEEP = "nested too deeply to read"


def _syntax_message(path: str, text: str, err: Exception) -> str:
    """tomllib's "Reason (at line L, column C)" as "PATH:L: Reason (column C)"."""
    message = str(err)
    found = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    if found:
        return f"{path}:{found.group(1)}: {message[: found.start()]} (column {found.group(2)})"
    found = re.search(r"\s*\(at end of document\)$", message)
    if found:
        last = max(1, len(text.splitlines()))
        return f"{path}:{last}: {message[: found.start()]} (at end of file)"
    return f"{path}: {message}"


def toml_reader() -> Any:
    """tomllib, or tomli where Python (< 3.11) ships no TOML reader."""
    try:
        import tomllib
    except ModuleNotFoundError:
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib


# -- finding lines -----------------------------------------------------------------------
# tomllib reports no positions for values. The file is flat, so a key's line is the line that
# starts with it, and a list's strings are the strings written after it up to the first "]"
# outside a string or comment (the list was checked to hold only strings). Line numbers come
# from one pass over the text, so 10,000 patterns cost no more each than ten.

_STRING_OR_COMMENT: re.Pattern[str] = re.compile(
    r'''"""(?P<multi_basic>(?:\\[\s\S]|[^\\])*?)"""(?P<multi_basic_end>"{0,2})'''
    r"""|'''(?P<multi_literal>[\s\S]*?)'''(?P<multi_literal_end>'{0,2})"""
    r'''|"(?P<basic>(?:\\.|[^"\\\n])*)"'''
    r"""|'(?P<literal>[^'\n]*)'"""
    r"""|\#[^\n]*"""
    r"""|(?P<end>\])"""
)


class LineIndex:
    """Line numbers of offsets into one text: its newlines found once, then a bisect each."""

    def __init__(self, text: str) -> None:
        self.newlines = [found.start() for found in re.finditer("\n", text)]

    def at(self, offset: int) -> int:
        return bisect_left(self.newlines, offset) + 1


def _key_match(text: str, key: str) -> Optional[re.Match[str]]:
    name = re.escape(key)
    names = rf"""(?:{name}|"{name}"|'{name}')"""
    pattern = rf"^[ \t]*(?:{names}[ \t]*[=.]|\[\[?[ \t]*{names}[ \t]*[\].])"
    return re.search(pattern, text, re.MULTILINE)


def key_line(text: str, key: str, lines: Optional[LineIndex] = None) -> Optional[int]:
    found = _key_match(text, key)
    return (lines or LineIndex(text)).at(found.start()) if found else None


def list_item_lines(text: str, key: str, items: Sequence[str], lines: LineIndex) -> list[Optional[int]]:
    """The line of each string of a list key; the key's line when a string is written escaped."""
    found = _key_match(text, key)
    if found is None:
        return [None] * len(items)
    key_line = lines.at(found.start())
    strings = _strings(text, found.end())
    if len(strings) != len(items):
        return [key_line] * len(items)  # written in a way this reading does not follow
    # A string written with escapes reads differently from its value: it gets the key's line.
    return [lines.at(at) if written == item else key_line for (at, written), item in zip(strings, items)]


def _strings(text: str, start: int) -> list[tuple[int, str]]:
    """(offset, text between the quotes) of each string of the list that follows start."""
    strings: list[tuple[int, str]] = []
    for found in _STRING_OR_COMMENT.finditer(text, start):
        if found["end"]:
            break
        parts = found.group("basic", "literal", "multi_basic", "multi_literal")
        written = next((part for part in parts if part is not None), None)
        if written is not None:  # else a comment
            strings.append((found.start(), written + (found["multi_basic_end"] or found["multi_literal_end"] or "")))
    return strings

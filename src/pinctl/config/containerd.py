"""containerd's configuration as containerd reads it: its main file, then the files its `imports`
name, merged; pinctl takes the CRI sandbox image, containerd 2.x's own pinned_images (each with
the file and line that set it) and the schema version the main file declares.

How containerd reads them (its cmd/containerd/server/config/config.go, and experiments on 2.1.9):

* Files load breadth first from the main one: each file is merged, then its `imports` join the
  end of the queue; a path already loaded is skipped (so a cycle ends). Each import is cleaned and,
  when relative, joined to the directory of the file that names it; one holding `*` is expanded
  like Go's filepath.Glob (`*`, `?`, `[...]` with `^`; each directory's names in byte order; a
  dotfile matches too; no match is no file). A non-glob import that is missing, a file that is
  not TOML or a malformed glob stops containerd at start ("open PATH: no such file or
  directory", "syntax error in pattern"); pinctl says so in one line naming the file.
* Merging (mergo with override): tables merge key by key at every depth, so an import's
  ``pinned_images.site`` adds to the main file's ``pinned_images.sandbox`` (containerd 2.1 pins
  both), and an import that sets another key of the images plugin leaves pinned_images as they
  were. Anything else (a string, a list) is replaced by the later file's; an empty table clears
  nothing. containerd 1.x instead replaces each plugin's whole table (``REPLACE_SECTIONS``).
* Versions (2.0 and 2.1, verified on 2.1.9): a file without `version` (or version 1) has its
  1.x plugin names (``cri``) made full and counts as the version merged so far; the merged
  version is the last non-zero one. Only when that is below 3 does containerd move
  ``plugins."io.containerd.grpc.v1.cri".sandbox_image`` (as merged) to
  ``plugins."io.containerd.cri.v1.images".pinned_images.sandbox``. So a version 2 main file
  whose conf.d file is version 3 loses its sandbox_image; a version 2 import moves its own.
  From 2.3 (its source, and 2.4.2 run here) containerd migrates each file on its own before
  merging (``MIGRATE_EACH_FILE``). ``rules_for`` picks the rules from the daemon's version;
  without one, pinctl merges as 2.0 to 2.2 do (``NOT_KNOWN``).

Only regular files are read (a FIFO would block). They are not held to root's ownership as
pinctl's own config is: pinctl acts on no pin they name (sync and prune never read them), and
containerd reads them as they are.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from pinctl.config.files import TOO_DEEP, NotRegularFile, read_regular, toml_reader, unreadable
from pinctl.errors import ConfigError
from pinctl.model import ConfigPin

DEFAULT_CONFIG = "/etc/containerd/config.toml"
# containerd 2.x (config version 3): the CRI's image settings, pinned_images among them.
V3_IMAGES_PLUGIN = "io.containerd.cri.v1.images"
V2_CRI_PLUGIN = "io.containerd.grpc.v1.cri"
CURRENT_VERSION = 3  # containerd 2.0 and 2.1

# The merge rules (Rules): containerd 2.0 and 2.1 (the default), its later source, 1.x.
MERGE_2_1 = "2.1"
MIGRATE_EACH_FILE = "each-file"
REPLACE_SECTIONS = "1.x"
# The release is not known: merged as 2.0 to 2.2 do, and the sandbox image taken from wherever a
# release reads it (1.x's sandbox_image when 2.x's pinned_images.sandbox is not set).
NOT_KNOWN = "not known"

_PINNED = ("plugins", V3_IMAGES_PLUGIN, "pinned_images")
_SANDBOX = (*_PINNED, "sandbox")
_V2_SANDBOX = ("plugins", V2_CRI_PLUGIN, "sandbox_image")
_V1_SANDBOX = ("plugins", "cri", "sandbox_image")


@dataclass(frozen=True)
class Origin:
    """Where a value was written: the file, and the key as written there (for its line)."""

    path: str
    key: str


@dataclass
class ContainerdConfig:
    """containerd's configuration merged as containerd merges it, with where each value came from."""

    files: list[str]  # in the order containerd loads them, the main file first
    version: Optional[int]  # the main file's (1 when it declares none; None when no number)
    sandbox: Optional[tuple[str, str]]  # (image, file that set it)
    pins: list[ConfigPin] = field(default_factory=list)


def read_containerd_config(config_path: Optional[str], rules: str = NOT_KNOWN) -> Optional[ContainerdConfig]:
    """containerd's main config and its imports merged; None when the default file is absent.

    A ConfigError (one line, naming the file) for an explicit main file or any import that cannot
    be read, is no TOML, or names a malformed glob: containerd does not start on those either."""
    main = config_path or DEFAULT_CONFIG
    loaded = _read(main, explicit=config_path is not None, importer=None)
    if loaded is None:
        return None
    sandbox_rules, rules = rules, MERGE_2_1 if rules == NOT_KNOWN else rules
    main_version = loaded[0].get("version", 1)
    merged: dict[str, Any] = {}
    origins: dict[tuple[str, ...], Origin] = {}
    texts: dict[str, str] = {}
    files: list[str] = []
    merged_version = CURRENT_VERSION
    pending: list[tuple[str, Optional[str]]] = [(main, None)]
    done: set[str] = set()
    while pending:
        path, importer = pending.pop(0)
        if path in done:
            continue
        read = loaded if importer is None else _read(path, explicit=True, importer=importer)
        assert read is not None
        config, texts[path] = read
        files.append(path)
        version = config.get("version", 0)
        version = version if type(version) is int else 0
        if rules != REPLACE_SECTIONS and version in (0, 1):
            _rename_v1_plugins(config)
            version = merged_version if rules == MERGE_2_1 else version
        if rules == MIGRATE_EACH_FILE and version < CURRENT_VERSION:
            file_origins: dict[tuple[str, ...], Origin] = {}
            _note(file_origins, (), config, path)
            _migrate_sandbox(config, file_origins)
            version = CURRENT_VERSION
            _merge(merged, config, (), path, origins, rules, file_origins)
        else:
            _merge(merged, config, (), path, origins, rules)
        merged_version = version or merged_version
        done.add(path)
        pending += [(found, path) for found in _resolve_imports(path, config.get("imports"))]
    if rules == MERGE_2_1 and merged_version < CURRENT_VERSION:
        _migrate_sandbox(merged, origins)
    return ContainerdConfig(files, main_version if type(main_version) is int else None,
                            _sandbox(merged, origins, sandbox_rules), _pins(merged, origins, texts))


def rules_for(version: Optional[str]) -> str:
    """The merge rules of a containerd by its version ("1.7.24~ds1", "v2.4.2"); NOT_KNOWN without one."""
    found = re.match(r"v?(\d+)\.(\d+)", version or "")
    if not found:
        return NOT_KNOWN
    release = (int(found.group(1)), int(found.group(2)))
    return REPLACE_SECTIONS if release < (2, 0) else MERGE_2_1 if release < (2, 3) else MIGRATE_EACH_FILE


def read_sandbox_image(config_path: Optional[str], rules: str = NOT_KNOWN) -> Optional[str]:
    """The CRI sandbox image from containerd's config and its imports; None when unset."""
    read = read_containerd_config(config_path, rules)
    return None if read is None or read.sandbox is None else read.sandbox[0]


def read_config_pins(config_path: Optional[str], rules: str = NOT_KNOWN) -> list[ConfigPin]:
    """Every string entry of containerd 2.x's ``[plugins.'io.containerd.cri.v1.images'.pinned_images]``
    as merged from the config and its imports (``sandbox`` included: it is the sandbox image
    there), each with the file and line that set it, in containerd's merge order; none when unset."""
    read = read_containerd_config(config_path, rules)
    return [] if read is None else read.pins


def dropin_path(config_path: Optional[str]) -> Optional[tuple[str, str]]:
    """Where a drop-in for the main config goes: a file named for pinctl in the first directory
    its `imports` take by a glob of file names (``/etc/containerd/conf.d/*.toml``), with the
    import as written; None when it imports no such directory (or there is no file)."""
    read = _read(config_path or DEFAULT_CONFIG, explicit=config_path is not None, importer=None)
    imports = None if read is None else read[0].get("imports")
    if not isinstance(imports, list):
        return None
    main = config_path or DEFAULT_CONFIG
    for name in (i for i in imports if isinstance(i, str)):
        path = go_clean(name if name.startswith("/") else posixpath.join(posixpath.dirname(main), name))
        directory, pattern = posixpath.split(path)
        # containerd globs an import only when it holds a '*'.
        if _has_meta(directory) or "*" not in pattern:
            continue
        for candidate in ("99-pinctl.toml", "99-pinctl.conf", "99-pinctl"):
            try:
                if go_match(pattern, candidate):
                    return posixpath.join(directory, candidate), name
            except ValueError:
                break
    return None


def read_config_version(config_path: Optional[str]) -> tuple[str, Optional[int]]:
    """containerd's config path and the schema `version` it declares: 1 when it has none (as
    containerd reads it), None when the default file is not there or the value is no number."""
    read = _read(config_path or DEFAULT_CONFIG, explicit=config_path is not None, importer=None)
    if read is None:
        return config_path or DEFAULT_CONFIG, None
    version = read[0].get("version", 1)
    return config_path or DEFAULT_CONFIG, version if type(version) is int else None


# -- reading and finding files -----------------------------------------------------------------


def _read(path: str, explicit: bool, importer: Optional[str]) -> Optional[tuple[dict[str, Any], str]]:
    """The parsed TOML of one file and its text (for the lines of its entries); None when the
    default main file is absent or unreadable."""
    what = "containerd config" if importer is None else f"containerd config (imported by {importer})"
    fix = "fix --containerd-config" if importer is None else \
        f"fix the file or its entry in imports in {importer}: containerd does not start without it"
    try:
        raw = read_regular(path)
    except (FileNotFoundError, PermissionError) as err:
        if explicit:
            raise unreadable(err, what, path, fix) from None
        return None
    except (OSError, NotRegularFile) as err:
        raise unreadable(err, what, path, fix) from None
    try:
        text = raw.decode("utf-8")
        config: dict[str, Any] = toml_reader().loads(text)
    except ValueError as err:  # UnicodeDecodeError and TOMLDecodeError alike
        raise ConfigError(f"{what} {path} is not valid TOML: {err}", "fix the file") from None
    except RecursionError:
        raise ConfigError(f"{what} {path}: {TOO_DEEP}", "fix the file") from None
    return config, text


def _resolve_imports(parent: str, imports: Any) -> list[str]:
    """The files an `imports` list names, as containerd resolves them."""
    if imports is None:
        return []
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise ConfigError(f"containerd config {parent}: imports is not a list of paths",
                          "write imports = ['/etc/containerd/conf.d/*.toml']")
    found: list[str] = []
    for name in imports:
        path = go_clean(name)
        if not path.startswith("/"):
            path = go_clean(posixpath.join(posixpath.dirname(parent), path))
        if "*" not in path:
            found.append(path)
            continue
        try:
            found += go_glob(path)
        except ValueError:
            raise ConfigError(f"containerd config {parent}: imports entry {name!r} is a malformed glob "
                              "(containerd stops at start: syntax error in pattern)", "fix the entry") from None
    return found


def go_clean(path: str) -> str:
    """Go's filepath.Clean: normpath, and a leading "//" is "/" as in Go."""
    cleaned = posixpath.normpath(path) if path else "."
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned


def go_glob(pattern: str) -> list[str]:
    """Go's filepath.Glob: the paths matching, each directory's names in byte order; ValueError
    for a malformed pattern."""
    go_match(pattern, "")  # validates, as Glob does first
    if not _has_meta(pattern):
        return [pattern] if os.path.lexists(pattern) else []
    directory, name = posixpath.split(pattern)
    directory = "." if directory == "" else directory if directory == "/" else directory.rstrip("/") or "/"
    dirs = go_glob(directory) if _has_meta(directory) else [directory]
    found: list[str] = []
    for each in dirs:
        try:
            names = sorted(os.listdir(each), key=os.fsencode) if os.path.isdir(each) else []
        except OSError:
            names = []
        found += [posixpath.join(each, n) for n in names if go_match(name, n)]
    return found


def _has_meta(path: str) -> bool:
    return any(c in path for c in "*?[\\")


def go_match(pattern: str, name: str) -> bool:
    """Go's filepath.Match on one name (no "/" in either); ValueError for a malformed pattern."""
    return re.fullmatch(_go_regex(pattern), name, re.DOTALL) is not None


def _go_regex(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\":
            if i + 1 == len(pattern):
                raise ValueError("trailing backslash")
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[":
            text, i = _go_class(pattern, i + 1)
            out.append(text)
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _go_class(pattern: str, i: int) -> tuple[str, int]:
    """A character class from just after its "[": (regex, index after its "]")."""
    negated = i < len(pattern) and pattern[i] == "^"
    i += negated
    ranges: list[str] = []
    while True:
        if i >= len(pattern):
            raise ValueError("unterminated class")
        if pattern[i] == "]" and ranges:
            break
        low, i = _class_char(pattern, i)
        high = low
        if i < len(pattern) and pattern[i] == "-":
            high, i = _class_char(pattern, i + 1)
            if high < low:
                raise ValueError("bad range")
        ranges.append(re.escape(low) + ("-" + re.escape(high) if high != low else ""))
    return f"[{'^/' if negated else ''}{''.join(ranges)}]", i + 1


def _class_char(pattern: str, i: int) -> tuple[str, int]:
    if i >= len(pattern) or pattern[i] in "-]":
        raise ValueError("bad class")
    if pattern[i] == "\\":
        i += 1
        if i >= len(pattern):
            raise ValueError("bad escape")
    return pattern[i], i + 1


# -- merging, as containerd merges ----------------------------------------------------------------


def _rename_v1_plugins(config: dict[str, Any]) -> None:
    """A version 1 file's short plugin name for the CRI, made full as containerd does."""
    plugins = config.get("plugins")
    if isinstance(plugins, dict) and "cri" in plugins and V2_CRI_PLUGIN not in plugins:
        plugins[V2_CRI_PLUGIN] = plugins.pop("cri")


def _merge(into: dict[str, Any], new: dict[str, Any], at: tuple[str, ...], path: str,
           origins: dict[tuple[str, ...], Origin], rules: str,
           carried: Optional[dict[tuple[str, ...], Origin]] = None) -> None:
    """new merged into into (mergo with override); origins say, for each value, where it was set
    (carried: origins worked out for new itself, e.g. by a migration of its own)."""
    for key, value in new.items():
        if key in ("version", "imports") and not at:
            continue
        here = (*at, key)
        replace_section = rules == REPLACE_SECTIONS and at == ("plugins",)
        if isinstance(value, dict) and isinstance(into.get(key), dict) and not replace_section:
            _merge(into[key], value, here, path, origins, rules, carried)
            continue
        into[key] = _copy(value)
        for stale in [k for k in origins if k[: len(here)] == here]:
            del origins[stale]
        _note(origins, here, value, path, carried)


def _copy(value: Any) -> Any:
    return {k: _copy(v) for k, v in value.items()} if isinstance(value, dict) else value


def _note(origins: dict[tuple[str, ...], Origin], at: tuple[str, ...], value: Any, path: str,
          carried: Optional[dict[tuple[str, ...], Origin]] = None) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _note(origins, (*at, key), item, path, carried)
    else:
        origins[at] = (carried or {}).get(at) or Origin(path, at[-1] if at else "")


def _migrate_sandbox(config: dict[str, Any], origins: dict[tuple[str, ...], Origin]) -> None:
    """containerd's 2.x migration of the CRI's sandbox_image (version 2) to pinned_images.sandbox."""
    cri = _table(_table(config, "plugins"), V2_CRI_PLUGIN)
    if "sandbox_image" not in cri:
        return
    images = config.setdefault("plugins", {}).setdefault(V3_IMAGES_PLUGIN, {})
    pinned = images.setdefault("pinned_images", {}) if isinstance(images, dict) else None
    if isinstance(pinned, dict):
        pinned["sandbox"] = cri["sandbox_image"]
        if _V2_SANDBOX in origins:
            origins[_SANDBOX] = origins[_V2_SANDBOX]


def _table(parent: Any, key: str) -> dict[str, Any]:
    # A key holding something other than a table (a hand-edited config) reads as absent.
    found = parent.get(key) if isinstance(parent, dict) else None
    return found if isinstance(found, dict) else {}


def _get(config: dict[str, Any], at: tuple[str, ...]) -> Any:
    parent: Any = config
    for key in at[:-1]:
        parent = _table(parent, key)
    return parent.get(at[-1])


def _sandbox(merged: dict[str, Any], origins: dict[tuple[str, ...], Origin], rules: str) -> Optional[tuple[str, str]]:
    """containerd 1.x's CRI sandbox_image; 2.x's pinned_images.sandbox alone (a sandbox_image its
    merge left unmoved is ignored by 2.x, and its pause image not pinned: verified on 2.1.9)."""
    places = {REPLACE_SECTIONS: (_V2_SANDBOX, _V1_SANDBOX), NOT_KNOWN: (_SANDBOX, _V2_SANDBOX, _V1_SANDBOX)}.get(rules, (_SANDBOX,))
    for at in places:
        value = _get(merged, at)
        if isinstance(value, str) and value:
            return value, origins[at].path if at in origins else ""
    return None


def _pins(merged: dict[str, Any], origins: dict[tuple[str, ...], Origin], texts: dict[str, str]) -> list[ConfigPin]:
    pins = []
    for name, ref in _table(_table(_table(merged, "plugins"), V3_IMAGES_PLUGIN), "pinned_images").items():
        if not (isinstance(ref, str) and ref):
            continue
        origin = origins.get((*_PINNED, name))
        if origin is None or origin.key != name:
            continue  # a version 2 sandbox_image, moved: the sandbox image, not an entry written
        pins.append(ConfigPin(str(name), ref, origin.path, _entry_line(texts.get(origin.path, ""), origin.key, ref)))
    return pins


def _entry_line(text: str, key: str, value: str) -> Optional[int]:
    """The line where key is set to value (a plain string as written); None when not found so."""
    name = re.escape(key)
    found = re.search(rf"""^[ \t]*(?:[^=\n]*\.[ \t]*)?(?:{name}|"{name}"|'{name}')[ \t]*=[ \t]*["']{re.escape(value)}["']""",
                      text, re.MULTILINE)
    if found is None:
        found = re.search(rf"""(?:^|[{{,.])[ \t]*(?:{name}|"{name}"|'{name}')[ \t]*=[ \t]*["']{re.escape(value)}["']""",
                          text, re.MULTILINE)
    return text.count("\n", 0, found.start()) + 1 if found else None

"""Which Go program an executable file is, from the build information the Go linker writes into it.

A process's argv[0] is whatever its parent passed to execve (`exec -a crio python3 server.py` runs
Python as "crio"), and a genuine CRI-O may be installed under any file name (crio-v1.34.0). The
build information is part of the executable file itself: it names the main package the program
was built from (github.com/cri-o/cri-o/cmd/crio), its module and the Go release, as
`go version -m FILE` prints them. Read through /proc/PID/exe it is the file the process is running,
even when that file was since deleted or replaced on disk; opening /proc/PID/exe needs ptrace read
access to the process (the same user and no more capabilities than this one, or CAP_SYS_PTRACE),
which procfs.read_exe tells apart from a process that is gone. It tells what a file says it was
built from: anyone can build a Go program of any package path, so it tells a mistaken match apart,
not a hostile one (who binds the socket, and as which user, still matters).

Reads only what it needs (the ELF header, the section or program headers, and the build
information blob, each read bounded), never the whole binary; anything malformed, truncated or
unreadable reads as None, never as an exception.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from typing import Optional

MAGIC = b"\xff Go buildinf:"
HEADER_SIZE = 32  # magic, pointer size, flags, and room for two pointers (the format before Go 1.18)
ALIGN = 16  # the blob starts at an address that is a multiple of this
FLAG_INLINE = 0x2  # Go 1.18 on: the version and module strings follow the header, uvarint-prefixed
SECTION = b".go.buildinfo"
# Where the magic is looked for: the .go.buildinfo section, or the start of the data segment
# (the linker puts the blob first there). The module string may run past it, up to MAX_STRING.
SEARCH_BYTES = 64 * 1024
MAX_STRING = 1024 * 1024
MAX_HEADER_TABLE = 1024 * 1024  # section or program headers; a Go binary has a few dozen
MAX_SECTION_NAMES = 64 * 1024
SENTINEL = 16  # bytes framing the module string at each end (cmd/go's infoStart and infoEnd)

SHT_NOBITS = 8
SHN_XINDEX = 0xFFFF
PT_LOAD = 1
PF_X, PF_W = 0x1, 0x2


@dataclass(frozen=True)
class GoBuildInfo:
    """What `go version -m` prints first: the Go release, the main package's path, and its module
    (path and version, "(devel)" for a build outside version control). The last three are "" for
    a program built without modules."""

    go_version: str
    path: str
    main_module: str
    main_version: str


@dataclass(frozen=True)
class _Elf:
    little: bool
    wide: bool  # ELF64


@dataclass(frozen=True)
class _Region:
    """Where the blob is looked for: a file offset, its virtual address, and its length."""

    offset: int
    addr: int
    size: int


def go_main_path(path: str) -> Optional[str]:
    """The main package path recorded in the Go binary at path (`go version -m`'s path line, e.g.
    github.com/cri-o/cri-o/cmd/crio); None when it is no ELF Go binary with readable build
    information (built without modules, or before Go 1.18), or it cannot be opened."""
    info = go_build_info(path)
    return info.path if info is not None and info.path else None


def go_build_info(path: str) -> Optional[GoBuildInfo]:
    """The build information of the Go binary at path (a file, or /proc/PID/exe for the executable
    a process runs); None when it cannot be opened, is not a regular file, is no ELF file, has no
    build information or only the pointer-based one of Go before 1.18, or any of it is malformed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return _read(fd)
    except (OSError, ValueError, OverflowError, struct.error):
        # ValueError covers a string that is no UTF-8; the rest a read refused or out of range.
        return None
    finally:
        os.close(fd)


def _pread(fd: int, size: int, offset: int) -> Optional[bytes]:
    """Exactly size bytes at offset, or None (past the end, or a size out of bounds)."""
    if size < 0 or offset < 0:
        return None
    if size == 0:
        return b""
    data = os.pread(fd, size, offset)
    return data if len(data) == size else None


def _read(fd: int) -> Optional[GoBuildInfo]:
    ident = _pread(fd, 16, 0)
    if ident is None or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return None
    elf = _Elf(little=ident[5] == 1, wide=ident[4] == 2)
    region = _data_start(fd, elf)
    if region is None or region.size <= 0:
        return None
    return _blob(fd, region)


def _data_start(fd: int, elf: _Elf) -> Optional[_Region]:
    """The .go.buildinfo section, else the first writable, not executable PT_LOAD segment: where
    Go's debug/buildinfo looks."""
    order = "<" if elf.little else ">"
    layout = order + ("HHIQQQIHHHHHH" if elf.wide else "HHIIIIIHHHHHH")
    raw = _pread(fd, struct.calcsize(layout), 16)
    if raw is None:
        return None
    (_type, _machine, _version, _entry, phoff, shoff, _flags, _ehsize,
     phentsize, phnum, shentsize, shnum, shstrndx) = struct.unpack(layout, raw)
    return _section(fd, elf, shoff, shentsize, shnum, shstrndx) or _segment(fd, elf, phoff, phentsize, phnum)


def _section(fd: int, elf: _Elf, shoff: int, entsize: int, count: int, names_index: int) -> Optional[_Region]:
    order = "<" if elf.little else ">"
    layout = order + ("IIQQQQIIQQ" if elf.wide else "IIIIIIIIII")
    size = struct.calcsize(layout)
    if not shoff or entsize < size:
        return None

    def header(raw: bytes, index: int) -> tuple[int, ...]:
        return struct.unpack_from(layout, raw, index * entsize)

    if count == 0 or names_index == SHN_XINDEX:  # more sections than the ELF header's fields hold
        first = _pread(fd, size, shoff)
        if first is None:
            return None
        zeroth = struct.unpack(layout, first)
        count = count or zeroth[5]
        names_index = zeroth[6] if names_index == SHN_XINDEX else names_index
    if not 0 < count <= MAX_HEADER_TABLE // entsize or names_index >= count:
        return None
    table = _pread(fd, count * entsize, shoff)
    if table is None:
        return None
    names_header = header(table, names_index)
    names = _pread(fd, min(names_header[5], MAX_SECTION_NAMES), names_header[4])
    if names is None:
        return None
    for index in range(count):
        name, kind, _flags, addr, offset, length = header(table, index)[:6]
        if names[name:name + len(SECTION) + 1] == SECTION + b"\0":
            # A section that takes no room in the file holds nothing (and the segments are not searched).
            return _Region(offset, addr, 0 if kind == SHT_NOBITS else length)
    return None


def _segment(fd: int, elf: _Elf, phoff: int, entsize: int, count: int) -> Optional[_Region]:
    order = "<" if elf.little else ">"
    layout = order + ("IIQQQQQQ" if elf.wide else "IIIIIIII")
    size = struct.calcsize(layout)
    if not phoff or entsize < size or not 0 < count <= MAX_HEADER_TABLE // entsize:
        return None
    table = _pread(fd, count * entsize, phoff)
    if table is None:
        return None
    for index in range(count):
        fields = struct.unpack_from(layout, table, index * entsize)
        if elf.wide:
            kind, flags, offset, vaddr, _paddr, filesz = fields[:6]
        else:
            kind, offset, vaddr, _paddr, filesz, _memsz, flags = fields[:7]
        if kind == PT_LOAD and flags & (PF_X | PF_W) == PF_W:
            return _Region(offset, vaddr, filesz)
    return None


def _blob(fd: int, region: _Region) -> Optional[GoBuildInfo]:
    window = os.pread(fd, min(region.size, SEARCH_BYTES), region.offset)
    start = _find_magic(window, region.addr)
    if start is None or start + HEADER_SIZE > min(len(window), region.size):
        return None
    if not window[start + 15] & FLAG_INLINE:
        return None  # Go before 1.18: pointers to the strings, which we do not follow

    def take(position: int, length: int) -> Optional[bytes]:
        if length < 0 or position + length > region.size:
            return None
        if position + length <= len(window):
            return window[position:position + length]
        if length > MAX_STRING:
            return None
        return _pread(fd, length, region.offset + position)

    def string(position: int) -> Optional[tuple[bytes, int]]:
        prefix = take(position, min(10, region.size - position))
        decoded = _uvarint(prefix or b"")
        if decoded is None:
            return None
        length, width = decoded
        if length > MAX_STRING:
            return None
        data = take(position + width, length)
        return None if data is None else (data, position + width + length)

    version = string(start + HEADER_SIZE)
    if version is None or not version[0]:
        return None
    module = string(version[1])
    if module is None:
        return None
    return _parse(version[0].decode("utf-8"), module[0])


def _find_magic(window: bytes, addr: int) -> Optional[int]:
    """The first place of the magic in window at an address that is a multiple of ALIGN."""
    index = window.find(MAGIC)
    while index >= 0:
        if (addr + index) % ALIGN == 0:
            return index
        index = window.find(MAGIC, index + 1)
    return None


def _uvarint(data: bytes) -> Optional[tuple[int, int]]:
    """An unsigned LEB128 number (Go's binary.Uvarint) and how many bytes it took; None when it is
    cut short or overflows 64 bits."""
    value = 0
    for index, byte in enumerate(data[:10]):
        if index == 9 and byte > 1:
            return None
        value |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            return value, index + 1
    return None


def _parse(go_version: str, module: bytes) -> GoBuildInfo:
    """The module string: framed by 16 bytes at each end (else there is none: a build without
    modules), then lines of tab-separated fields: path, mod, dep, =>, build."""
    if len(module) >= 2 * SENTINEL + 1 and module[-SENTINEL - 1:-SENTINEL] == b"\n":
        module = module[SENTINEL:-SENTINEL]
    else:
        module = b""
    path = main_module = main_version = ""
    for line in module.split(b"\n"):
        fields = line.split(b"\t")
        if fields[0] == b"path" and len(fields) >= 2 and not path:
            path = fields[1].decode("utf-8")
        elif fields[0] == b"mod" and len(fields) >= 3 and not main_module:
            main_module, main_version = fields[1].decode("utf-8"), fields[2].decode("utf-8")
    return GoBuildInfo(go_version, path, main_module, main_version)

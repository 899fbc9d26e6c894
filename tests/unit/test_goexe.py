"""Which Go program an executable is (backends/goexe.py): real binaries built here with `go build`,
the same read through /proc/PID/exe of a running process (also once its file is deleted), files
that are no Go binary, truncated and doctored copies, and small ELF files made up byte by byte."""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pinctl.backends import goexe, procfs

MODULE = "example.test/fake"
MAIN = f"{MODULE}/cmd/crio"
# Says it runs (its exec is done: its command line is there to read), then waits for its stdin to close.
PROGRAM = """package main

import "os"

func main() {
	os.Stdout.Write([]byte("ready\\n"))
	os.Stdin.Read(make([]byte, 1))
}
"""


def _go() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if found is None:
        reason = "no go toolchain (go on PATH or /usr/local/go/bin/go) to build a Go binary with"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return found


@pytest.fixture(scope="module")
def go_binary(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A Go program built here whose main package is MAIN in module MODULE (as CRI-O's crio is
    github.com/cri-o/cri-o/cmd/crio in github.com/cri-o/cri-o), and the Go release it was built with."""
    go = _go()
    root = tmp_path_factory.mktemp("gobuild")
    source = root / "src"
    (source / "cmd" / "crio").mkdir(parents=True)
    (source / "go.mod").write_text(f"module {MODULE}\n\ngo 1.18\n")
    (source / "cmd" / "crio" / "main.go").write_text(PROGRAM)
    env = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false", "GOPROXY": "off", "GO111MODULE": "on",
           "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOCACHE": str(root / "cache"), "GOPATH": str(root / "gopath"),
           "GOENV": "off", "GOOS": "linux"}
    env.pop("GOARCH", None)
    binary = root / "crio-v1.34.0"
    built = subprocess.run([go, "build", "-o", str(binary), "./cmd/crio"], cwd=source, env=env,
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr
    version = subprocess.run([go, "env", "GOVERSION"], cwd=source, env=env, capture_output=True, text=True,
                             timeout=300).stdout.strip()
    return binary, version


@pytest.fixture
def running(go_binary: tuple[Path, str], tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """The Go program running from a copy of its own (under argv[0] "kubelet"), once it says so."""
    copy = tmp_path / "crio"
    shutil.copy2(go_binary[0], copy)
    child = subprocess.Popen(["kubelet"], executable=str(copy), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        yield child, copy
    finally:
        child.kill()
        child.communicate()


def test_a_go_binary_names_its_main_package_module_and_go_release(go_binary: tuple[Path, str]) -> None:
    binary, version = go_binary
    assert goexe.go_main_path(str(binary)) == MAIN
    info = goexe.go_build_info(str(binary))
    assert info == goexe.GoBuildInfo(go_version=version, path=MAIN, main_module=MODULE, main_version="(devel)")
    assert version.startswith("go")


def test_a_running_go_program_is_told_by_its_executable_not_its_argv0(
        running: tuple[subprocess.Popen[bytes], Path]) -> None:
    child, copy = running
    assert procfs.program(child.pid) == "kubelet"
    assert goexe.go_main_path(f"/proc/{child.pid}/exe") == MAIN
    assert procfs.read_exe(child.pid) == (os.path.realpath(copy), None)
    # Deleted on disk (an upgrade replaced it): /proc/PID/exe still opens what runs.
    copy.unlink()
    assert goexe.go_main_path(f"/proc/{child.pid}/exe") == MAIN
    assert procfs.read_exe(child.pid)[0] == f"{os.path.realpath(copy)} (deleted)"


def test_a_program_calling_itself_crio_is_no_go_program() -> None:
    # What `exec -a crio python3 server.py` runs: argv[0] says crio, the executable says otherwise.
    child = subprocess.Popen(["crio", "-c", "import sys; print('ready', flush=True); sys.stdin.read()"],
                             executable=sys.executable, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        assert procfs.program(child.pid) == "crio"
        assert goexe.go_main_path(f"/proc/{child.pid}/exe") is None
    finally:
        child.kill()
        child.communicate()


def test_what_is_no_go_binary_reads_as_none(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("path\texample.test/fake/cmd/crio\n")
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it to read would wait for a writer: it is no regular file
    shell = os.path.realpath("/bin/sh")
    assert goexe.go_build_info(shell) is None  # an ELF file, but C
    for path in (text, empty, fifo, tmp_path, tmp_path / "missing", "/proc/0/exe", "bad\0name"):
        assert goexe.go_build_info(str(path)) is None, path
        assert goexe.go_main_path(str(path)) is None, path


def test_a_truncated_go_binary_reads_as_none(go_binary: tuple[Path, str], tmp_path: Path) -> None:
    data = go_binary[0].read_bytes()
    blob = data.find(goexe.MAGIC)
    assert blob > 0
    # The ELF header cut; the section headers (at the end) gone; the blob cut in its header, in
    # its version string, in its module string.
    for size in (0, 10, 63, 4096, blob, blob + 20, blob + goexe.HEADER_SIZE + 4, blob + 60, blob + 200):
        cut = tmp_path / f"crio-{size}"
        cut.write_bytes(data[:size])
        assert goexe.go_build_info(str(cut)) is None, size


def test_without_section_headers_the_data_segment_is_searched(go_binary: tuple[Path, str], tmp_path: Path) -> None:
    # As sstrip leaves a binary: e_shoff, e_shnum and e_shstrndx zero.
    data = bytearray(go_binary[0].read_bytes())
    assert data[4] == 2 and data[5] == 1  # ELF64, little-endian (the build is for this machine)
    struct.pack_into("<Q", data, 0x28, 0)
    struct.pack_into("<HHH", data, 0x3C, 0, 0, 0)
    stripped = tmp_path / "crio-sstripped"
    stripped.write_bytes(bytes(data))
    assert goexe.go_main_path(str(stripped)) == MAIN


# Made-up ELF files: an ELF header, a .go.buildinfo section (and .shstrtab), and one writable PT_LOAD.
SENTINEL_START = bytes(range(0x30, 0x40))
SENTINEL_END = bytes(range(0x40, 0x50))
BLOB_OFFSET = 0x200
BLOB_ADDR = 0x10200


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def modinfo(path: str = MAIN, module: str = MODULE, version: str = "v1.2.3") -> bytes:
    lines = f"path\t{path}\nmod\t{module}\t{version}\t\nbuild\t-compiler=gc\n"
    return SENTINEL_START + lines.encode() + SENTINEL_END


def blob(version: bytes = b"go1.22.1", module: bytes | None = None, flags: int = 2, magic: bytes = goexe.MAGIC) -> bytes:
    module = modinfo() if module is None else module
    header = (magic + bytes([8, flags])).ljust(goexe.HEADER_SIZE, b"\0")
    return header + uvarint(len(version)) + version + uvarint(len(module)) + module


def elf(payload: bytes, *, wide: bool = True, little: bool = True, sections: bool = True,
        name: bytes = b".go.buildinfo", kind: int = 1, size: int | None = None, at: int = BLOB_OFFSET) -> bytes:
    """An ELF file with payload at file offset at (address BLOB_ADDR), in a section of that name
    and type (size bytes long, len(payload) unless told) and in a writable PT_LOAD."""
    o = "<" if little else ">"
    names = b"\0.shstrtab\0" + name + b"\0"
    names_at = 0x100
    size = len(payload) if size is None else size
    if wide:
        ph_layout, sh_layout, header_size = o + "IIQQQQQQ", o + "IIQQQQIIQQ", 64
        program = struct.pack(ph_layout, 1, 6, at, BLOB_ADDR, BLOB_ADDR, len(payload), len(payload), 0x1000)
    else:
        ph_layout, sh_layout, header_size = o + "IIIIIIII", o + "IIIIIIIIII", 52
        program = struct.pack(ph_layout, 1, at, BLOB_ADDR, BLOB_ADDR, len(payload), len(payload), 6, 0x1000)
    section_table = b"".join([
        struct.pack(sh_layout, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        struct.pack(sh_layout, 1, 3, 0, 0, names_at, len(names), 0, 0, 1, 0),
        struct.pack(sh_layout, 11, kind, 3, BLOB_ADDR, at, size, 0, 0, 16, 0),
    ])
    shoff = at + len(payload) + 16
    fields = (2, 62 if wide else 3, 1, 0, header_size, shoff if sections else 0, 0, header_size,
              len(program), 1, len(section_table) // 3 if sections else 0, 3 if sections else 0, 1 if sections else 0)
    header = bytes([0x7F, 0x45, 0x4C, 0x46, 2 if wide else 1, 1 if little else 2, 1]).ljust(16, b"\0")
    header += struct.pack(o + ("HHIQQQIHHHHHH" if wide else "HHIIIIIHHHHHH"), *fields)
    image = bytearray(shoff + len(section_table))
    image[:len(header)] = header
    image[header_size:header_size + len(program)] = program
    image[names_at:names_at + len(names)] = names
    image[at:at + len(payload)] = payload
    image[shoff:] = section_table
    return bytes(image)


def read(tmp_path: Path, data: bytes) -> goexe.GoBuildInfo | None:
    path = tmp_path / "made-up"
    path.write_bytes(data)
    return goexe.go_build_info(str(path))


@pytest.mark.parametrize("wide", [True, False], ids=["elf64", "elf32"])
@pytest.mark.parametrize("little", [True, False], ids=["le", "be"])
@pytest.mark.parametrize("sections", [True, False], ids=["section", "segment"])
def test_made_up_elf_files_are_read_by_section_or_segment(tmp_path: Path, wide: bool, little: bool,
                                                         sections: bool) -> None:
    assert read(tmp_path, elf(blob(), wide=wide, little=little, sections=sections)) == goexe.GoBuildInfo(
        "go1.22.1", MAIN, MODULE, "v1.2.3")


def test_a_module_string_past_the_first_read_is_read_to_its_end(tmp_path: Path) -> None:
    deps = "".join(f"dep\texample.test/dep{n}\tv1.0.{n}\th1:{'x' * 44}=\n" for n in range(2000))
    module = modinfo()[:-len(SENTINEL_END)] + deps.encode() + SENTINEL_END
    assert len(module) > goexe.SEARCH_BYTES
    assert read(tmp_path, elf(blob(module=module))) == goexe.GoBuildInfo("go1.22.1", MAIN, MODULE, "v1.2.3")


def test_a_build_without_modules_has_a_version_but_no_path(tmp_path: Path) -> None:
    path = tmp_path / "gopath-build"
    path.write_bytes(elf(blob(module=b"")))
    assert goexe.go_build_info(str(path)) == goexe.GoBuildInfo("go1.22.1", "", "", "")
    assert goexe.go_main_path(str(path)) is None
    # A module string without its framing counts as none, as `go version -m` has it.
    unframed = tmp_path / "unframed"
    unframed.write_bytes(elf(blob(module=b"path\texample.test/x\n" * 3)))
    assert goexe.go_main_path(str(unframed)) is None


@pytest.mark.parametrize("data", [
    pytest.param(elf(blob(flags=0)), id="pointer-format-before-go1.18"),
    pytest.param(elf(blob(magic=b"\xff Go buildinf!")), id="no-magic"),
    pytest.param(elf(b"\0" * 8 + blob()), id="magic-misaligned"),
    pytest.param(elf(blob(version=b"")), id="empty-version"),
    pytest.param(elf(blob(version=b"go\xff1.22")), id="version-not-utf8"),
    pytest.param(elf(blob(module=modinfo().replace(b"fake/cmd", b"fa\xffke/cmd"))), id="path-not-utf8"),
    pytest.param(elf(blob()[:goexe.HEADER_SIZE] + b"\xff" * 11), id="varint-too-long"),
    pytest.param(elf(blob()[:goexe.HEADER_SIZE] + b"\xff" * 9 + b"\x02"), id="varint-overflows-64-bits"),
    pytest.param(elf(blob()[:goexe.HEADER_SIZE] + uvarint(1 << 40) + b"go"), id="length-huge"),
    pytest.param(elf(blob()[:goexe.HEADER_SIZE] + uvarint(goexe.MAX_STRING + 1) + b"go"), id="length-past-bound"),
    pytest.param(elf(blob(), size=len(blob()) - 10), id="module-past-the-section"),
    pytest.param(elf(blob(), size=20), id="header-past-the-section"),
    pytest.param(elf(blob(), kind=8), id="section-nobits"),
    pytest.param(elf(blob())[:BLOB_OFFSET + 40], id="file-cut-in-the-blob"),
])
def test_malformed_build_information_reads_as_none(tmp_path: Path, data: bytes) -> None:
    assert read(tmp_path, data) is None


def test_a_section_past_the_end_of_the_file_reads_as_none(tmp_path: Path) -> None:
    data = bytearray(elf(blob()))
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    struct.pack_into("<Q", data, shoff + 2 * 64 + 24, 1 << 62)  # .go.buildinfo's sh_offset
    assert read(tmp_path, bytes(data)) is None
    struct.pack_into("<Q", data, shoff + 2 * 64 + 24, (1 << 64) - 1)
    assert read(tmp_path, bytes(data)) is None


def test_header_tables_out_of_bounds_fall_back_or_read_as_none(tmp_path: Path) -> None:
    good = elf(blob())
    shoff = struct.unpack_from("<Q", good, 0x28)[0]
    cases = {
        "shnum-huge": (0x3C, "<H", 0xFFFE),
        "shentsize-short": (0x3A, "<H", 8),
        "shoff-past-the-end": (0x28, "<Q", 1 << 40),
        "shstrndx-out-of-range": (0x3E, "<H", 7),
    }
    for label, (offset, layout, value) in cases.items():
        data = bytearray(good)
        struct.pack_into(layout, data, offset, value)
        # No usable section table: the writable segment is searched, and holds the blob.
        assert read(tmp_path, bytes(data)) == goexe.GoBuildInfo("go1.22.1", MAIN, MODULE, "v1.2.3"), label
        struct.pack_into("<H", data, 0x38, 0)  # and no program headers either
        assert read(tmp_path, bytes(data)) is None, label
    # More sections than e_shnum holds: the count in section 0's sh_size, the names' index in its sh_link.
    data = bytearray(good)
    struct.pack_into("<HH", data, 0x3C, 0, 0xFFFF)
    struct.pack_into("<Q", data, shoff + 32, 3)
    struct.pack_into("<I", data, shoff + 40, 1)
    struct.pack_into("<H", data, 0x38, 0)
    assert read(tmp_path, bytes(data)) == goexe.GoBuildInfo("go1.22.1", MAIN, MODULE, "v1.2.3")
    struct.pack_into("<Q", data, shoff + 32, 1 << 40)
    assert read(tmp_path, bytes(data)) is None


def test_damaged_files_never_raise(tmp_path: Path) -> None:
    """Bytes flipped and files cut anywhere in a made-up ELF file: None or an answer, never an exception."""
    rng = random.Random(1234)
    originals = [elf(blob()), elf(blob(), wide=False, little=False), elf(blob(), sections=False)]
    for round_ in range(600):
        data = bytearray(rng.choice(originals))
        for _flip in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            del data[rng.randrange(len(data)):]
        found = read(tmp_path, bytes(data))
        assert found is None or isinstance(found, goexe.GoBuildInfo), round_

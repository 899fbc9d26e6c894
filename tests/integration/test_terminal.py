"""pinctl's output where shells, scripts and people meet it, against a real containerd 1.7.

Closed pipes (| head -1 under pipefail, and a reader gone before the first write), a full
device, output encodings that cannot write every name, image names holding control characters
(containerd's API accepts any string: they are created here with its Images.Create call), and
a real 80-column terminal: tmux runs the command, capture-pane -J reads back every line whole.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from pinctl.proto import images_pb2, images_pb2_grpc
from tests.harness import images
from tests.harness.containerd import ContainerdDaemon
from tests.integration.pinctl_runner import assert_one_line_error

LoadImages = Callable[..., list[images.ImageInfo]]
PINCTL = [sys.executable, "-m", "pinctl"]
VENV_BIN = Path(sys.executable).parent
# Enough output to outlast a pipe's 64 KiB buffer several times over: the reader is gone while
# pinctl still writes, whatever the scheduling.
PIPE_NAMES = [f"example.test/pipe/{'long-path-segment/' * 4}app:{i:04d}" for i in range(2000)]
FORGED = "example.test/ctl/evil:1\nk8s.io   example.test/ctl/forged:1"
ESCAPE = "example.test/ctl/esc\x1b[31m:1"
RTL = "example.test/ctl/rtl\u202e:1"
CAFE = "example.test/caf\u00e9:1"
SNOW = "example.test/snow\u2603:1"


def pinctl_env(daemon: ContainerdDaemon, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "CONTAINERD_ADDRESS": daemon.address, "PINCTL_CONTAINERD_CONFIG": str(daemon.config_path)}
    for name in ("CONTAINERD_NAMESPACE", "PYTHONIOENCODING", "NO_COLOR", "PYTHONUNBUFFERED"):
        env.pop(name, None)
    env.update(extra or {})
    return env


# Python buffers stdout and stderr unless PYTHONUNBUFFERED is set (as CI systems often do).
BUFFERING = {"buffered": {}, "unbuffered": {"PYTHONUNBUFFERED": "1"}}


def run_bytes(daemon: ContainerdDaemon, *args: str, env: dict[str, str] | None = None,
              stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*PINCTL, *args], stdout=stdout, stderr=subprocess.PIPE, env=pinctl_env(daemon, env),
                          timeout=120)


def create_names(daemon: ContainerdDaemon, namespace: str, like: str, names: list[str]) -> None:
    """Image records through containerd's own API, which takes any string as a name: ctr and
    imports refuse or mangle the names these tests need. Create's request has the wire format of
    Update's without its mask, so pinctl's stubs serve."""
    metadata = (("containerd-namespace", namespace),)
    with grpc.insecure_channel(f"unix://{daemon.address}") as channel:
        target = images_pb2_grpc.ImagesStub(channel).Get(images_pb2.GetImageRequest(name=like), metadata=metadata).image.target
        create = channel.unary_unary("/containerd.services.images.v1.Images/Create",
                                     request_serializer=images_pb2.UpdateImageRequest.SerializeToString,
                                     response_deserializer=images_pb2.UpdateImageResponse.FromString)
        calls = [create.future(images_pb2.UpdateImageRequest(image=images_pb2.Image(name=name, target=target)),
                               metadata=metadata, timeout=30) for name in names]
        for call in calls:
            call.result()


@pytest.fixture(scope="module")
def pipe_ns(containerd17: ContainerdDaemon, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A namespace of its own with one image under 2,000 long names."""
    namespace = f"pinctl-terminal-pipe-{os.getpid()}"
    images.load_images(containerd17, tmp_path_factory.mktemp("pipe"), [images.recipe("example.test/pipe/base:1", seed="pipe")],
                       namespace)
    create_names(containerd17, namespace, "example.test/pipe/base:1", PIPE_NAMES)
    yield namespace
    containerd17.clear_images(namespace)
    containerd17.ctr("namespaces", "rm", namespace, namespace=namespace, check=False)


@pytest.fixture
def odd_ns(containerd17: ContainerdDaemon, fresh_namespace: Callable[[ContainerdDaemon], str],
           load_images: LoadImages) -> str:
    """A fresh namespace whose image also goes by names with control and non-ASCII characters."""
    namespace = fresh_namespace(containerd17)
    load_images(containerd17, [images.recipe("example.test/ctl/base:1", seed="ctl")], namespace)
    create_names(containerd17, namespace, "example.test/ctl/base:1", [FORGED, ESCAPE, RTL, CAFE, SNOW])
    return namespace


# -- 1. closed pipes and full devices ----------------------------------------------------------

PIPED = {
    "ls": (["ls"], "NAMESPACE "),
    "ls-q": (["ls", "-q"], "example.test/pipe/"),
    "ls-wide": (["ls", "-o", "wide"], "NAMESPACE "),
    "ls-json": (["ls", "-o", "json"], "{"),
    "pin-dry-run": (["pin", "--dry-run", "example.test/pipe/*"], "ACTION "),
}


@pytest.mark.parametrize("case", list(PIPED))
def test_head_closing_the_pipe_ends_quietly_with_141(containerd17: ContainerdDaemon, pipe_ns: str, case: str) -> None:
    args, first = PIPED[case]
    shell = ["bash", "-o", "pipefail", "-c", '"$@" | head -1', "bash", *PINCTL, "-n", pipe_ns, *args]
    result = subprocess.run(shell, capture_output=True, env=pinctl_env(containerd17), timeout=120)
    assert (result.returncode, result.stderr) == (141, b"")
    [line] = result.stdout.decode().splitlines()
    assert line.startswith(first)


# A listing past Python's own 8 KiB buffer that still fits a pipe's 64 KiB (docs/output.md, Exit codes).
SMALL_NAMES = [f"example.test/small/team-platform/component/app-{i:03d}:1.0" for i in range(160)]


@pytest.mark.parametrize("buffering", list(BUFFERING))
@pytest.mark.parametrize("args", [["ls"], ["ls", "-q"]])
def test_head_of_a_listing_that_fits_the_pipe_exits_0_every_time(
        containerd17: ContainerdDaemon, fresh_namespace: Callable[[ContainerdDaemon], str], load_images: LoadImages,
        args: list[str], buffering: str) -> None:
    """docs/output.md promises 0 for `pinctl ls | head -1` on a node whose listing fits the pipe:
    pinctl has written everything before head leaves. Row by row (PYTHONUNBUFFERED, or past
    8 KiB), head's exit met a later write: 0, 141, 0 on three runs."""
    namespace = fresh_namespace(containerd17)
    load_images(containerd17, [images.recipe("example.test/small/base:1", seed="small")], namespace)
    create_names(containerd17, namespace, "example.test/small/base:1", SMALL_NAMES)
    listing = run_bytes(containerd17, "-n", namespace, *args, env=BUFFERING[buffering])
    assert listing.returncode == 0 and 8 * 1024 < len(listing.stdout) < 64 * 1024, len(listing.stdout)
    shell = ["bash", "-o", "pipefail", "-c", '"$@" | head -1 >/dev/null', "bash", *PINCTL, "-n", namespace, *args]
    env = pinctl_env(containerd17, BUFFERING[buffering])
    codes = [subprocess.run(shell, capture_output=True, env=env, timeout=120).returncode for _ in range(8)]
    assert codes == [0] * 8


@pytest.mark.parametrize("buffering", list(BUFFERING))
@pytest.mark.parametrize("args", [["namespaces"], ["namespaces", "-q"], ["ls", "-q"], ["ls"], ["--help"]])
def test_a_reader_gone_before_the_first_write(containerd17: ContainerdDaemon, args: list[str], buffering: str) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = run_bytes(containerd17, *args, stdout=write_end, env=BUFFERING[buffering])
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (141, b"")


@pytest.mark.parametrize("buffering", list(BUFFERING))
@pytest.mark.parametrize("args", [["ls"], ["ls", "-q"], ["ls", "-o", "json"], ["namespaces"],
                                  ["pin", "--dry-run", "example.test/pipe/base:1"], ["completion", "bash"]])
def test_a_full_device_is_one_plain_error(containerd17: ContainerdDaemon, pipe_ns: str, args: list[str],
                                          buffering: str) -> None:
    with open("/dev/full", "wb") as full:
        result = subprocess.run([*PINCTL, "-n", pipe_ns, *args], stdout=full, stderr=subprocess.PIPE, text=True,
                                env=pinctl_env(containerd17, BUFFERING[buffering]), timeout=120)
    assert_one_line_error(result, 1, "pinctl: cannot write output: No space left on device")
    assert result.stderr == "pinctl: cannot write output: No space left on device\n"


@pytest.mark.parametrize("buffering", list(BUFFERING))
def test_unwritable_diagnostics_fail_without_a_traceback(containerd17: ContainerdDaemon, pipe_ns: str,
                                                         buffering: str) -> None:
    """pin's summary goes to stderr; with stderr on a full device there is nobody to tell: exit 1,
    not Python's 120 for a flush that failed at exit."""
    with open("/dev/full", "wb") as full:
        result = subprocess.run([*PINCTL, "-n", pipe_ns, "pin", "--dry-run", "example.test/pipe/base:1"],
                                stdout=subprocess.PIPE, stderr=full, env=pinctl_env(containerd17, BUFFERING[buffering]),
                                timeout=120)
    assert result.returncode == 1
    assert result.stdout.decode().splitlines()[1].split() == ["would", "be", "pinned", pipe_ns, "example.test/pipe/base:1"]


def test_a_stdout_closed_at_start_is_one_plain_error(containerd17: ContainerdDaemon, pipe_ns: str) -> None:
    result = subprocess.run(["bash", "-c", '"$@" >&-', "bash", *PINCTL, "-n", pipe_ns, "ls", "-q"],
                            capture_output=True, text=True, env=pinctl_env(containerd17), timeout=120)
    assert_one_line_error(result, 1, "pinctl: cannot write output: Bad file descriptor")


# -- 2. output encodings that cannot write every name ------------------------------------------

ENCODINGS = {
    "C": ({"LC_ALL": "C", "PYTHONUTF8": "0"}, "ascii"),
    "latin-1": ({"PYTHONIOENCODING": "latin-1"}, "latin-1"),
}


@pytest.mark.parametrize("locale", list(ENCODINGS))
def test_every_name_is_listed_in_a_narrow_encoding(containerd17: ContainerdDaemon, odd_ns: str, locale: str) -> None:
    env, encoding = ENCODINGS[locale]
    result = run_bytes(containerd17, "-n", odd_ns, "ls", env=env)
    assert (result.returncode, result.stderr) == (0, b"")
    text = result.stdout.decode(encoding)
    refs = [line.split()[1] for line in text.splitlines()[1:]]
    assert len(refs) == 6 and "example.test/snow\\u2603:1" in refs
    assert (CAFE if encoding == "latin-1" else "example.test/caf\\xe9:1") in refs
    document = json.loads(run_bytes(containerd17, "-n", odd_ns, "ls", "-o", "json", env=env).stdout)
    assert {CAFE, SNOW, FORGED} <= {image["ref"] for image in document["images"]}


@pytest.mark.parametrize("locale", list(ENCODINGS))
def test_quiet_names_stay_exact_in_a_narrow_encoding(containerd17: ContainerdDaemon, odd_ns: str, locale: str) -> None:
    env, encoding = ENCODINGS[locale]
    result = run_bytes(containerd17, "-n", odd_ns, "ls", "-q", env=env)
    assert result.returncode == 0
    names = result.stdout.decode(encoding).splitlines()
    assert names == ["example.test/caf\u00e9:1", "example.test/ctl/base:1"][encoding == "ascii":]
    [warning] = result.stderr.decode(encoding).splitlines()
    left_out = 5 if encoding == "ascii" else 4
    assert f"{left_out} names hold" in warning and "left out" in warning and "-o json" in warning
    named = re.search(r"output encoding \((.+?)\)", warning)
    assert named and codecs.lookup(named.group(1)) == codecs.lookup(encoding)


# -- 3. names with control characters -----------------------------------------------------------


def test_tables_show_control_characters_escaped(containerd17: ContainerdDaemon, odd_ns: str) -> None:
    result = run_bytes(containerd17, "-n", odd_ns, "ls")
    assert result.returncode == 0 and b"\x1b" not in result.stdout and "\u202e".encode() not in result.stdout
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 7 and all(line.startswith(f"{odd_ns} ") for line in lines[1:])
    ref_column = slice(lines[0].index("REF"), lines[0].index("IMAGE ID"))
    refs = {line[ref_column].strip() for line in lines[1:]}
    assert {"example.test/ctl/evil:1\\nk8s.io   example.test/ctl/forged:1", "example.test/ctl/esc\\x1b[31m:1",
            "example.test/ctl/rtl\\u202e:1"} <= refs
    plan = run_bytes(containerd17, "-n", odd_ns, "pin", "--dry-run", "example.test/ctl/*")
    assert plan.returncode == 0 and b"\x1b" not in plan.stdout + plan.stderr
    assert len(plan.stdout.decode().splitlines()) == 5  # the header, base and the three odd names


def test_quiet_and_json_keep_names_exact(containerd17: ContainerdDaemon, odd_ns: str) -> None:
    quiet = run_bytes(containerd17, "-n", odd_ns, "ls", "-q")
    assert quiet.stdout.decode().splitlines() == [CAFE, "example.test/ctl/base:1", SNOW]
    assert quiet.stderr.decode().count("\n") == 1 and "3 names hold control characters" in quiet.stderr.decode()
    slow = run_bytes(containerd17, "-n", odd_ns, "ls", "-q", "example.test/ctl/*")  # the path that reads manifests
    assert slow.stdout.decode().splitlines() == ["example.test/ctl/base:1"]
    document = json.loads(run_bytes(containerd17, "-n", odd_ns, "ls", "-o", "json").stdout)
    assert sorted(image["ref"] for image in document["images"]) == sorted(
        [FORGED, ESCAPE, RTL, CAFE, SNOW, "example.test/ctl/base:1"])


def test_watch_logs_control_characters_escaped(containerd17: ContainerdDaemon, odd_ns: str, tmp_path: Path) -> None:
    log_path = tmp_path / "watch.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([*PINCTL, "-n", odd_ns, "sync", "--watch", "--pinned-image", "example.test/ctl/*"],
                                stdout=subprocess.DEVNULL, stderr=log, env=pinctl_env(containerd17))
    try:
        deadline = time.monotonic() + 30
        while b" full sync " not in log_path.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_bytes()
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    raw = log_path.read_bytes()
    assert b"\x1b" not in raw and "\u202e".encode() not in raw
    lines = raw.decode().splitlines()
    assert all(re.match(r"\d{4}-\d\d-\d\dT", line) for line in lines), lines
    pinned = [line for line in lines if " info pinned " in line]
    assert any("ref=example.test/ctl/evil:1\\nk8s.io   example.test/ctl/forged:1)" in line for line in pinned)
    assert any("ref=example.test/ctl/esc\\x1b[31m:1)" in line for line in pinned)


# -- 5. dry runs say 'would' --------------------------------------------------------------------


def test_a_dry_run_says_would_in_the_table_and_the_summary(containerd17: ContainerdDaemon, odd_ns: str) -> None:
    assert run_bytes(containerd17, "-n", odd_ns, "pin", "example.test/ctl/base:1").returncode == 0
    result = run_bytes(containerd17, "-n", odd_ns, "pin", "--dry-run", "example.test/ctl/*")
    actions = [line.split("   ")[0] for line in result.stdout.decode().splitlines()]
    assert actions == ["ACTION", "already pinned", "would be pinned", "would be pinned", "would be pinned"]
    assert result.stderr.decode() == "pinctl: pin (dry run): 3 would be pinned, 1 already pinned\n"
    done = run_bytes(containerd17, "-n", odd_ns, "pin", "example.test/ctl/*")
    assert done.stderr.decode() == "pinctl: pin: 3 pinned, 1 already pinned\n"
    assert [line.split("   ")[0] for line in done.stdout.decode().splitlines()][1:] == ["already pinned"] + ["pinned"] * 3


# -- 4, 6, 7. a real 80-column terminal ---------------------------------------------------------


class Tmux:
    """bash in a private tmux server, 80 columns wide: commands in, whole lines out."""

    def __init__(self, tmp_path: Path, env: dict[str, str], width: int = 80, height: int = 50) -> None:
        tmux = shutil.which("tmux")
        if tmux is None:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail("tmux is not installed (scripts/test-packages.txt)", pytrace=False)
            pytest.skip("tmux is not installed")
        self.argv = [tmux, "-S", str(tmp_path / "tmux.sock"), "-f", "/dev/null"]
        self.env = env
        self.width = width
        self.tmux("new-session", "-d", "-x", str(width), "-y", str(height), "bash", "--norc", "--noprofile", "-i")
        self.tmux("send-keys", "-l", "PS1='$ '; clear\n")
        self.wait_for(r"^\$ $")

    def tmux(self, *args: str) -> str:
        return subprocess.run([*self.argv, *args], env=self.env, check=True, capture_output=True, text=True,
                              timeout=60).stdout

    def screen(self) -> str:
        """The screen with every wrapped line joined again and its trailing blanks kept."""
        return self.tmux("capture-pane", "-p", "-J")

    def wait_for(self, pattern: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, screen := self.screen(), re.MULTILINE):
            assert time.monotonic() < deadline, f"no {pattern!r} on the screen:\n{screen}"
            time.sleep(0.05)
        return screen

    def start(self, command: str) -> None:
        """Run command on a cleared screen; its exit status follows its output as EXIT=n."""
        self.tmux("send-keys", "-l", "clear\n")
        self.wait_for(r"\A\$ \n\s*\Z")
        self.tmux("send-keys", "-l", f"{command}; echo EXIT=$?\n")

    def output_of(self, command: str, timeout: float = 60) -> list[str]:
        """The lines command leaves on a cleared screen, up to its exit status."""
        self.start(command)
        lines = self.wait_for(r"^EXIT=\d+$", timeout).split("\n")
        typed = f"{command}; echo EXIT=$?"
        if lines[:2] == [typed, f"$ {typed}"]:
            # Keys that reached the tty between bash's prompt and readline taking the terminal are
            # echoed once more (a busy machine widens that moment): the tty's echo, not output.
            lines = lines[1:]
        assert lines[0] == f"$ {typed}", lines
        end = next(i for i, line in enumerate(lines) if re.match(r"EXIT=\d+$", line))
        return lines[1:end + 1]

    def close(self) -> None:
        subprocess.run([*self.argv, "kill-server"], env=self.env, capture_output=True)


@pytest.fixture
def terminal(containerd17: ContainerdDaemon, tmp_path: Path) -> Iterator[Tmux]:
    env = pinctl_env(containerd17, {
        "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", "TERM": "xterm-256color", "LANG": "C.UTF-8",
        "CONTAINER_RUNTIME_ENDPOINT": f"unix://{containerd17.address}", "HOME": str(tmp_path),
        "PINCTL_CONFIG": str(tmp_path / "none.toml"),
    })
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    (tmp_path / "none.toml").write_text("")  # no file of the machine's decides the policy
    term = Tmux(tmp_path, env)
    yield term
    term.close()


def assert_fits(lines: list[str], width: int = 80) -> None:
    shown = "\n".join(lines)
    assert all(len(line) <= width for line in lines), shown
    assert all(line.strip() and line == line.rstrip() for line in lines), shown  # no padding, no blank rows


@pytest.fixture
def k8s(containerd17: ContainerdDaemon, clean_k8s_io: Callable[[ContainerdDaemon], ContainerdDaemon],
        load_images: LoadImages) -> ContainerdDaemon:
    """k8s.io with two images the CRI knows, each with its sha256:<id> reference."""
    daemon = clean_k8s_io(containerd17)
    load_images(daemon, [images.recipe("example.test/app:1", "example.test/app:latest", seed="term-app"),
                         images.recipe("registry.example/team/tool:2.1", seed="term-tool")])
    return daemon


POLICY = ["--pinned-image", "example.test/*", "--pinned-image", "*tool*", "--pinned-image", "*app*"]


def test_ls_fits_an_80_column_terminal(k8s: ContainerdDaemon, terminal: Tmux) -> None:
    lines = terminal.output_of("pinctl -n k8s.io ls --id-refs " + " ".join(f"'{arg}'" for arg in POLICY))
    assert lines.pop() == "EXIT=0"
    assert_fits(lines)
    # IMAGE ID leaves before a name is cut (-o wide keeps it).
    assert lines[0] == "NAMESPACE: k8s.io" and lines[1].split()[0] == "REF"
    rows = [line for line in lines[2:] if not line.startswith(" ")]  # WHY goes on under its row
    refs = [line.split()[0] for line in rows]
    assert "example.test/app:1" in refs and "registry.example/team/tool:2.1" in refs
    digest_refs = [ref for ref in refs if ref.startswith("sha256:")]
    assert digest_refs and all(re.fullmatch(r"sha256:[0-9a-f]{12}…", ref) for ref in digest_refs)
    assert not any(line.endswith("…") for line in lines[2:])  # WHY wraps, whole, instead of being cut
    wide = terminal.output_of("pinctl -n k8s.io ls -o wide " + " ".join(f"'{arg}'" for arg in POLICY))
    assert wide.pop() == "EXIT=0"
    assert all(line == line.rstrip() for line in wide) and "…" not in "".join(wide)
    assert any(re.search(r"sha256:[0-9a-f]{64}", line) for line in wide[1:])


def test_check_keeps_cause_and_fix_readable(k8s: ContainerdDaemon, terminal: Tmux) -> None:
    lines = terminal.output_of("pinctl check --pinned-image 'example.test/*'")
    assert lines.pop() == "EXIT=1"
    # The verdict may wrap (it names the socket, whose path is as long as the test's tmp dir).
    tail: list[str] = []
    while lines and lines[-1].startswith(" "):
        tail.insert(0, lines.pop().strip())
    verdict = " ".join([lines.pop(), *tail])
    assert_fits(lines)
    assert "disagree on 1 of" in verdict
    assert lines[0].split() == ["IMAGE", "IMAGE", "ID", "WANTED", "CRI", "PINNED"]
    assert lines[1].split()[0] == "example.test/app:1"
    notes = " ".join(line.strip() for line in lines[2:])
    assert "cause: pattern known only to pinctl: containerd reads labels, not patterns" in notes
    # containerd 1.7: labels only; config export (2.x's pinned_images) is not offered.
    assert "fix: pinctl sync" in " ".join(notes.split()) and "config export" not in notes


def test_check_wait_shows_a_status_line_on_a_terminal_only(k8s: ContainerdDaemon, terminal: Tmux) -> None:
    terminal.start("pinctl check --wait 4 --pinned-image 'example.test/*'")
    status = terminal.wait_for(r"check: 1 image disagrees; waiting for the runtime, \d s left", timeout=30)
    assert not re.search(r"^EXIT=", status, re.MULTILINE)
    lines = terminal.wait_for(r"^EXIT=\d+$").rstrip().split("\n")
    assert lines[-2:] == ["EXIT=1", "$"]
    assert "waiting for the runtime" not in "\n".join(lines)  # the status line went with the wait
    start = next(i for i, line in enumerate(lines) if line.startswith("pinctl: check: "))
    said = " ".join(line.strip() for line in lines[start:-2])  # folded to the window on a terminal
    verdict = re.fullmatch(r"pinctl: check: .* disagree on 1 of \d+ images \(after (\d+\.\d) s\)", said)
    assert verdict and float(verdict.group(1)) >= 4.0, lines  # the last read ends past the deadline


def test_check_wait_prints_no_status_into_a_pipe(k8s: ContainerdDaemon) -> None:
    result = run_bytes(k8s, "check", "--wait", "1.5", "--pinned-image", "example.test/*",
                       env={"CONTAINER_RUNTIME_ENDPOINT": f"unix://{k8s.address}"})
    assert result.returncode == 1
    [verdict] = result.stderr.decode().splitlines()
    waited = re.search(r"disagree on 1 of \d+ images \(after (\d+\.\d) s\)$", verdict)
    assert waited and float(waited.group(1)) >= 1.5, verdict
    assert b"waiting" not in result.stderr and b"\x1b" not in result.stderr + result.stdout


def test_a_failed_pin_shows_once_on_a_terminal(k8s: ContainerdDaemon, terminal: Tmux) -> None:
    lines = terminal.output_of("pinctl -n k8s.io pin example.test/app:1 nothing.example/x:1")
    assert lines.pop() == "EXIT=3"
    shown = "\n".join(lines)
    assert shown.count("nothing.example/x:1") == 2, shown  # its row and its error line
    [error] = [line for line in lines if line.startswith("  error: ")]
    assert "nothing.example/x:1" in error
    assert lines[0].split() == ["ACTION", "NAMESPACE", "REF"]
    assert lines[-1] == "pinctl: pin: 1 pinned, 1 failed"
    again = terminal.output_of("pinctl -n k8s.io pin example.test/app:1")
    assert again[0].split() == ["ACTION", "NAMESPACE", "REF"] and again.pop() == "EXIT=0"


def test_a_failed_pin_in_a_pipe_is_a_column_and_a_stderr_line(k8s: ContainerdDaemon) -> None:
    result = run_bytes(k8s, "-n", "k8s.io", "pin", "example.test/app:1", "nothing.example/x:1")
    assert result.returncode == 3
    lines = result.stdout.decode().splitlines()
    assert lines[0].split() == ["ACTION", "NAMESPACE", "REF", "ERROR"]
    errors = result.stderr.decode().splitlines()
    assert len(errors) == 2 and errors[0].startswith("pinctl: pin nothing.example/x:1: ")
    assert errors[1] == "pinctl: pin: 1 pinned, 1 failed"

"""The guarded stdout: a closed pipe and a full device become pinctl's own errors, whoever writes."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator

import pytest

from pinctl import streams
from pinctl.errors import EXIT_PIPE, OutputClosed, OutputError


@pytest.fixture
def closed_pipe() -> Iterator[io.TextIOWrapper]:
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(write_end, "w", encoding="utf-8") as stream:
        yield stream


def test_a_closed_pipe_is_output_closed(closed_pipe: io.TextIOWrapper) -> None:
    guarded = streams._guarded(closed_pipe, "strict")
    assert guarded is not None
    guarded.write("example.test/app:1\n" * 10)
    with pytest.raises(OutputClosed) as caught:
        guarded.flush()
    streams.discard(closed_pipe.fileno())  # as run() does: what is still buffered goes nowhere
    guarded.flush()
    assert caught.value.exit_code == EXIT_PIPE == 141 and caught.value.fd == closed_pipe.fileno()
    assert not isinstance(caught.value, OSError)  # click swallows OSErrors: this must reach run()


def test_a_full_device_is_one_output_error() -> None:
    with open("/dev/full", "w") as full:
        guarded = streams._guarded(full, "strict")
        assert guarded is not None
        guarded.write("x")
        with pytest.raises(OutputError) as caught:
            guarded.flush()
        streams.discard(full.fileno())
        guarded.flush()
    assert "No space left on device" in str(caught.value) and caught.value.exit_code == 1


def test_the_guarded_stream_escapes_what_its_encoding_cannot_carry(tmp_path: pytest.TempPathFactory) -> None:
    path = os.path.join(str(tmp_path), "out")
    with open(path, "w", encoding="ascii") as plain:
        guarded = streams._guarded(plain, "backslashreplace")
        assert guarded is not None and guarded.encoding == "ascii"
        guarded.write("example.test/café:1\n")
        guarded.flush()
    with open(path, "rb") as written:
        assert written.read() == b"example.test/caf\\xe9:1\n"


def test_a_stream_without_a_descriptor_is_left_alone() -> None:
    assert streams._guarded(io.StringIO(), "strict") is None


def test_an_unbuffered_stream_fails_at_the_write_itself() -> None:
    """PYTHONUNBUFFERED leaves a stream without a buffer: a diagnostic must fail as it is written,
    not at exit, where Python could only say 'Exception ignored' and exit 120."""
    with open("/dev/full", "wb", buffering=0) as raw:
        unbuffered = io.TextIOWrapper(raw, write_through=True)
        guarded = streams._guarded(unbuffered, "backslashreplace")
        assert guarded is not None
        with pytest.raises(OutputError):
            guarded.write("pinctl: a warning\n")
        unbuffered.detach()


def test_a_descriptor_closed_at_start_is_a_write_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdout", None)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    streams.install()
    import sys

    assert not sys.stdout.isatty()
    with pytest.raises(OutputError) as caught:
        sys.stdout.write("example.test/app:1\n")
    assert str(caught.value) == "cannot write output: Bad file descriptor" and caught.value.fd == 1


@pytest.mark.parametrize("buffering", ["python's", "PYTHONUNBUFFERED"])
def test_stdout_into_a_pipe_goes_out_in_one_write_at_the_end(buffering: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing that fits a pipe's buffer is written whole at the end, whatever the environment
    asked: `pinctl ls | head -1` then finds pinctl done and exits 0. Written row by row (as an
    unbuffered stream does), head's exit after the first row met the next write: 141."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    unbuffered = buffering == "PYTHONUNBUFFERED"
    raw = open(write_end, "wb", buffering=0 if unbuffered else -1)
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=unbuffered)
    try:
        monkeypatch.setattr("sys.stdout", stream)
        monkeypatch.setattr("sys.stderr", io.StringIO())
        streams.install()
        import sys

        guarded = sys.stdout
        assert guarded is not stream
        rows = [f"k8s.io   example.test/app-{n}:1.0   3ab413910e19   836 B   no   -\n" for n in range(600)]
        assert 8 * 1024 < sum(map(len, rows)) < 64 * 1024  # past Python's own 8 KiB buffer
        for row in rows:
            guarded.write(row)
        with pytest.raises(BlockingIOError):
            os.read(read_end, 1)  # nothing written yet
        guarded.flush()
        assert os.read(read_end, 64 * 1024).decode() == "".join(rows)  # all of it, in one write
    finally:
        stream.detach()
        raw.close()
        os.close(read_end)

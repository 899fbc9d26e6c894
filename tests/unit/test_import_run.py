"""import's orchestration over a fake runtime: item by item, each pin right after its own record,
nothing of a refused archive pinned, pull's disk budget before and while an archive is written,
exit codes; and the command wired through the CLI with its JSON envelope."""

from __future__ import annotations

import json
import pathlib
from typing import IO, Any, Callable, Optional

import pytest

from pinctl.errors import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL
from pinctl.gc.model import ImageFs
from pinctl.imports import run as importing
from pinctl.imports.archive import read_archive
from pinctl.imports.layout import Platforms, plan_import
from pinctl.imports.run import ImportRequest, ImportRun, Loaded, Watch
from tests.harness import archives, images

from .test_import_archive import CORPUS, MemorySink

GIB = 1024 ** 3


class FakeTarget:
    """A runtime that keeps blobs in memory and records in a dict; its filesystem is made up."""

    name = "fake runtime"
    namespace = "k8s.io"

    def __init__(self, used: float = 0.1, capacity: int = 10 * GIB) -> None:
        self.sink = MemorySink()
        self.records: dict[str, str] = {}
        self.capacity = capacity
        self.used = used
        self.events: list[str] = []
        self.loads = 0
        self.watch_answers: list[Optional[str]] = []

    def filesystem(self) -> ImageFs:
        return ImageFs(self.capacity, int(self.capacity * (1 - self.used)))

    def load(self, archive: str, source: IO[bytes], platforms: Platforms, watch: Watch,
             progress: Callable[[str], None], loaded: Callable[[Loaded], None]) -> list[str]:
        self.loads += 1
        found = read_archive(source, archive, self.sink)
        plan = plan_import(found, self.sink.read, self.sink.has, platforms)
        self.watch_answers.append(watch(found.bytes_read))
        for image in plan.images:
            for name in image.names:
                changed = self.records.get(name) != image.target.digest
                self.records[name] = image.target.digest
                self.events.append(f"record {name}")
                loaded(Loaded(name, changed, image.target.digest, tuple(image.platforms)))
        return plan.unnamed


class FakeLabels:
    def __init__(self, target: FakeTarget, fail: tuple[str, ...] = ()) -> None:
        self.target = target
        self.fail = fail

    def pin(self, namespace: str, ref: str) -> tuple[str, Optional[str]]:
        self.target.events.append(f"pin {ref}")
        if ref in self.fail:
            return "failed", "refused"
        return "pinned", None


def archive(tmp_path: pathlib.Path, name: str, *refs: str) -> str:
    path = tmp_path / name
    archives.oci_archive(path, [images.recipe(ref, seed=ref) for ref in refs])
    return str(path)


def run_import(target: FakeTarget, paths: list[str], pin: bool = True, max_usage: float = 80.0,
               labels: Optional[FakeLabels] = None) -> importing.ImportReport:
    request = ImportRequest(tuple(paths), pin=pin, max_usage=max_usage)
    job = ImportRun(target, labels or FakeLabels(target), request)
    items, interrupted = importing.run(job, paths)
    return importing.ImportReport(target.name, items, max_usage, interrupted, job.notes)


def test_each_reference_is_pinned_right_after_its_own_record(tmp_path: pathlib.Path) -> None:
    target = FakeTarget()
    path = archive(tmp_path, "two.tar", "example.test/one:1", "example.test/two:1")
    report = run_import(target, [path])
    assert report.exit_code == EXIT_OK
    assert target.events == ["record example.test/one:1", "pin example.test/one:1",
                             "record example.test/two:1", "pin example.test/two:1"]
    assert [(i.ref, i.action, i.pin) for i in report.items] == [
        ("example.test/one:1", "imported", "pinned"), ("example.test/two:1", "imported", "pinned")]
    again = run_import(target, [path])
    assert [i.action for i in again.items] == ["present", "present"]


def test_a_refused_archive_is_one_failed_item_and_nothing_of_it_is_pinned(tmp_path: pathlib.Path) -> None:
    target = FakeTarget()
    good = archive(tmp_path, "good.tar", "example.test/good:1")
    report = run_import(target, [str(CORPUS / "digest-mismatch.tar"), good])
    assert report.exit_code == EXIT_PARTIAL
    failed, ok = report.items
    assert failed.action == "failed" and failed.ref == "" and "does not match its digest" in (failed.why or "")
    assert ok.ref == "example.test/good:1" and ok.pin == "pinned"
    assert target.events == ["record example.test/good:1", "pin example.test/good:1"]


def test_every_archive_failing_is_exit_1_and_a_missing_file_says_so(tmp_path: pathlib.Path) -> None:
    report = run_import(FakeTarget(), [str(tmp_path / "nope.tar"), str(tmp_path)])
    assert report.exit_code == EXIT_ERROR
    assert "cannot be opened: no such file" in (report.items[0].why or "")
    assert "is not a regular file" in (report.items[1].why or "")


def test_the_budget_refuses_an_archive_that_would_not_fit(tmp_path: pathlib.Path) -> None:
    target = FakeTarget(used=0.79, capacity=1024 * 1024)
    path = archive(tmp_path, "fits-not.tar", "example.test/big:1")
    report = run_import(target, [path], max_usage=80.0)
    assert report.exit_code == EXIT_ERROR and target.loads == 0
    assert "no room" in (report.items[0].why or "") and "past the budget of 80%" in (report.items[0].why or "")
    assert target.events == []


def test_the_budget_is_read_again_while_the_archive_is_written(tmp_path: pathlib.Path) -> None:
    target = FakeTarget(used=0.1)
    path = archive(tmp_path, "a.tar", "example.test/a:1")
    run_import(target, [path], max_usage=80.0)
    target.used = 0.95
    run_import(target, [path], max_usage=100.0)  # claimed fine (100%), then the watch compares with 100
    assert target.watch_answers[0] is None and target.watch_answers[1] is None
    target.used = 0.9
    request = ImportRequest((path,), max_usage=85.0)
    job = ImportRun(target, FakeLabels(target), request)
    assert "reached 90%" in (job._watch(0) or "")


def test_a_failed_pin_makes_the_run_partial(tmp_path: pathlib.Path) -> None:
    target = FakeTarget()
    path = archive(tmp_path, "p.tar", "example.test/p:1", "example.test/q:1")
    report = run_import(target, [path], labels=FakeLabels(target, fail=("example.test/q:1",)))
    assert report.exit_code == EXIT_PARTIAL
    assert [(i.pin, i.why) for i in report.items] == [("pinned", None), ("failed", "refused")]


def test_without_pin_nothing_is_labelled(tmp_path: pathlib.Path) -> None:
    target = FakeTarget()
    report = run_import(target, [archive(tmp_path, "n.tar", "example.test/n:1")], pin=False)
    assert report.items[0].pin is None and target.events == ["record example.test/n:1"]


def test_an_archive_naming_no_image_fails(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "anon.tar"
    archives.oci_archive(path, [images.recipe("example.test/anon:1", seed="anon")])
    entries = archives.members(path)
    index = json.loads(dict((i.name, d) for i, d in entries)["index.json"] or b"")
    for entry in index["manifests"]:
        entry.pop("annotations")
    archives.write_tar(path, [(i, json.dumps(index).encode() if i.name == "index.json" else d) for i, d in entries])
    report = run_import(FakeTarget(), [str(path)])
    assert report.exit_code == EXIT_ERROR and "names no image" in (report.items[0].why or "")


def test_an_interrupt_reports_the_rest_interrupted(tmp_path: pathlib.Path) -> None:
    class Interrupted(FakeTarget):
        def load(self, *args: Any, **kwargs: Any) -> list[str]:
            raise KeyboardInterrupt

    paths = [archive(tmp_path, "i.tar", "example.test/i:1"), archive(tmp_path, "j.tar", "example.test/j:1")]
    report = run_import(Interrupted(), paths)
    assert report.interrupted and report.exit_code == 130
    assert [i.why for i in report.items] == ["interrupted", "interrupted"]


# -- through the CLI -----------------------------------------------------------------------------


def test_import_through_the_cli_writes_its_envelope(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    from .test_cli_wiring import invoke

    target = FakeTarget()
    monkeypatch.setattr("pinctl.imports.targets.choose_import_target", lambda *args, **kwargs: target)
    monkeypatch.setattr("pinctl.pull.targets.NodeLabels", lambda node: FakeLabels(target))
    monkeypatch.setattr("pinctl.node.sources.open_node", lambda cfg, warn: _empty_node())
    monkeypatch.setenv("PINCTL_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    path = archive(tmp_path, "cli.tar", "example.test/cli:1")
    code, out, err = invoke("import", "--pin", "--max-usage", "90", path, "-o", "json")
    assert code == EXIT_OK, err
    document = json.loads(out)
    assert document["command"] == "import" and document["status"] == "success" and document["max_usage"] == 90.0
    assert document["imports"][0]["ref"] == "example.test/cli:1" and document["imports"][0]["pin"] == "pinned"
    code, out, err = invoke("import", str(CORPUS / "traversal.tar"))
    assert code == EXIT_ERROR and "traversal.tar: ../escape.txt: names a path outside the archive root" in err
    code, _out, err = invoke("import", "--platform", "linux", path)
    assert code == 2 and "malformed platform" in err


def _empty_node() -> Any:
    from pinctl.node.sources import Node

    return Node()


class _Terminal:
    """A stream that says it is a terminal, keeping what is written."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise OSError("not a real terminal")


def test_progress_shows_on_a_terminal_and_not_on_a_pipe() -> None:
    import io

    from pinctl.render.imports import import_progress

    terminal = _Terminal()
    with import_progress(terminal) as (progress, finished):  # type: ignore[arg-type]
        progress("/srv/images/a.tar", "reading 8.0 MiB of 1.0 GiB")
        finished(importing.ImportItem("/srv/images/a.tar", "example.test/a:1", "k8s.io", "imported"))
    shown = "".join(terminal.parts)
    assert "/srv/images/a.tar: reading 8.0 MiB of 1.0 GiB" in shown and "import: 1 done" in shown
    pipe = io.StringIO()
    with import_progress(pipe) as (progress, finished):
        progress("/srv/images/a.tar", "reading")
    assert pipe.getvalue() == ""

"""docs/development.md's Layout against a tree: tools/layout.py writes each package's modules: line
and refuses a package missing from the Layout, a path that is gone, and a file named that is not
there. The committed page is held to it by test_generated.py (tools/generate.py --check); here a
planted tree shows each refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import layout

PAGE = f"""# Development

## Layout

{layout.MARK}
```
src/pinctl/cli/     the command line (root.py)
                    modules: gone_module
src/pinctl/         the bottom
src/pinctl/api.py   one module with a line of its own
tools/              generate.py
```

After.
"""


def plant(root: Path, files: tuple[str, ...]) -> Path:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    return root


TREE = ("src/pinctl/__init__.py", "src/pinctl/model.py", "src/pinctl/api.py", "src/pinctl/cli/__init__.py",
        "src/pinctl/cli/root.py", "src/pinctl/cli/ls.py", "tools/generate.py")


def test_the_modules_lines_come_from_the_tree(tmp_path: Path) -> None:
    repo = plant(tmp_path, TREE)
    written = layout.fill(PAGE, repo)
    block = written.split("```")[1]
    assert "gone_module" not in written
    assert block.splitlines()[1:] == [
        "src/pinctl/cli/            the command line (root.py)",
        "                           modules: ls, root",
        "src/pinctl/                the bottom",
        "                           modules: model",
        "src/pinctl/api.py          one module with a line of its own",
        "tools/                     generate.py",
    ]
    assert written.startswith("# Development\n") and written.endswith("```\n\nAfter.\n")
    assert layout.fill(written, repo) == written  # written again, nothing changes
    entries = layout.parse(written)
    layout.check(entries, repo)
    assert [entry.modules for entry in entries] == [
        ["pinctl.cli", "pinctl.cli.ls", "pinctl.cli.root"], ["pinctl", "pinctl.model"], ["pinctl.api"], []]


def test_a_package_missing_a_path_gone_and_a_file_not_there_are_refused(tmp_path: Path) -> None:
    repo = plant(tmp_path, (*TREE, "src/pinctl/node/__init__.py", "src/pinctl/node/sources.py"))
    (repo / "src/pinctl/cli/root.py").unlink()
    (repo / "src/pinctl/api.py").unlink()
    with pytest.raises(ValueError) as refused:
        layout.fill(PAGE, repo)
    assert str(refused.value).splitlines() == [
        "docs/development.md: src/pinctl/node/ is not in the Layout: add a line for it "
        "(`src/pinctl/node/  what it holds`), then run make generate",
        "docs/development.md: the Layout's line for src/pinctl/cli/ names root.py, which is not in src/pinctl/cli/",
        "docs/development.md: the Layout names src/pinctl/api.py, which is gone: remove or change its line",
    ]


def test_a_page_without_the_mark_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no Layout block"):
        layout.fill(PAGE.replace(layout.MARK, ""), plant(tmp_path, TREE))


def test_the_committed_layout_covers_every_module_of_pinctl() -> None:
    from .test_layers import tree

    covered = [module for entry in layout.read_entries() for module in entry.modules]
    assert sorted(covered) == sorted(tree().modules)


def test_a_long_modules_line_wraps_and_is_read_back_as_one(tmp_path: Path) -> None:
    names = [f"module_with_a_long_name_{n:02}" for n in range(12)]
    repo = plant(tmp_path, (*TREE, *(f"src/pinctl/cli/{name}.py" for name in names)))
    written = layout.fill(PAGE, repo)
    listing = [line for line in written.splitlines() if "module_with_a_long_name" in line]
    assert len(listing) > 1 and all(len(line) <= layout.WIDTH for line in listing)
    assert layout.fill(written, repo) == written
    assert [entry.words for entry in layout.parse(written)][0] == ["the command line (root.py)"]

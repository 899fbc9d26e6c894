"""docs/development.md's Layout, checked against the tree and its module lists written from it.

The Layout is a fenced block, one entry a line: a path (a package directory, a module, or a
directory outside src/) at the left, what it holds beside it, in the page's own words. For each
package under src/pinctl the generator adds a "modules:" line listing the package's modules as
they are on disk, and it refuses (naming each) a package on disk that has no entry, an entry whose
path is gone, and a file `name.py` that an entry's words name but that is not in its directory.
So the words stay a person's, while what the words cannot keep true by themselves (which modules
exist) is written from the tree: after adding or removing modules, `make generate`; after adding a
package, a line for it, then `make generate`.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = Path("docs/development.md")
PACKAGE = Path("src/pinctl")
MARK = "<!-- tools/generate.py checks the block below against src/pinctl and writes its modules: lines -->"
MODULES = "modules: "
WIDTH = 118
MIN_COLUMN = 27
# Made by tools/generate.py from the .proto files beside them, which the list names instead.
GENERATED = re.compile(r"_pb2(_grpc)?\.pyi?$")
NAMED_FILE = re.compile(r"(?<![\w/.])([A-Za-z_][\w]*\.py)\b")


@dataclass
class Entry:
    paths: list[str]  # as written: "src/pinctl/cli/", "src/pinctl/kubeapi.py", "completions/, man/"
    words: list[str]  # the description, line by line, without the modules: lines
    modules: list[str] = field(default_factory=list)  # dotted names of the pinctl modules it covers

    @property
    def path(self) -> str:
        return self.paths[0]

    @property
    def module(self) -> str | None:
        """The dotted name of the package or module of src/pinctl this entry is, else None."""
        if not self.path.startswith(f"{PACKAGE}/"):
            return None
        return ".".join(Path(self.path).with_suffix("").relative_to(PACKAGE.parent).parts)


def _block(text: str) -> tuple[int, int]:
    """The lines (start, end) of the fenced block after MARK: its first line and its closing fence."""
    lines = text.split("\n")
    try:
        mark = lines.index(MARK)
    except ValueError:
        raise ValueError(f"no Layout block: put the line\n{MARK}\nright above the Layout's fenced block") from None
    start = mark + 1
    if not lines[start].startswith("```"):
        raise ValueError(f"line {start + 1}: the Layout's fenced block must follow the line {MARK!r}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("```")), None)
    if end is None:
        raise ValueError(f"line {start + 1}: the Layout's fenced block is never closed")
    return start + 1, end


def parse(text: str) -> list[Entry]:
    start, end = _block(text)
    entries: list[Entry] = []
    listing_at = None  # the indent of the modules: line being read, whose wrapped lines go deeper
    for number, line in enumerate(text.split("\n")[start:end], start + 1):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if not indent:
            path, _gap, words = line.partition("  ")
            entries.append(Entry([p.strip() for p in path.split(",")], [words.strip()] if words.strip() else []))
            listing_at = None
        elif not entries:
            raise ValueError(f"{DOC}:{number}: a continuation line before any entry")
        elif line.strip().startswith(MODULES.strip()):
            listing_at = indent
        elif listing_at is None or indent <= listing_at:
            entries[-1].words.append(line.strip())
            listing_at = None
    return entries


def _packages(repo: Path) -> list[Path]:
    """Every directory of src/pinctl that holds Python (or .proto) files, relative to repo."""
    root = repo / PACKAGE
    found = {p.parent for p in root.rglob("*") if p.suffix in (".py", ".proto") and "__pycache__" not in p.parts}
    return sorted(d.relative_to(repo) for d in found)


def _files(repo: Path, directory: Path, written: set[str]) -> list[Path]:
    """A package's modules and .proto files, without __init__ and a module with a line of its own."""
    return [path for path in sorted((repo / directory).iterdir())
            if path.suffix in (".py", ".proto") and path.name != "__init__.py"
            and f"{path.relative_to(repo)}" not in written]


def _listed(repo: Path, directory: Path, written: set[str]) -> list[str]:
    """The names a package's modules: line lists: its modules and .proto files, not the stubs
    made from them."""
    return [path.stem if path.suffix == ".py" else path.name
            for path in _files(repo, directory, written) if not GENERATED.search(path.name)]


def _written(entries: list[Entry]) -> set[str]:
    return {path.rstrip("/") for entry in entries for path in entry.paths}


def check(entries: list[Entry], repo: Path) -> list[str]:
    """What the Layout gets wrong about the tree; fills each entry's modules."""
    problems = []
    written = _written(entries)
    for directory in _packages(repo):
        if f"{directory}" not in written:
            problems.append(f"{DOC}: {directory}/ is not in the Layout: add a line for it "
                            f"(`{directory}/  what it holds`), then run make generate")
    for entry in entries:
        base = Path(entry.path) if entry.path.endswith("/") else Path(entry.path).parent
        for path in entry.paths:
            if not (repo / path).exists():
                problems.append(f"{DOC}: the Layout names {path}, which is gone: remove or change its line")
        for name in NAMED_FILE.findall(" ".join(entry.words)):
            if (repo / base).is_dir() and not (repo / base / name).exists():
                problems.append(f"{DOC}: the Layout's line for {entry.path} names {name}, which is not in {base}/")
        if entry.module and (repo / entry.path).exists():
            if entry.path.endswith(".py"):
                entry.modules = [entry.module]
            else:
                init = [entry.module] if (repo / entry.path / "__init__.py").exists() else []
                entry.modules = init + [f"{entry.module}.{path.stem}" for path in _files(repo, Path(entry.path), written)
                                        if path.suffix == ".py"]
    return problems


def render(entries: list[Entry], repo: Path) -> list[str]:
    column = max(MIN_COLUMN, max(len(", ".join(entry.paths)) for entry in entries) + 2)
    pad = " " * column
    written = _written(entries)
    lines = []
    for entry in entries:
        head = ", ".join(entry.paths).ljust(column)
        words = entry.words or [""]
        lines.append((head + words[0]).rstrip())
        lines.extend(pad + more for more in words[1:])
        if entry.module and entry.path.endswith("/"):
            listed = _listed(repo, Path(entry.path), written)
            if listed:
                lines.extend(textwrap.wrap(MODULES + ", ".join(listed), WIDTH, initial_indent=pad,
                                           subsequent_indent=pad + " " * len(MODULES), break_on_hyphens=False))
    return lines


def fill(text: str, repo: Path = REPO) -> str:
    """text with the Layout's block written again; ValueError naming every problem found."""
    entries = parse(text)
    problems = check(entries, repo)
    if problems:
        raise ValueError("\n".join(problems))
    start, end = _block(text)
    lines = text.split("\n")
    return "\n".join(lines[:start] + render(entries, repo) + lines[end:])


def read_entries(repo: Path = REPO) -> list[Entry]:
    """The Layout's entries as docs/development.md has them, each with the pinctl modules it covers."""
    entries = parse((repo / DOC).read_text(encoding="utf-8"))
    problems = check(entries, repo)
    if problems:
        raise ValueError("\n".join(problems))
    return entries

"""The import graph of src/pinctl: every module in exactly one layer, layers that only point down,
capabilities (and services) that stand side by side, no cycles, and lazy imports only where they
keep a heavy third-party module out of `pinctl --help`.

Every import counts for cycles and layers, also one inside a function and one under
`if TYPE_CHECKING:`: a type named across two modules ties them as much as a call does, and a
circle tied only by types is still one to untie. Only the rules about what loads at run time
(heavy modules, lazy imports) leave TYPE_CHECKING imports out, since those never run.
docs/development.md (its Layout section) describes the same layers, in the same order.

Each check is a function of a module set or an import graph, so the tests at the end can plant
a cycle, a module in no layer, an upward import and a sibling import, and see each check fail.
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "pinctl"

Layers = Sequence[tuple[str, Sequence[str]]]

# Bottom first. A module may import from its own layer or any below it. Each module belongs to
# exactly one layer: a name covers that module and every module below it ("pinctl.config" covers
# pinctl.config.loader), and "=name" that module alone (the package pinctl's own __init__, which
# would otherwise cover everything). A module covered by two names, or by none, is an error, and
# so is a name that covers no module: no rule (such as the longest name winning) decides
# between two names, so where a module lives can always be read off one line.
LAYERS: Layers = (
    ("bottom", ("=pinctl", "pinctl.model", "pinctl.errors", "pinctl.refs", "pinctl.display", "pinctl.streams",
                "pinctl.examples", "pinctl.proto")),
    ("config", ("pinctl.config",)),
    ("backends", ("pinctl.backends", "pinctl.kubeapi")),
    ("pure logic", ("pinctl.pins", "=pinctl.gc", "pinctl.gc.records", "pinctl.gc.model", "pinctl.gc.estimate",
                    "pinctl.gc.eviction", "pinctl.gc.kubelet", "pinctl.gc.refusals", "pinctl.gc.ties",
                    "pinctl.gc.wanted", "pinctl.fleet")),
    ("node", ("pinctl.node", "pinctl.journal")),
    ("shared below capabilities", ("pinctl.landing", "pinctl.service")),
    ("capabilities", CAPABILITIES := ("pinctl.check", "pinctl.gc.plan", "pinctl.pull", "pinctl.imports")),
    ("services", SERVICES := ("pinctl.watch", "pinctl.criproxy")),
    ("commands", ("pinctl.commands",)),
    ("rendering and metrics", ("pinctl.render", "pinctl.metrics", "pinctl.completion")),
    ("cli", ("pinctl.cli", "pinctl.__main__")),
)
# Side by side: within each group no package imports another. What two capabilities (or the two
# services) share goes below them: pinctl.landing (pull and import), pinctl.service (the services).
SIBLING_GROUPS = (CAPABILITIES, SERVICES)
# Imported lazily so that `pinctl --help` never loads them; one module alone imports prometheus_client.
HEAVY = ("grpc", "google.protobuf", "rich", "prometheus_client", "yaml", "docker", "lightkube", "httpx2")
PROMETHEUS_HOME = "pinctl.metrics"
# The edges: the cli, where --help runs, and commands, which dispatches to every capability; each
# loads a layer below only when its command runs, so a command pays for what it uses alone.
EDGES = ("pinctl.cli", "pinctl.commands")


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    lazy: bool  # inside a function
    typing: bool = False  # under `if TYPE_CHECKING:`: read by type checkers, never run


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class Tree:
    """The modules of one package directory (src/pinctl, or a planted copy) and their imports."""

    def __init__(self, package: Path) -> None:
        self.package = package
        self.modules: dict[str, Path] = {self.module_name(path): path for path in sorted(package.rglob("*.py"))}
        self._imports: dict[str, list[Import]] = {}
        self._heavy: dict[str, bool] = {}

    def module_name(self, path: Path) -> str:
        parts = path.relative_to(self.package.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def _imported(self, module: str, node: ast.AST, is_package: bool) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        assert isinstance(node, ast.ImportFrom)
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            parent = ".".join(base + ([node.module] if node.module else []))
        else:
            parent = node.module or ""
        # `from pinctl.pins import plans` imports the module pinctl.pins.plans (and its package).
        return [f"{parent}.{alias.name}" if f"{parent}.{alias.name}" in self.modules else parent
                for alias in node.names]

    def imports_of(self, module: str) -> list[Import]:
        if module in self._imports:
            return self._imports[module]
        path = self.modules[module]
        found: list[Import] = []

        def visit(node: ast.AST, lazy: bool, typing: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child):
                    for inner in child.body:
                        visit_one(inner, lazy, True)
                    for other in child.orelse:
                        visit_one(other, lazy, typing)
                    continue
                visit_one(child, lazy, typing)

        def visit_one(child: ast.AST, lazy: bool, typing: bool) -> None:
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in self._imported(module, child, path.name == "__init__.py"):
                    found.append(Import(module, target, child.lineno, lazy, typing))
                return
            visit(child, lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)), typing)

        visit(ast.parse(path.read_text(), str(path)), False, False)
        self._imports[module] = found
        return found

    def internal(self, target: str) -> str | None:
        """The module of this package an import reaches, or None for the standard library and third parties."""
        while target:
            if target in self.modules:
                return target
            target = target.rpartition(".")[0]
        return None

    def edges(self) -> list[Import]:
        """Every import of one module of the package by another, TYPE_CHECKING ones included, its
        target the module it reaches."""
        return [Import(imp.source, target, imp.line, imp.lazy, imp.typing)
                for module in self.modules for imp in self.imports_of(module)
                if (target := self.internal(imp.target)) and target != module]

    def loads_heavy(self, module: str) -> bool:
        """Whether importing module (its top-level imports, transitively) loads a heavy third party."""
        if module not in self._heavy:
            self._heavy[module] = False  # a cycle below is reported by its own test
            self._heavy[module] = any(self._loads_heavy_at(imp) for imp in self.imports_of(module)
                                      if not imp.lazy and not imp.typing)
        return self._heavy[module]

    def _loads_heavy_at(self, imp: Import) -> bool:
        target = self.internal(imp.target)
        if target is None:
            return any(imp.target == h or imp.target.startswith(h + ".") for h in HEAVY)
        return target != imp.source and self.loads_heavy(target)


@functools.lru_cache(maxsize=None)
def tree() -> Tree:
    return Tree(PACKAGE)


def graph(edges: Iterable[Import]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for edge in edges:
        found.setdefault(edge.source, set()).add(edge.target)
    return found


# -- the checks: each takes what it checks, and returns what is wrong (empty when nothing is) -----


def covers(name: str, module: str) -> bool:
    if name.startswith("="):
        return module == name[1:]
    return module == name or module.startswith(name + ".")


def homes(module: str, layers: Layers) -> list[tuple[int, str]]:
    """Every (layer index, name) of layers that covers module."""
    return [(index, name) for index, (_layer, names) in enumerate(layers) for name in names if covers(name, module)]


def placement_problems(modules: Iterable[str], layers: Layers) -> list[str]:
    """Each module in no layer or covered twice, and each name of layers that covers no module."""
    modules = sorted(modules)
    problems = []
    for module in modules:
        found = homes(module, layers)
        if not found:
            problems.append(f"{module} is in no layer: add it to LAYERS (and docs/development.md's Layout)")
        elif len(found) > 1:
            named = " and ".join(f"{name} ({layers[index][0]})" for index, name in found)
            problems.append(f"{module} is covered by {named}: a module belongs to exactly one layer")
    for layer, names in layers:
        for name in names:
            if not any(covers(name, module) for module in modules):
                problems.append(f"LAYERS names {name} ({layer}), which covers no module: remove it")
    return problems


def layer_of(module: str, layers: Layers = LAYERS) -> int:
    found = homes(module, layers)
    if len(found) != 1:
        raise AssertionError(placement_problems([module], layers)[0])  # the module's own problem comes first
    return found[0][0]


def upward_imports(edges: Iterable[Import], layers: Layers) -> list[str]:
    """Each import of a module in a higher layer than the importer's."""
    return [f"{edge.source}:{edge.line} imports {edge.target}{' (under TYPE_CHECKING)' if edge.typing else ''}: "
            f"{layers[layer_of(edge.target, layers)][0]} is above {layers[layer_of(edge.source, layers)][0]}"
            for edge in edges if layer_of(edge.target, layers) > layer_of(edge.source, layers)]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def strong(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                strong(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(edges):
        if node not in index:
            strong(node)
    return found


def sibling_of(module: str, group: tuple[str, ...]) -> str | None:
    """The member of group that module belongs to (its longest prefix), or None."""
    found = [member for member in group if module == member or module.startswith(member + ".")]
    return max(found, key=len) if found else None


def sibling_imports(edges: dict[str, set[str]], groups: tuple[tuple[str, ...], ...]) -> list[str]:
    """Each edge from one member of a group to another member of the same group."""
    return [f"{source} imports {target} ({theirs} is a sibling of {ours})"
            for source, targets in sorted(edges.items()) for target in sorted(targets) for group in groups
            if (ours := sibling_of(source, group)) and (theirs := sibling_of(target, group)) and ours != theirs]


def needless_lazy_imports(source: Tree, edges_at: tuple[str, ...]) -> list[str]:
    """Below the edges, each import inside a function of a module that loads nothing heavy."""
    return [f"{imp.source}:{imp.line} imports {target} lazily, but it loads no heavy module: import it at the top"
            for module in source.modules if not module.startswith(edges_at) for imp in source.imports_of(module)
            if imp.lazy and not imp.typing and (target := source.internal(imp.target))
            and not source.loads_heavy(target)]


# -- the tree as it is --------------------------------------------------------------------------


def test_every_module_is_in_exactly_one_layer() -> None:
    assert placement_problems(tree().modules, LAYERS) == []


def test_the_import_graph_has_no_cycle_type_checking_imports_included() -> None:
    assert cycles(graph(tree().edges())) == []


def test_the_graph_holds_the_trees_type_checking_imports() -> None:
    """criproxy.health names the Proxy for types alone: the graph has that edge, marked as such."""
    typed = {(edge.source, edge.target) for edge in tree().edges() if edge.typing}
    assert ("pinctl.criproxy.health", "pinctl.criproxy.proxy") in typed


def test_imports_only_point_down() -> None:
    assert upward_imports(tree().edges(), LAYERS) == []


def test_capabilities_and_services_stand_side_by_side() -> None:
    assert sibling_imports(graph(tree().edges()), SIBLING_GROUPS) == []


def test_lazy_imports_only_keep_heavy_modules_out_of_help() -> None:
    """Below the edges, an import inside a function is for a module that would load grpc, rich,
    ... at once; any other belongs at the top of the file, where nothing hides a cycle."""
    assert needless_lazy_imports(tree(), EDGES) == []


def test_prometheus_client_is_imported_by_the_metrics_package_only() -> None:
    outside = [f"{imp.source}:{imp.line}" for module in tree().modules for imp in tree().imports_of(module)
               if imp.target.split(".")[0] == "prometheus_client" and not module.startswith(PROMETHEUS_HOME)]
    assert outside == []


@pytest.mark.parametrize("package", sorted({m for m in tree().modules if tree().modules[m].name == "__init__.py"}))
def test_packages_and_modules_stay_small(package: str) -> None:
    directory = tree().modules[package].parent
    members = [p for p in directory.glob("*.py") if p.name != "__init__.py"]
    if package != "pinctl.proto":  # generated stubs
        assert len(members) <= 12, f"{package} has {len(members)} modules: split it"
        for path in members:
            lines = path.read_text().count("\n")
            assert lines <= 600, f"{path.relative_to(PACKAGE.parent)} has {lines} lines: split it"


def test_the_layout_lists_packages_in_the_order_of_the_layers() -> None:
    """docs/development.md's Layout (tools/layout.py checks it names every package and module on
    disk) lists the packages top first, as LAYERS has them bottom first: a package's place there
    is that of its highest module."""
    from tools import layout

    placed = [(entry, max(layer_of(module) for module in entry.modules))
              for entry in layout.read_entries() if entry.modules]
    wrong = [f"{above.path} ({LAYERS[high][0]}) is listed above {below.path} ({LAYERS[low][0]})"
             for (above, high), (below, low) in zip(placed, placed[1:]) if high < low]
    assert len(placed) > 10 and wrong == []


# -- each check can fail ------------------------------------------------------------------------

PLANTED_LAYERS: Layers = (
    ("bottom", ("=pinctl", "pinctl.base")),
    ("low", ("pinctl.low",)),
    ("side by side", ("pinctl.left", "pinctl.right")),
    ("high", ("pinctl.high",)),
)


def plant(root: Path, files: dict[str, str]) -> Tree:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return Tree(root / "pinctl")


def test_a_planted_cycle_tied_only_by_type_checking_imports_is_found(tmp_path: Path) -> None:
    planted = plant(tmp_path, {
        "pinctl/__init__.py": "",
        "pinctl/low/__init__.py": "",
        "pinctl/low/one.py": "from pinctl.low import two\n",
        "pinctl/low/two.py": ("from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from pinctl.low.one import Thing\n"),
    })
    typed = [edge for edge in planted.edges() if edge.typing]
    assert [(edge.source, edge.target, edge.line) for edge in typed] == [("pinctl.low.two", "pinctl.low.one", 3)]
    assert cycles(graph(planted.edges())) == [["pinctl.low.one", "pinctl.low.two"]]
    assert cycles(graph(edge for edge in planted.edges() if not edge.typing)) == []
    # A type-only import loads nothing at run time.
    assert needless_lazy_imports(planted, ()) == [] and not planted.loads_heavy("pinctl.low.two")


def test_a_planted_module_in_no_layer_or_in_two_is_found(tmp_path: Path) -> None:
    planted = plant(tmp_path, {"pinctl/__init__.py": "", "pinctl/base.py": "", "pinctl/low/__init__.py": "",
                               "pinctl/stray.py": ""})
    assert placement_problems(planted.modules, PLANTED_LAYERS) == [
        "pinctl.stray is in no layer: add it to LAYERS (and docs/development.md's Layout)",
        "LAYERS names pinctl.left (side by side), which covers no module: remove it",
        "LAYERS names pinctl.right (side by side), which covers no module: remove it",
        "LAYERS names pinctl.high (high), which covers no module: remove it",
    ]
    # The root package covers only itself: a prefix "pinctl" would have put pinctl.stray in the bottom.
    assert [name for _index, name in homes("pinctl.stray", PLANTED_LAYERS)] == []
    twice = (*PLANTED_LAYERS, ("top", ("pinctl.low.deep",)))
    assert placement_problems(["pinctl.low.deep.x"], twice)[0] == (
        "pinctl.low.deep.x is covered by pinctl.low (low) and pinctl.low.deep (top): "
        "a module belongs to exactly one layer")
    assert placement_problems(["pinctl.base"], PLANTED_LAYERS)[0].startswith("LAYERS names =pinctl (bottom)")
    with pytest.raises(AssertionError, match="exactly one layer"):
        layer_of("pinctl.low.deep.x", twice)


def test_a_planted_upward_import_and_a_sibling_import_are_found(tmp_path: Path) -> None:
    planted = plant(tmp_path, {
        "pinctl/__init__.py": "",
        "pinctl/base.py": "",
        "pinctl/low/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pinctl.high import Top\n",
        "pinctl/left/__init__.py": "from pinctl import base\n",
        "pinctl/left/run.py": "def go():\n    from pinctl.right import helper\n",
        "pinctl/right/__init__.py": "from pinctl import base\n",
        "pinctl/high/__init__.py": "from pinctl.left import run\n",
    })
    assert placement_problems(planted.modules, PLANTED_LAYERS) == []
    assert upward_imports(planted.edges(), PLANTED_LAYERS) == [
        "pinctl.low:3 imports pinctl.high (under TYPE_CHECKING): high is above low"]
    assert sibling_imports(graph(planted.edges()), (("pinctl.left", "pinctl.right"),)) == [
        "pinctl.left.run imports pinctl.right (pinctl.right is a sibling of pinctl.left)"]
    assert cycles(graph(planted.edges())) == []


def test_the_checks_on_made_up_graphs() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer_of("pinctl.cli.ls") > layer_of("pinctl.commands") > layer_of("pinctl.node.sources")
    assert layer_of("pinctl.gc.model") < layer_of("pinctl.gc.plan")
    assert layer_of("pinctl") == 0 and layer_of("pinctl.criproxy.health") == layer_of("pinctl.watch")
    assert sibling_imports({"pinctl.imports.run": {"pinctl.pull.run", "pinctl.landing.budget"},
                            "pinctl.criproxy.stats": {"pinctl.watch.health", "pinctl.criproxy.proxy"},
                            "pinctl.watch.health": {"pinctl.check.compare"}}, SIBLING_GROUPS) == [
        "pinctl.criproxy.stats imports pinctl.watch.health (pinctl.watch is a sibling of pinctl.criproxy)",
        "pinctl.imports.run imports pinctl.pull.run (pinctl.pull is a sibling of pinctl.imports)",
    ]


def test_no_docker_socket_loads_no_docker_library(tmp_path: Path) -> None:
    # A node without Docker (most): ls asks Docker first, and must not pay for its library.
    code = ("import sys\n"
            "from pinctl.backends.docker import DockerEngine\n"
            "from pinctl.errors import EngineUnreachable\n"
            f"engine = DockerEngine('unix://{tmp_path}/docker.sock')\n"
            "try:\n    engine.image_store()\nexcept EngineUnreachable:\n    pass\n"
            "print(sorted(name for name in ('docker', 'requests') if name in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_node_local_command_never_loads_the_kubernetes_client(tmp_path: Path) -> None:
    """lightkube (and httpx2, msgspec below it) load for fleet status and --node-status alone: not
    for --help, not for ls or config show on a node, not for fleet's own --help."""
    code = ("import sys\n"
            "from pinctl.cli import main\n"
            "for argv in (['--help'], ['fleet', 'status', '--help'], ['config', 'show', '--offline'],"
            " ['sync', '--help'], ['ls', '-a', '/nonexistent/containerd.sock']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print(sorted(n for n in ('lightkube', 'httpx2', 'msgspec') if n in sys.modules), file=sys.stderr)\n")
    env = {**os.environ, "PINCTL_CONFIG": str(tmp_path / "none.toml")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr

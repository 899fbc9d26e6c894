"""The import graph of src/pinctl: layers that only point down, capabilities (and services) that
stand side by side, no cycles, and lazy imports only where they keep a heavy third-party module
out of `pinctl --help`.

Every import counts, also one inside a function; only an `if TYPE_CHECKING:` block is left out,
since it never runs. docs/development.md (its Layout section) describes the same layers.
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "pinctl"

# Bottom first. A module may import from its own layer or any below it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("bottom", ("pinctl", "pinctl.model", "pinctl.errors", "pinctl.refs", "pinctl.display", "pinctl.streams",
                "pinctl.proto")),
    ("config", ("pinctl.config",)),
    ("backends", ("pinctl.backends", "pinctl.kubeapi")),
    ("pure logic", ("pinctl.pins", "pinctl.gc.model", "pinctl.gc.estimate", "pinctl.gc.eviction", "pinctl.gc.kubelet",
                    "pinctl.gc.refusals", "pinctl.fleet")),
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


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    best, found = -1, None
    for index, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    if found is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS (and docs/development.md's Layout)")
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(module: str, node: ast.AST, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        parent = ".".join(base + ([node.module] if node.module else []))
    else:
        parent = node.module or ""
    known = modules()
    # `from pinctl.pins import plans` imports the module pinctl.pins.plans (and its package).
    return [f"{parent}.{alias.name}" if f"{parent}.{alias.name}" in known else parent for alias in node.names]


def imports_of(module: str) -> list[Import]:
    path = modules()[module]
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other, lazy)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _imported(module, child, path.name == "__init__.py"):
                    found.append(Import(module, target, child.lineno, lazy))
                continue
            visit(child, lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def internal(target: str) -> str | None:
    """The pinctl module an import reaches, or None for the standard library and third parties."""
    known = modules()
    while target:
        if target in known:
            return target
        target = target.rpartition(".")[0]
    return None


def graph() -> dict[str, set[str]]:
    return {module: {target for imp in imports_of(module) if (target := internal(imp.target)) and target != module}
            for module in modules()}


@functools.lru_cache(maxsize=None)
def loads_heavy(module: str) -> bool:
    """Whether importing module (its top-level imports, transitively) loads a heavy third party."""
    for imp in imports_of(module):
        if imp.lazy:
            continue
        target = internal(imp.target)
        if target is None and imp.target.split(".")[0] in {h.split(".")[0] for h in HEAVY}:
            if any(imp.target == h or imp.target.startswith(h + ".") for h in HEAVY):
                return True
        if target and target != module and loads_heavy(target):
            return True
    return False


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


def test_every_module_has_a_layer() -> None:
    for module in modules():
        layer_of(module)


def test_the_import_graph_has_no_cycle() -> None:
    assert cycles(graph()) == []


def test_imports_only_point_down() -> None:
    upward = [
        f"{imp.source}:{imp.line} imports {target} ({LAYERS[layer_of(target)][0]} is above "
        f"{LAYERS[layer_of(imp.source)][0]})"
        for module in modules() for imp in imports_of(module)
        if (target := internal(imp.target)) and layer_of(target) > layer_of(imp.source)
    ]
    assert upward == []


def sibling_of(module: str, group: tuple[str, ...]) -> str | None:
    """The member of group that module belongs to (its longest prefix), or None."""
    found = [member for member in group if module == member or module.startswith(member + ".")]
    return max(found, key=len) if found else None


def sibling_imports(edges: dict[str, set[str]], groups: tuple[tuple[str, ...], ...]) -> list[str]:
    """Each edge from one member of a group to another member of the same group."""
    return [f"{source} imports {target} ({theirs} is a sibling of {ours})"
            for source, targets in sorted(edges.items()) for target in sorted(targets) for group in groups
            if (ours := sibling_of(source, group)) and (theirs := sibling_of(target, group)) and ours != theirs]


def test_capabilities_and_services_stand_side_by_side() -> None:
    assert sibling_imports(graph(), SIBLING_GROUPS) == []


def test_lazy_imports_only_keep_heavy_modules_out_of_help() -> None:
    """Below the edges, an import inside a function is for a module that would load grpc, rich,
    ... at once; any other belongs at the top of the file, where nothing hides a cycle."""
    needless = [
        f"{imp.source}:{imp.line} imports {target} lazily, but it loads no heavy module: import it at the top"
        for module in modules() if not module.startswith(EDGES) for imp in imports_of(module)
        if imp.lazy and (target := internal(imp.target)) and not loads_heavy(target)
    ]
    assert needless == []


def test_prometheus_client_is_imported_by_the_metrics_package_only() -> None:
    outside = [f"{imp.source}:{imp.line}" for module in modules() for imp in imports_of(module)
               if imp.target.split(".")[0] == "prometheus_client" and not module.startswith(PROMETHEUS_HOME)]
    assert outside == []


@pytest.mark.parametrize("package", sorted({m for m in modules() if modules()[m].name == "__init__.py"}))
def test_packages_and_modules_stay_small(package: str) -> None:
    directory = modules()[package].parent
    members = [p for p in directory.glob("*.py") if p.name != "__init__.py"]
    if package != "pinctl.proto":  # generated stubs
        assert len(members) <= 12, f"{package} has {len(members)} modules: split it"
        for path in members:
            lines = path.read_text().count("\n")
            assert lines <= 600, f"{path.relative_to(PACKAGE.parent)} has {lines} lines: split it"


def test_the_checker_sees_a_cycle_and_an_upward_import() -> None:
    """The tests above can fail: a made-up graph with a cycle is caught, and so is a made-up upward edge."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer_of("pinctl.cli.ls") > layer_of("pinctl.commands") > layer_of("pinctl.node.sources")
    assert layer_of("pinctl.gc.model") < layer_of("pinctl.gc.plan")
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

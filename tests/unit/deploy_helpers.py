"""What the tests of the deployment artifacts share: the repository's paths, pinctl's real click
tree as the parser of the command lines a deployment runs (the ``parse`` fixture), the checks
that every deployment's command and image name must pass, lookups into the Kubernetes
manifests, and the base rendered with one of its kustomize Components (``with_component``). No
engine, no cluster, no systemd needed."""

from __future__ import annotations

import copy
import dataclasses
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import click
import pytest
import yaml  # PyYAML: part of the test extras

from pinctl.cli import cli
from pinctl.config.settings import KEYS
from pinctl.metrics.serve import parse_address

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
DEFAULT_SOCKET = KEYS["containerd_address"].default


# -- parsing a command line with the real click tree ------------------------------------------


@dataclasses.dataclass
class Parsed:
    """What pinctl's click tree made of an argv: the command path and each context's params."""

    path: list[str]
    contexts: list[click.Context]  # the group's first, the command's last

    @property
    def command(self) -> click.Command:
        return self.contexts[-1].command

    def option(self, flag: str) -> Any:
        """The value of an option by its flag, nearest context first (as pinctl's load_config)."""
        found = False
        for ctx in reversed(self.contexts):
            for param in ctx.command.params:
                if isinstance(param, click.Option) and flag in param.opts + param.secondary_opts:
                    found = True
                    value = ctx.params.get(param.name or "")
                    if value not in (None, ()):
                        return value
        assert found, f"{' '.join(self.path)} has no option {flag}"
        return None


def _commands(command: click.Command) -> Iterator[click.Command]:
    yield command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                yield from _commands(sub)


# Test modules import this by its function name; pytest knows it as "parse" (a test's parameter
# named parse would shadow an import of that name).
@pytest.fixture(name="parse")
def parse_fixture(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], Parsed]:
    """Parse argv (without the program name) fully, with every callback replaced by a recorder.

    A usage error (unknown option or command, bad choice, missing argument) raises
    click.UsageError, which fails the test.
    """
    seen: list[click.Context] = []

    def record(**_: Any) -> int:
        seen.append(click.get_current_context())
        return 0

    for command in _commands(cli):
        monkeypatch.setattr(command, "callback", record)

    def run(argv: list[str]) -> Parsed:
        seen.clear()
        cli.main(args=list(argv), prog_name="pinctl", standalone_mode=False)
        assert seen, f"{argv}: no command ran"
        return Parsed([ctx.info_name or "" for ctx in seen], list(seen))

    return run


def metrics_address(parsed: Parsed) -> tuple[str, int]:
    """Where the watcher serves /metrics, /healthz and /readyz, parsed as pinctl parses it."""
    address = parsed.option("--metrics-address")
    assert address, "no --metrics-address: the deployment exports no metrics and has nothing to probe"
    return parse_address(address)


def check_watch_command(parsed: Parsed) -> None:
    """The long-running mode, logging JSON: what every deployment here must run."""
    assert parsed.path[1:] == ["sync"], f"runs {' '.join(parsed.path)}, not pinctl sync"
    assert parsed.option("--watch") is True, "sync without --watch runs once and exits"
    assert parsed.option("--log-format") == "json", "deployments log JSON"
    assert parsed.option("--dry-run") is False


def has_registry_host(image: str) -> bool:
    """Docker's rule: the first path component names a registry when it has a dot or a colon."""
    first, slash, _ = image.partition("/")
    return bool(slash) and ("." in first or ":" in first or first == "localhost")


# -- the Kubernetes manifests -----------------------------------------------------------------


def manifests() -> dict[str, list[dict[str, Any]]]:
    return {path.name: [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
            for path in sorted(KUBE.glob("*.yaml"))}


def objects() -> list[dict[str, Any]]:
    return [doc for name, docs in manifests().items() if name != "kustomization.yaml" for doc in docs]


def the(kind: str, docs: list[dict[str, Any]]) -> dict[str, Any]:
    found = [doc for doc in docs if doc.get("kind") == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects, wanted one"
    return found[0]


BASE_DAEMONSET = "pinctl"
# The shipped DaemonSets' node label: the base runs where it is absent, each other DaemonSet where it names its runtime.
RUNTIME_LABEL = "pinctl.io/runtime"


def daemonsets(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = [doc for doc in docs if doc.get("kind") == "DaemonSet"]
    assert found, "no DaemonSet"
    return found


def daemonset(name: str, docs: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [doc for doc in daemonsets(docs) if doc["metadata"]["name"] == name]
    return found


def container_of(daemonset: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = daemonset["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "one container"
    return containers[0]


def named_ports(container: dict[str, Any]) -> dict[str, int]:
    return {port["name"]: port["containerPort"] for port in container.get("ports", []) if "name" in port}


# -- kustomize components, rendered without kustomize -------------------------------------------

COMPONENTS = KUBE / "components"
# The node-status component (deploy/kubernetes/components/node-status): its identity, and where
# kubectl describe node finds a Node's Events (the component's README says why).
NODE_STATUS = COMPONENTS / "node-status"
NODE_STATUS_NAMESPACE = "pinctl"
NODE_STATUS_ACCOUNT = "pinctl-node-status"
NODE_STATUS_USER = f"system:serviceaccount:{NODE_STATUS_NAMESPACE}:{NODE_STATUS_ACCOUNT}"
NODE_EVENTS_NAMESPACE = "default"


def kustomization(directory: pathlib.Path) -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load((directory / "kustomization.yaml").read_text())
    return found


def _pointer(path: str) -> list[str]:
    assert path.startswith("/"), f"JSON pointer {path!r}"
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def json_patch_add(doc: dict[str, Any], path: str, value: Any, *, replace: bool = False) -> None:
    """RFC 6902's add, as kustomize applies it: ``-`` appends to a list, a key is set (or
    replaced); a missing parent is an error, as it is for kustomize. With replace, RFC 6902's
    replace: the key must be there already."""
    *parents, last = _pointer(path)
    target: Any = doc
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if replace:
        assert not isinstance(target, list) and last in target, f"replace {path}: nothing there to replace"
        target[last] = copy.deepcopy(value)
    elif isinstance(target, list):
        target.insert(len(target) if last == "-" else int(last), copy.deepcopy(value))
    else:
        target[last] = copy.deepcopy(value)


def _selected(doc: dict[str, Any], target: dict[str, Any]) -> bool:
    keys = {"kind": doc.get("kind"), "name": doc.get("metadata", {}).get("name"),
            "namespace": doc.get("metadata", {}).get("namespace")}
    assert set(target) <= set(keys), f"patch target {target}: only kind, name and namespace are rendered here"
    return all(keys[key] == value for key, value in target.items())


def with_component(base: list[dict[str, Any]], directory: pathlib.Path) -> list[dict[str, Any]]:
    """``base`` with the kustomize Component in ``directory``: its resources added, then each of its
    JSON patches applied to the objects its target selects. The shapes the repository's components
    use, no more (tests/integration/test_node_status_rbac.py compares this with kubectl kustomize)."""
    spec = kustomization(directory)
    assert spec["kind"] == "Component", f"{directory} is not a kustomize Component"
    docs = copy.deepcopy(base)
    for resource in spec.get("resources", []):
        docs += [doc for doc in yaml.safe_load_all((directory / resource).read_text()) if doc]
    for patch in spec.get("patches", []):
        ops = yaml.safe_load((directory / patch["path"]).read_text())
        assert isinstance(ops, list), f"{patch['path']}: only JSON patches (a list of ops) are rendered here"
        for doc in docs:
            if _selected(doc, patch.get("target", {})):
                for op in ops:
                    assert op["op"] in ("add", "replace"), f"{patch['path']}: op {op['op']} is not rendered here"
                    json_patch_add(doc, op["path"], op["value"], replace=op["op"] == "replace")
    return docs

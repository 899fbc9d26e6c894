"""Deployment artifacts against pinctl itself: no engine, no cluster, no systemd needed.

The command lines in the systemd unit, the Containerfile and the DaemonSet are parsed by
pinctl's real click tree; the ConfigMap's config.toml is loaded by pinctl's real config loader;
mounts, volumes and the socket path are checked against each other. Each check is a function
that raises AssertionError, and the mutation tests at the end show that each one can fail.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any, Optional

import click
import pytest
import yaml  # PyYAML: part of the test extras

from pinctl.cli import cli
from pinctl.config import loader as config
from pinctl.config.files import toml_reader
from pinctl.config.settings import DIALECTS, KEYS
from pinctl.errors import PinctlError
from pinctl.metrics import exposition as metrics
from pinctl.metrics.serve import parse_address
from pinctl.pins import lint
from pinctl.pins.policy import compile_policy
from tests.harness.image_build import build_inputs, ignore_matcher

ROOT = pathlib.Path(__file__).resolve().parents[2]
UNIT = ROOT / "contrib" / "systemd" / "pinctl-sync.service"
CONTAINERFILE = ROOT / "Containerfile"
IGNORE_FILE = ROOT / ".dockerignore"
KUBE = ROOT / "deploy" / "kubernetes"
DEFAULT_SOCKET = KEYS["containerd_address"].default
CONFIG_MAP = "pinctl-config"
METRICS_PORT = "metrics"
CONFIG_KEY = "config.toml"
PROXY_UNIT = ROOT / "contrib" / "systemd" / "pinctl-cri-proxy.service"
OWN_FILES = [UNIT, PROXY_UNIT, UNIT.parent / "README.md", CONTAINERFILE, IGNORE_FILE, *sorted(KUBE.glob("*"))]


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
        for sub in command.commands.values():
            yield from _commands(sub)


@pytest.fixture
def parse(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], Parsed]:
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


LOOPBACK = ("127.0.0.1", "::1", "localhost")


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


# -- systemd ------------------------------------------------------------------------------


def read_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """A unit file as {section: {key: [values in order]}}; keys may repeat, as systemd allows."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: Optional[dict[str, list[str]]] = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{line!r} is outside any section"
        assert "=" in line, f"not a key=value line: {line!r}"
        key, value = line.split("=", 1)
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def exec_argv(value: str) -> list[str]:
    """ExecStart's argv without systemd's prefixes (-, @, :, +, !)."""
    argv = shlex.split(value)
    argv[0] = argv[0].lstrip("-@:+!")
    return argv


def unit_paths(values: list[str]) -> list[str]:
    """Paths of ReadWritePaths= and friends: space-separated, "-" marks an optional one."""
    return [path.lstrip("-+") for value in values for path in value.split()]


def seconds(value: str) -> float:
    found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|sec|min)?", value)
    assert found, f"cannot read {value!r} as a time span"
    return float(found.group(1)) * {"ms": 0.001, "min": 60.0}.get(found.group(2) or "s", 1.0)


# Directive -> the value it must have. Each of these is part of the unit's hardening.
HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "ProtectClock": "yes",
    "ProtectHostname": "yes",
    "RestrictNamespaces": "yes",
    "RestrictRealtime": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "MemoryDenyWriteExecute": "yes",
    "SystemCallArchitectures": "native",
    "SystemCallFilter": "@system-service",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    "IPAddressDeny": "any",
    "IPAddressAllow": "localhost",
    "CapabilityBoundingSet": "",
}


def check_unit(unit: dict[str, dict[str, list[str]]], parse: Callable[[list[str]], Parsed]) -> None:
    service = unit.get("Service", {})

    def get(key: str) -> Optional[str]:
        return service.get(key, [None])[-1]  # the last assignment wins

    for key, wanted in HARDENING.items():
        assert key in service, f"{key}= is missing"
        assert service[key] == [wanted], f"{key}= is {service[key]}, wanted {wanted!r}"
    # uid 0 is what makes the root-owned socket and config reachable without capabilities.
    for key in ("User", "DynamicUser", "PrivateUsers", "AmbientCapabilities"):
        assert get(key) in (None, "", "no", "root", "0"), f"{key}={get(key)}: pinctl must run as uid 0"

    (start,) = service.get("ExecStart", [None])
    assert start, "no ExecStart="
    argv = exec_argv(start)
    assert argv[0] == "/usr/local/bin/pinctl", f"ExecStart runs {argv[0]}"
    parsed = parse(argv[1:])
    check_watch_command(parsed)
    host, _port = metrics_address(parsed)
    assert host in LOOPBACK, f"--metrics-address {host}: the unit serves metrics on loopback only"
    assert get("PrivateNetwork") in (None, "no"), "PrivateNetwork= hides the metrics port in a loopback of its own"
    socket = parsed.option("--address") or DEFAULT_SOCKET
    writable = unit_paths(service.get("ReadWritePaths", []))
    assert socket in writable, f"{socket} is not in ReadWritePaths={writable}"
    assert "/run" in unit_paths(service.get("ReadOnlyPaths", [])), (
        "ReadOnlyPaths=/run is missing: MountAPIVFS= (implied) leaves /run writable otherwise"
    )

    assert get("Type") in ("simple", "exec"), f"Type={get('Type')}: pinctl does not speak sd_notify"
    assert get("Restart") == "on-failure"
    assert seconds(get("RestartSec") or "0") >= 1, "RestartSec= must pace restarts"
    assert get("ExecReload") == "/bin/kill -HUP $MAINPID", "reload is SIGHUP"
    assert get("KillSignal") in (None, "SIGTERM", "TERM")
    assert 2 < seconds(get("TimeoutStopSec") or "90") <= 10, "pinctl stops within 2 s of SIGTERM"
    unit_section = unit.get("Unit", {})
    for key in ("After", "Wants"):
        names = " ".join(unit_section.get(key, [])).split()
        assert "containerd.service" in names, f"{key}= lacks containerd.service"
    assert "multi-user.target" in " ".join(unit.get("Install", {}).get("WantedBy", [])).split()


def test_unit(parse: Callable[[list[str]], Parsed]) -> None:
    check_unit(read_unit(UNIT.read_text()), parse)


def _analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd); the other unit checks ran")
    return tool


def _verifiable_copy(tmp_path: pathlib.Path, unit: pathlib.Path = UNIT) -> pathlib.Path:
    """The unit, with ExecStart pointing at an executable that exists here (verify checks it)."""
    text = unit.read_text().replace("ExecStart=/usr/local/bin/pinctl", f"ExecStart={sys.executable}")
    path = tmp_path / unit.name
    path.write_text(text)
    return path


def test_unit_systemd_analyze_verify(tmp_path: pathlib.Path) -> None:
    """systemd's own parser: it exits 0 on unknown keys and bad values, so any remark fails."""
    tool = _analyze()
    path = _verifiable_copy(tmp_path)
    env = {**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": ""}
    proc = subprocess.run([tool, "verify", "--man=no", str(path)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=60, check=False)
    remarks = [line for line in (proc.stdout + proc.stderr).splitlines() if UNIT.name in line]
    assert proc.returncode == 0 and not remarks, proc.stdout + proc.stderr


def test_unit_systemd_analyze_security(tmp_path: pathlib.Path) -> None:
    """systemd's exposure score for the unit, offline (systemd 250+)."""
    tool = _analyze()
    path = _verifiable_copy(tmp_path)
    proc = subprocess.run([tool, "security", "--offline=yes", "--no-pager", str(path)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60, check=False)
    found = re.search(r"Overall exposure level for \S+: ([\d.]+)", proc.stdout)
    if found is None and "offline" in proc.stderr:
        pytest.skip(f"this systemd-analyze has no security --offline: {proc.stderr.strip()}")
    assert found, proc.stdout + proc.stderr
    assert float(found.group(1)) <= 2.0, proc.stdout


# The proxy's hardening: the sync unit's, IP on loopback only included (its metrics port).
PROXY_HARDENING = HARDENING
PROXY_METRICS_PORT = 9737  # beside the sync unit's 9736: both may run on one node


def check_proxy_unit(unit: dict[str, dict[str, list[str]]], parse: Callable[[list[str]], Parsed]) -> None:
    service = unit.get("Service", {})

    def get(key: str) -> Optional[str]:
        return service.get(key, [None])[-1]

    for key, wanted in PROXY_HARDENING.items():
        assert service.get(key) == [wanted], f"{key}= is {service.get(key)}, wanted {wanted!r}"
    assert get("PrivateNetwork") in (None, "no"), "PrivateNetwork= hides the metrics port in a loopback of its own"
    for key in ("User", "DynamicUser", "PrivateUsers", "AmbientCapabilities"):
        assert get(key) in (None, "", "no", "root", "0"), f"{key}={get(key)}: pinctl must run as uid 0"
    (start,) = service.get("ExecStart", [None])
    assert start, "no ExecStart="
    argv = exec_argv(start)
    assert argv[0] == "/usr/local/bin/pinctl", f"ExecStart runs {argv[0]}"
    parsed = parse(argv[1:])
    assert parsed.path[1:] == ["cri-proxy"], f"runs {' '.join(parsed.path)}, not pinctl cri-proxy"
    assert parsed.option("--log-format") == "json"
    listen = parsed.option("--listen")
    upstream = parsed.option("--runtime-endpoint")
    assert listen and upstream, "cri-proxy needs --listen and --runtime-endpoint"
    assert metrics_address(parsed) in [(host, PROXY_METRICS_PORT) for host in LOOPBACK], (
        f"--metrics-address {parsed.option('--metrics-address')}: the proxy serves metrics on loopback port "
        f"{PROXY_METRICS_PORT}")
    writable = unit_paths(service.get("ReadWritePaths", []))
    assert os.path.dirname(listen) in writable, f"the proxy cannot create {listen}: not in ReadWritePaths={writable}"
    runtime_dirs = ["/run/" + d for d in " ".join(service.get("RuntimeDirectory", [])).split()]
    assert os.path.dirname(listen) in runtime_dirs, "the socket's directory is not made by RuntimeDirectory="
    assert upstream.removeprefix("unix://") in writable, f"{upstream} is not in ReadWritePaths={writable}"
    assert "/run" in unit_paths(service.get("ReadOnlyPaths", [])), "ReadOnlyPaths=/run is missing"
    assert get("Type") in ("simple", "exec")
    assert get("Restart") in ("on-failure", "always")
    assert 0 < seconds(get("RestartSec") or "0") <= 2, "the kubelet waits for the proxy: restart fast"
    assert get("RestartPreventExitStatus") == "2", "a usage error does not heal by restarting"
    assert get("ExecReload") == "/bin/kill -HUP $MAINPID", "reload is SIGHUP"
    assert 2 < seconds(get("TimeoutStopSec") or "90") <= 10, "the proxy stops within 2 s of SIGTERM"
    unit_section = unit.get("Unit", {})
    assert "kubelet.service" in " ".join(unit_section.get("Before", [])).split(), "not ordered before the kubelet"
    assert "containerd.service" in " ".join(unit_section.get("After", [])).split()
    assert "multi-user.target" in " ".join(unit.get("Install", {}).get("WantedBy", [])).split()


def test_proxy_unit(parse: Callable[[list[str]], Parsed]) -> None:
    check_proxy_unit(read_unit(PROXY_UNIT.read_text()), parse)


def test_proxy_unit_systemd_analyze_verify(tmp_path: pathlib.Path) -> None:
    tool = _analyze()
    path = _verifiable_copy(tmp_path, PROXY_UNIT)
    env = {**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": ""}
    proc = subprocess.run([tool, "verify", "--man=no", str(path)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=60, check=False)
    remarks = [line for line in (proc.stdout + proc.stderr).splitlines() if PROXY_UNIT.name in line]
    assert proc.returncode == 0 and not remarks, proc.stdout + proc.stderr


def test_proxy_unit_systemd_analyze_security(tmp_path: pathlib.Path) -> None:
    tool = _analyze()
    path = _verifiable_copy(tmp_path, PROXY_UNIT)
    proc = subprocess.run([tool, "security", "--offline=yes", "--no-pager", str(path)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60, check=False)
    found = re.search(r"Overall exposure level for \S+: ([\d.]+)", proc.stdout)
    if found is None and "offline" in proc.stderr:
        pytest.skip(f"this systemd-analyze has no security --offline: {proc.stderr.strip()}")
    assert found, proc.stdout + proc.stderr
    assert float(found.group(1)) <= 2.0, proc.stdout


@pytest.mark.parametrize("edit", [
    ("Before=kubelet.service\n", ""),
    ("RuntimeDirectory=pinctl\n", ""),
    ("ReadWritePaths=/run/pinctl ", "ReadWritePaths="),
    ("-/run/containerd/containerd.sock", "-/run/k3s/containerd/containerd.sock"),
    ("IPAddressAllow=localhost\n", "IPAddressAllow=localhost\nPrivateNetwork=yes\n"),
    ("RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "RestrictAddressFamilies=AF_UNIX"),
    ("MemoryDenyWriteExecute=yes\n", ""),
    ("cri-proxy --listen", "cri-proxy --lisen"),
    ("RestartSec=1s", "RestartSec=30s"),
    ("IPAddressAllow=localhost\n", "IPAddressAllow=any\n"),
    ("--metrics-address 127.0.0.1:9737", "--metrics-address 0.0.0.0:9737"),
    (" --metrics-address 127.0.0.1:9737", ""),
    ("--metrics-address 127.0.0.1:9737", "--metrics-address 127.0.0.1:9736"),
], ids=["no-before-kubelet", "no-runtime-dir", "socket-dir-ro", "upstream-ro", "private-network", "no-inet", "mdwe",
        "typo", "slow-restart", "ip-allow-any", "metrics-everywhere", "no-metrics", "sync-port"])
def test_proxy_unit_check_fails(edit: tuple[str, str], parse: Callable[[list[str]], Parsed]) -> None:
    text = PROXY_UNIT.read_text()
    assert edit[0] in text
    with pytest.raises((AssertionError, click.UsageError)):
        check_proxy_unit(read_unit(text.replace(*edit)), parse)


# -- Containerfile ------------------------------------------------------------------------


def read_containerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        line, pending = pending + stripped, ""
        if line:
            word, _, rest = line.partition(" ")
            instructions.append((word.upper(), rest.strip()))
    assert not pending, "the file ends in a continuation"
    return instructions


def exec_form(value: str) -> list[str]:
    import json

    parsed = json.loads(value)
    assert isinstance(parsed, list) and all(isinstance(x, str) for x in parsed), f"not exec form: {value}"
    return parsed


def has_registry_host(image: str) -> bool:
    """Docker's rule: the first path component names a registry when it has a dot or a colon."""
    first, slash, _ = image.partition("/")
    return bool(slash) and ("." in first or ":" in first or first == "localhost")


def check_containerfile(instructions: list[tuple[str, str]], parse: Callable[[list[str]], Parsed]) -> None:
    args = dict(value.split("=", 1) for word, value in instructions if word == "ARG" and "=" in value)
    base = args.get("BASE_IMAGE")
    assert base, "ARG BASE_IMAGE=<image> with a default is missing"
    assert not has_registry_host(base) and not re.search(r"[\w-]+\.[\w.-]+/", base), (
        f"the default base {base!r} names a registry host"
    )
    stages: list[str] = []
    for word, value in instructions:
        if word == "FROM":
            image, *alias = value.split()
            assert image in ("${BASE_IMAGE}", "$BASE_IMAGE") or image in stages, f"FROM {image}: not BASE_IMAGE"
            stages += [alias[-1]] if len(alias) == 2 and alias[0].upper() == "AS" else []
    assert len([w for w, _ in instructions if w == "FROM"]) >= 2, "build in one stage, run from a clean one"
    final = instructions[max(i for i, (w, _) in enumerate(instructions) if w == "FROM"):]
    users = [value for word, value in final if word == "USER"]
    assert not users or users[-1] in ("0", "0:0", "root", "root:root"), f"USER {users[-1]}: must be root"
    assert not any(word == "RUN" and re.search(r"\b(gcc|build-essential)\b", value) for word, value in final)
    entrypoint = [exec_form(value) for word, value in final if word == "ENTRYPOINT"]
    cmd = [exec_form(value) for word, value in final if word == "CMD"]
    assert entrypoint and entrypoint[-1] == ["pinctl"], f"ENTRYPOINT is {entrypoint}"
    assert cmd, "no CMD"
    check_watch_command(parse(cmd[-1]))


def test_containerfile(parse: Callable[[list[str]], Parsed]) -> None:
    check_containerfile(read_containerfile(CONTAINERFILE.read_text()), parse)


def check_ignore(excluded: Callable[[str], bool], inputs: list[str]) -> None:
    left_out = [path for path in inputs if excluded(path)]
    assert not left_out, f".dockerignore leaves out build inputs: {left_out[:5]}"
    for heavy in (".git/HEAD", ".venv/bin/python", "src/pinctl/__pycache__/cli.cpython-311.pyc"):
        assert excluded(heavy), f".dockerignore lets {heavy} into the build context"


def test_dockerignore() -> None:
    check_ignore(ignore_matcher(IGNORE_FILE.read_text()), build_inputs())


# -- Kubernetes ---------------------------------------------------------------------------


def manifests() -> dict[str, list[dict[str, Any]]]:
    return {path.name: [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
            for path in sorted(KUBE.glob("*.yaml"))}


def objects() -> list[dict[str, Any]]:
    return [doc for name, docs in manifests().items() if name != "kustomization.yaml" for doc in docs]


def the(kind: str, docs: list[dict[str, Any]]) -> dict[str, Any]:
    found = [doc for doc in docs if doc.get("kind") == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects, wanted one"
    return found[0]


def container_of(daemonset: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = daemonset["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "one container"
    return containers[0]


def config_text(configmap: dict[str, Any]) -> str:
    assert configmap["metadata"]["name"] == CONFIG_MAP
    text: str = configmap["data"][CONFIG_KEY]
    return text


def check_pod(docs: list[dict[str, Any]], parse: Callable[[list[str]], Parsed]) -> None:
    daemonset = the("DaemonSet", docs)
    pod = daemonset["spec"]["template"]["spec"]
    container = container_of(daemonset)
    argv = [*container.get("command", []), *container.get("args", [])]
    assert argv[:1] == ["pinctl"], f"the container runs {argv[:1]}"
    parsed = parse(argv[1:])
    check_watch_command(parsed)

    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    mounts = {mount["mountPath"]: mount for mount in container.get("volumeMounts", [])}
    for mount in mounts.values():
        assert mount["name"] in volumes, f"volumeMount {mount['name']} has no volume"
    used = {mount["name"] for mount in mounts.values()}
    assert not set(volumes) - used, f"volumes mounted nowhere: {sorted(set(volumes) - used)}"

    # The socket's directory is mounted, so that a restarted containerd's new socket shows.
    socket = str(parsed.option("--address") or DEFAULT_SOCKET)
    run = os.path.dirname(socket)
    assert run in mounts, f"pinctl talks to {socket}, but its directory {run} is not mounted"
    host = volumes[mounts[run]["name"]].get("hostPath")
    assert host and host.get("type") == "Directory", f"{run} is not a hostPath of type Directory"
    assert host["path"] == run, f"hostPath {host['path']} is mounted at {run}"
    assert mounts[run].get("readOnly") is True, f"{run} is mounted writable"
    assert mounts[run].get("mountPropagation") == "HostToContainer", (
        f"{run} without HostToContainer holds on to the mounts of containers the node has removed")

    config_path = parsed.option("--config")
    assert config_path, "the container gives no --config"
    directory, name = os.path.split(config_path)
    assert directory in mounts, f"--config {config_path}: nothing is mounted at {directory}"
    source = volumes[mounts[directory]["name"]].get("configMap")
    assert source and source["name"] == CONFIG_MAP, f"{directory} is not the ConfigMap {CONFIG_MAP}"
    files = {item["path"]: item["key"] for item in source.get("items", [])} or {CONFIG_KEY: CONFIG_KEY}
    assert files.get(name) == CONFIG_KEY, f"--config {config_path} is not the ConfigMap's {CONFIG_KEY}"
    assert mounts[directory].get("readOnly") is True
    assert source.get("defaultMode", 0o644) & 0o022 == 0, "pinctl as root refuses a group/other-writable config"
    config_text(the("ConfigMap", docs))

    assert pod.get("automountServiceAccountToken") is False, "pinctl needs no API access: no token"
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(key), f"{key} is not needed"
    security = container.get("securityContext", {})
    assert security.get("readOnlyRootFilesystem") is True
    assert security.get("allowPrivilegeEscalation") is False
    assert not security.get("privileged")
    assert security.get("capabilities", {}).get("drop") == ["ALL"]
    assert not security.get("capabilities", {}).get("add")
    uid = security.get("runAsUser", pod.get("securityContext", {}).get("runAsUser"))
    assert uid == 0, f"runAsUser {uid}: the socket is root's (0660), so pinctl runs as uid 0"
    assert any(t.get("operator") == "Exists" and not t.get("key") for t in pod.get("tolerations", [])), (
        "a toleration with operator Exists and no key is needed to run on every node"
    )
    resources = container.get("resources", {})
    for part in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources.get(part, {})), f"resources.{part} needs cpu and memory"
    image = container["image"]
    assert not has_registry_host(image), f"image {image} names a registry: leave it to the operator"
    assert ":" in image and not image.endswith(":latest"), f"image {image} needs a version tag"
    check_probes(container, metrics_address(parsed))


def named_ports(container: dict[str, Any]) -> dict[str, int]:
    return {port["name"]: port["containerPort"] for port in container.get("ports", []) if "name" in port}


def check_probes(container: dict[str, Any], address: tuple[str, int]) -> None:
    """The metrics port is named, served on the pod's address, and probed on /healthz and /readyz."""
    host, port = address
    assert host in ("", "0.0.0.0", "::"), f"--metrics-address {host}: the kubelet and Prometheus reach the pod's IP"
    ports = named_ports(container)
    assert ports.get(METRICS_PORT) == port, f"no containerPort {port} named {METRICS_PORT!r}: {ports}"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container.get(probe, {}).get("httpGet", {})
        assert get.get("path") == path, f"{probe} does not GET {path}"
        assert ports.get(get.get("port"), get.get("port")) == port, f"{probe} is not on the metrics port"


def test_daemonset(parse: Callable[[list[str]], Parsed]) -> None:
    check_pod(objects(), parse)


def test_daemonset_image_tells_the_operator_to_push_it() -> None:
    lines = (KUBE / "daemonset.yaml").read_text().splitlines()
    (at,) = [n for n, line in enumerate(lines) if line.strip().startswith("image:")]
    near = " ".join(lines[max(0, at - 3): at + 1]).lower()
    assert "#" in near and "registry" in near, "say beside the image where to push it"


def check_config(text: str, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    path.chmod(0o644)  # as root, config.load refuses a file others can write
    keys = set(toml_reader().loads(text))
    assert keys <= set(KEYS), f"unknown keys: {sorted(keys - set(KEYS))}"
    cfg = config.load(flags={}, environ={}, config_path=str(path))
    assert cfg.files == [str(path)]
    assert cfg.settings.namespaces == ("k8s.io",), "the kubelet's images are in k8s.io"
    assert cfg.settings.pattern_dialect in DIALECTS
    assert cfg.patterns, "a policy with no patterns pins nothing"
    assert compile_policy(cfg.patterns)
    problems = lint.lint(cfg.patterns, None)
    assert not problems, [p.message for p in problems]


def test_configmap_config(tmp_path: pathlib.Path) -> None:
    check_config(config_text(the("ConfigMap", objects())), tmp_path)


def check_namespaces(docs: list[dict[str, Any]]) -> None:
    namespace = the("Namespace", docs)["metadata"]
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == namespace["name"], f"{doc['kind']} is not in {namespace['name']}"
    # The pod mounts a hostPath, which Pod Security's baseline and restricted levels refuse.
    assert namespace.get("labels", {}).get("pod-security.kubernetes.io/enforce") == "privileged"


def test_namespaces() -> None:
    check_namespaces(objects())


def test_kustomization_lists_every_manifest() -> None:
    found = manifests()
    (kustomization,) = found.pop("kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(found)


# -- each check can fail --------------------------------------------------------------------


def test_parse_rejects_what_pinctl_rejects(parse: Callable[[list[str]], Parsed]) -> None:
    for argv in (["sync", "--watch", "--no-such-option"], ["sync", "--log-format", "xml"], ["no-such-command"]):
        with pytest.raises(click.UsageError):
            parse(argv)
    with pytest.raises(AssertionError):
        check_watch_command(parse(["sync", "--log-format", "json"]))
    with pytest.raises(AssertionError):
        check_watch_command(parse(["ls"]))


def _unit_without(key: str) -> str:
    return "\n".join(line for line in UNIT.read_text().splitlines() if not line.startswith(f"{key}="))


@pytest.mark.parametrize("broken", [
    _unit_without("MemoryDenyWriteExecute"),
    _unit_without("ReadWritePaths"),
    _unit_without("ReadOnlyPaths"),
    _unit_without("ExecReload"),
    UNIT.read_text().replace("CapabilityBoundingSet=\n", "CapabilityBoundingSet=CAP_DAC_OVERRIDE\n"),
    UNIT.read_text().replace("--log-format json", "--log-format text"),
    UNIT.read_text().replace("sync --watch", "sync --wacth"),
    UNIT.read_text().replace("--log-format json", "--log-format json --address /run/k3s/containerd/containerd.sock"),
    UNIT.read_text().replace("[Service]\n", "[Service]\nUser=pinctl\n"),
    UNIT.read_text().replace("TimeoutStopSec=5", "TimeoutStopSec=1"),
    UNIT.read_text().replace("--metrics-address 127.0.0.1:9736", "--metrics-address 0.0.0.0:9736"),
    UNIT.read_text().replace(" --metrics-address 127.0.0.1:9736", ""),
    UNIT.read_text().replace("IPAddressAllow=localhost\n", "IPAddressAllow=any\n"),
    UNIT.read_text().replace("[Install]", "PrivateNetwork=yes\n\n[Install]"),
], ids=["mdwe", "rw-socket", "ro-run", "reload", "caps", "text-log", "typo", "other-socket", "user", "stop",
        "metrics-everywhere", "no-metrics", "ip-allow-any", "private-network"])
def test_unit_check_fails(broken: str, parse: Callable[[list[str]], Parsed]) -> None:
    with pytest.raises((AssertionError, click.UsageError)):
        check_unit(read_unit(broken), parse)


@pytest.mark.parametrize("edit", [
    ("ARG BASE_IMAGE=python:3.12-slim", "ARG BASE_IMAGE=mirror.example/python:3.12-slim"),
    ('CMD ["sync", "--watch", "--log-format", "json"]', 'CMD ["sync", "--watch", "--log-format", "jsonl"]'),
    ('CMD ["sync", "--watch", "--log-format", "json"]', 'CMD ["sync", "--log-format", "json"]'),
    ('ENTRYPOINT ["pinctl"]', 'ENTRYPOINT ["pinctl", "sync"]'),
    ("USER 0:0", "USER 65534"),
], ids=["base-host", "bad-choice", "no-watch", "entrypoint", "user"])
def test_containerfile_check_fails(edit: tuple[str, str], parse: Callable[[list[str]], Parsed]) -> None:
    text = CONTAINERFILE.read_text()
    assert edit[0] in text
    with pytest.raises((AssertionError, click.UsageError)):
        check_containerfile(read_containerfile(text.replace(*edit)), parse)


@pytest.mark.parametrize("extra", ["src", "README.md", "**/*.py", "*.toml", "completions"])
def test_dockerignore_check_fails(extra: str) -> None:
    excluded = ignore_matcher(IGNORE_FILE.read_text() + f"\n{extra}\n")
    inputs = build_inputs()
    if extra == "completions" and not any(path.startswith("completions/") for path in inputs):
        pytest.skip("pyproject.toml installs no completions")
    with pytest.raises(AssertionError):
        check_ignore(excluded, inputs)


def test_dockerignore_check_fails_when_the_repository_goes_in() -> None:
    with pytest.raises(AssertionError):
        check_ignore(ignore_matcher("tests\n"), build_inputs())


def _edited(edit: Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], None]) -> list[dict[str, Any]]:
    docs = copy.deepcopy(objects())
    daemonset = the("DaemonSet", docs)
    edit(daemonset["spec"]["template"]["spec"], container_of(daemonset), the("ConfigMap", docs))
    return docs


POD_EDITS: dict[str, Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], None]] = {
    "bad-option": lambda pod, c, cm: c["args"].append("--wacth"),
    "no-watch": lambda pod, c, cm: c["args"].remove("--watch"),
    "text-log": lambda pod, c, cm: c.__setitem__("args", [a if a != "json" else "text" for a in c["args"]]),
    "address-not-mounted": lambda pod, c, cm: c["args"].extend(["--address", "/run/k3s/containerd/containerd.sock"]),
    "mount-without-volume": lambda pod, c, cm: c["volumeMounts"].append({"name": "gone", "mountPath": "/x"}),
    "unused-volume": lambda pod, c, cm: pod["volumes"].append({"name": "spare", "emptyDir": {}}),
    "host-path-moved": lambda pod, c, cm: next(v for v in pod["volumes"] if "hostPath" in v)["hostPath"]
    .__setitem__("path", "/run/k3s/containerd"),
    "socket-file": lambda pod, c, cm: next(v for v in pod["volumes"] if "hostPath" in v)["hostPath"]
    .__setitem__("type", "Socket"),
    "socket-directory-writable": lambda pod, c, cm: c["volumeMounts"][0].__setitem__("readOnly", False),
    "socket-directory-private": lambda pod, c, cm: c["volumeMounts"][0].pop("mountPropagation"),
    "config-elsewhere": lambda pod, c, cm: c.__setitem__(
        "args", [a.replace("/etc/pinctl/", "/etc/other/") for a in c["args"]]),
    "config-misnamed": lambda pod, c, cm: c.__setitem__(
        "args", [a.replace("config.toml", "pinctl.toml") for a in c["args"]]),
    "writable-config": lambda pod, c, cm: next(v for v in pod["volumes"] if "configMap" in v)["configMap"]
    .__setitem__("defaultMode", 0o666),
    "token": lambda pod, c, cm: pod.__setitem__("automountServiceAccountToken", True),
    "writable-root": lambda pod, c, cm: c["securityContext"].__setitem__("readOnlyRootFilesystem", False),
    "escalation": lambda pod, c, cm: c["securityContext"].__setitem__("allowPrivilegeEscalation", True),
    "capability": lambda pod, c, cm: c["securityContext"]["capabilities"].__setitem__("add", ["DAC_OVERRIDE"]),
    "non-root": lambda pod, c, cm: c["securityContext"].__setitem__("runAsUser", 65534),
    "tolerations": lambda pod, c, cm: pod.__setitem__("tolerations", [{"key": "x", "operator": "Exists"}]),
    "no-limits": lambda pod, c, cm: c["resources"].pop("limits"),
    "registry-image": lambda pod, c, cm: c.__setitem__("image", "registry.example/pinctl:0.1.0"),
    "metrics-on-loopback": lambda pod, c, cm: c.__setitem__(
        "args", [a.replace("0.0.0.0:", "127.0.0.1:") for a in c["args"]]),
    "metrics-port-renamed": lambda pod, c, cm: c["ports"][0].__setitem__("name", "http"),
    "metrics-port-moved": lambda pod, c, cm: c["ports"][0].__setitem__("containerPort", 9100),
    "no-liveness": lambda pod, c, cm: c.pop("livenessProbe"),
    "readiness-on-healthz": lambda pod, c, cm: c["readinessProbe"]["httpGet"].__setitem__("path", "/healthz"),
    "configmap-renamed": lambda pod, c, cm: cm["metadata"].__setitem__("name", "other"),
}


@pytest.mark.parametrize("name", sorted(POD_EDITS))
def test_daemonset_check_fails(name: str, parse: Callable[[list[str]], Parsed]) -> None:
    with pytest.raises((AssertionError, click.UsageError)):
        check_pod(_edited(POD_EDITS[name]), parse)


@pytest.mark.parametrize("text", [
    'pinned_images = ["registry.example/a/*"]\nnamespaces = ["k8s.io"]\nunknown_key = 1\n',
    'pinned_images = ["registry.example/a/*"]\nnamespaces = ["moby"]\n',
    'pinned_images = []\nnamespaces = ["k8s.io"]\n',
    'pinned_images = ["*"]\nnamespaces = ["k8s.io"]\n',
    'pinned_images = ["registry.example/a/*", "registry.example/a/b:1"]\nnamespaces = ["k8s.io"]\n',
    'pinned_images = "registry.example/a/*"\nnamespaces = ["k8s.io"]\n',
], ids=["unknown-key", "namespace", "empty", "invalid-pattern", "shadowed", "wrong-type"])
def test_config_check_fails(text: str, tmp_path: pathlib.Path) -> None:
    with pytest.raises((AssertionError, PinctlError)):
        check_config(text, tmp_path)


def test_namespace_check_fails() -> None:
    docs = copy.deepcopy(objects())
    the("ConfigMap", docs)["metadata"]["namespace"] = "kube-system"
    with pytest.raises(AssertionError):
        check_namespaces(docs)


# -- monitoring: PodMonitor and alert rules (prometheus-operator) -----------------------------

MONITORING = KUBE / "monitoring"
# What the alert rules must watch for (issue 13), by alert name.
ALERTS = {"PinctlWatcherNotReady", "PinctlWantedImageAtRisk", "PinctlWantedImageDeletedNextGc", "PinctlCriMismatch",
          "PinctlSyncErrors", "PinctlCriProxyNotReady", "PinctlConfigReloadFailed"}


def monitoring_manifests() -> dict[str, list[dict[str, Any]]]:
    return {path.name: [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
            for path in sorted(MONITORING.glob("*.yaml"))}


def monitoring_objects() -> list[dict[str, Any]]:
    return [doc for name, docs in monitoring_manifests().items() if name != "kustomization.yaml" for doc in docs]


def rule_groups(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = the("PrometheusRule", docs)["spec"]
    return spec


def alert_rules(groups: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in groups["groups"] for rule in group["rules"] if "alert" in rule]


def check_monitoring(docs: list[dict[str, Any]], pod_docs: list[dict[str, Any]]) -> None:
    daemonset = the("DaemonSet", pod_docs)
    namespace = the("Namespace", pod_docs)["metadata"]["name"]
    for doc in docs:
        assert doc["metadata"].get("namespace") == namespace, f"{doc['kind']} is not in {namespace}"
    monitor = the("PodMonitor", docs)["spec"]
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    selector = monitor["selector"].get("matchLabels", {})
    assert selector and selector.items() <= pod_labels.items(), f"selector {selector} misses the pods {pod_labels}"
    ports = named_ports(container_of(daemonset))
    for endpoint in monitor["podMetricsEndpoints"]:
        assert endpoint.get("port") in ports, f"PodMonitor scrapes port {endpoint.get('port')!r}, not one of {ports}"
        assert endpoint.get("path", "/metrics") == "/metrics"
    rules = alert_rules(rule_groups(docs))
    assert ALERTS <= {rule["alert"] for rule in rules}, f"missing alerts: {ALERTS - {r['alert'] for r in rules}}"
    for rule in rules:
        named = set(re.findall(r"\bpinctl_[a-z0-9_]+", rule["expr"]))
        assert named, f"{rule['alert']} watches no pinctl metric"
        unknown = named - set(metrics.SPECS)
        assert not unknown, f"{rule['alert']}: pinctl exports no {sorted(unknown)}"
        assert rule.get("labels", {}).get("severity") in ("warning", "critical"), f"{rule['alert']}: no severity"
        assert rule.get("annotations", {}).get("summary"), f"{rule['alert']}: no summary"


def test_monitoring(parse: Callable[[list[str]], Parsed]) -> None:
    check_monitoring(monitoring_objects(), objects())


def test_monitoring_kustomization_lists_every_manifest() -> None:
    found = monitoring_manifests()
    (kustomization,) = found.pop("kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(found)


MONITORING_EDITS: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "selector": lambda docs: the("PodMonitor", docs)["spec"]["selector"]["matchLabels"].__setitem__("app", "x"),
    "port": lambda docs: the("PodMonitor", docs)["spec"]["podMetricsEndpoints"][0].__setitem__("port", "http"),
    "namespace": lambda docs: the("PodMonitor", docs)["metadata"].__setitem__("namespace", "monitoring"),
    "unknown-metric": lambda docs: alert_rules(rule_groups(docs))[0].__setitem__("expr", "pinctl_redy == 0"),
    "alert-gone": lambda docs: rule_groups(docs)["groups"][0]["rules"].pop(0),
}


@pytest.mark.parametrize("name", sorted(MONITORING_EDITS))
def test_monitoring_check_fails(name: str) -> None:
    docs = copy.deepcopy(monitoring_objects())
    MONITORING_EDITS[name](docs)
    with pytest.raises(AssertionError):
        check_monitoring(docs, objects())


def _promtool() -> str:
    from tests.conftest import engine_unavailable

    tool = shutil.which("promtool")
    if tool is None:
        engine_unavailable("promtool is not installed (apt-get install prometheus; scripts/test-packages.txt)")
    return tool


def promtool(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], capture_output=True, text=True, cwd=cwd, timeout=60, check=False)


def test_alert_rules_pass_promtool_check(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "pinctl.rules.yml"
    path.write_text(yaml.safe_dump(rule_groups(monitoring_objects())))
    result = promtool("check", "rules", str(path), cwd=tmp_path)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_promtool_check_rules_can_fail(tmp_path: pathlib.Path) -> None:
    groups = rule_groups(monitoring_objects())
    alert_rules(groups)[0]["expr"] = "sum without (kind (pinctl_ready)"
    path = tmp_path / "broken.rules.yml"
    path.write_text(yaml.safe_dump(groups))
    assert promtool("check", "rules", str(path), cwd=tmp_path).returncode != 0


# Each alert fires on the series that should raise it, and stays quiet on a healthy node. The
# annotations are left out of this copy: promtool compares them word for word.
NODE = 'node="n1", instance="10.0.0.1:9736"'
ALERT_TESTS: list[dict[str, Any]] = [
    {"interval": "1m",
     "input_series": [{"series": f"pinctl_ready{{{NODE}}}", "values": "1 1 0x30"},
                      {"series": 'pinctl_ready{node="n2", instance="10.0.0.2:9736"}', "values": "1x32"}],
     "alert_rule_test": [{"eval_time": "10m", "alertname": "PinctlWatcherNotReady", "exp_alerts": []},
                         {"eval_time": "14m", "alertname": "PinctlWatcherNotReady",
                          "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1",
                                                         "instance": "10.0.0.1:9736"}}]}]},
    {"interval": "1m",
     "input_series": [{"series": f"pinctl_gc_at_risk_images{{{NODE}}}", "values": "0 2x40"},
                      {"series": f"pinctl_gc_at_risk_deleted_images{{{NODE}}}", "values": "0x10 1x10"}],
     "alert_rule_test": [{"eval_time": "20m", "alertname": "PinctlWantedImageAtRisk", "exp_alerts": []},
                         {"eval_time": "35m", "alertname": "PinctlWantedImageAtRisk",
                          "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1",
                                                         "instance": "10.0.0.1:9736"}}]},
                         {"eval_time": "17m", "alertname": "PinctlWantedImageDeletedNextGc",
                          "exp_alerts": [{"exp_labels": {"severity": "critical", "node": "n1",
                                                         "instance": "10.0.0.1:9736"}}]}]},
    {"interval": "1m",
     "input_series": [{"series": f'pinctl_cri_mismatches{{{NODE}, cause="labels-ignored"}}', "values": "1x30"},
                      {"series": f'pinctl_cri_mismatches{{{NODE}, cause="pattern-only"}}', "values": "0x30"},
                      {"series": 'pinctl_cri_mismatches{node="n2", instance="10.0.0.2:9736", cause="labels-ignored"}',
                       "values": "0x30"}],
     "alert_rule_test": [{"eval_time": "20m", "alertname": "PinctlCriMismatch",
                          "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1",
                                                         "instance": "10.0.0.1:9736"}}]}]},
    {"interval": "1m",
     "input_series": [{"series": f'pinctl_sync_errors_total{{{NODE}, kind="unreachable"}}', "values": "0+1x40"},
                      {"series": 'pinctl_sync_errors_total{node="n2", instance="10.0.0.2:9736", '
                                 'kind="changed-under-us"}', "values": "0+5x40"}],
     "alert_rule_test": [{"eval_time": "10m", "alertname": "PinctlSyncErrors", "exp_alerts": []},
                         {"eval_time": "30m", "alertname": "PinctlSyncErrors",
                          "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1",
                                                         "instance": "10.0.0.1:9736"}}]}]},
    # Pins unreadable for 5 minutes, then readable (n2): no alert; for 12 minutes and on (n1): one.
    {"interval": "1m",
     "input_series": [{"series": 'pinctl_cri_proxy_ready{node="n1", instance="10.0.0.1:9737"}', "values": "1 1 0x30"},
                      {"series": 'pinctl_cri_proxy_ready{node="n2", instance="10.0.0.2:9737"}',
                       "values": "1 1 0x4 1x26"}],
     "alert_rule_test": [{"eval_time": "10m", "alertname": "PinctlCriProxyNotReady", "exp_alerts": []},
                         {"eval_time": "14m", "alertname": "PinctlCriProxyNotReady",
                          "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1",
                                                         "instance": "10.0.0.1:9737"}}]}]},
    # A broken config reloaded at minute 2 and kept (n1): an alert; fixed after 3 minutes (n2): none.
    {"interval": "1m",
     "input_series": [{"series": f"pinctl_config_last_reload_successful{{{NODE}}}", "values": "1 1 0x20"},
                      {"series": 'pinctl_config_last_reload_successful{node="n2", instance="10.0.0.2:9736"}',
                       "values": "1 1 0x3 1x16"}],
     "alert_rule_test": [{"eval_time": "6m", "alertname": "PinctlConfigReloadFailed", "exp_alerts": []},
                         {"eval_time": "8m", "alertname": "PinctlConfigReloadFailed",
                          "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1",
                                                         "instance": "10.0.0.1:9736"}}]}]},
]


def test_alert_rules_fire_when_they_should(tmp_path: pathlib.Path) -> None:
    groups = rule_groups(monitoring_objects())
    for rule in alert_rules(groups):
        rule.pop("annotations", None)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(groups))
    tested = {case["alertname"] for test in ALERT_TESTS for case in test["alert_rule_test"]}
    assert tested == ALERTS
    (tmp_path / "tests.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                                                        "tests": ALERT_TESTS}))
    result = promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr

"""The systemd units in contrib/systemd against pinctl itself, no systemd needed: pinctl-sync.service
and pinctl-cri-proxy.service are read as systemd reads them, their ExecStart= is parsed by
pinctl's real click tree, and their hardening, writable paths, metrics address, restarts and
ordering are checked; systemd-analyze verify and security run where it is installed. Each check
is a function that raises AssertionError, and the mutation tests at the end show that each one
can fail."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Optional

import click
import pytest

from .deploy_helpers import (
    DEFAULT_SOCKET,
    ROOT,
    Parsed,
    check_watch_command,
    metrics_address,
    parse_fixture,  # noqa: F401  (the parse fixture)
)

UNIT = ROOT / "contrib" / "systemd" / "pinctl-sync.service"
PROXY_UNIT = ROOT / "contrib" / "systemd" / "pinctl-cri-proxy.service"
LOOPBACK = ("127.0.0.1", "::1", "localhost")


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
    assert_journal_writable(service)

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


def assert_journal_writable(service: dict[str, list[str]]) -> None:
    """The deletion journal's default directory, which both services write (pinctl history)."""
    states = ["/var/lib/" + d for d in " ".join(service.get("StateDirectory", [])).split()]
    assert "/var/lib/pinctl/history" in states, "the journal's directory is not made writable by StateDirectory="


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
    assert_journal_writable(service)
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
    ("StateDirectory=pinctl/history\n", ""),
], ids=["no-before-kubelet", "no-runtime-dir", "socket-dir-ro", "upstream-ro", "private-network", "no-inet", "mdwe",
        "typo", "slow-restart", "ip-allow-any", "metrics-everywhere", "no-metrics", "sync-port", "no-journal"])
def test_proxy_unit_check_fails(edit: tuple[str, str], parse: Callable[[list[str]], Parsed]) -> None:
    text = PROXY_UNIT.read_text()
    assert edit[0] in text
    with pytest.raises((AssertionError, click.UsageError)):
        check_proxy_unit(read_unit(text.replace(*edit)), parse)


# -- each check can fail --------------------------------------------------------------------


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
    _unit_without("StateDirectory"),
], ids=["mdwe", "rw-socket", "ro-run", "reload", "caps", "text-log", "typo", "other-socket", "user", "stop",
        "metrics-everywhere", "no-metrics", "ip-allow-any", "private-network", "no-journal"])
def test_unit_check_fails(broken: str, parse: Callable[[list[str]], Parsed]) -> None:
    with pytest.raises((AssertionError, click.UsageError)):
        check_unit(read_unit(broken), parse)

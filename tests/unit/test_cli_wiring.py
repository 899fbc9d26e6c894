"""The command wiring, in-process with click's CliRunner over a fake node: options before or
after the command, exit codes, data on stdout and diagnostics on stderr."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from pinctl import cli
from pinctl.errors import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE
from pinctl.node import sources

from .fakes import FakeStore
from .test_commands import PIN, FakeRuntime, node_of


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[FakeStore]:
    fake = FakeStore()
    fake.add("k8s.io", "example.test/app:1", "a", PIN)
    fake.add("k8s.io", "example.test/bee:1", "b")
    fake.add("other", "example.test/other:1", "c")
    monkeypatch.setattr(sources, "open_node", lambda cfg, warn: node_of(fake, *(cfg.settings.namespaces or ["k8s.io"])))
    monkeypatch.setattr(sources, "open_runtime", lambda cfg, warn: (FakeRuntime(0), cli_runtime()))
    monkeypatch.setenv("PINCTL_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    yield fake


def cli_runtime() -> Any:
    from pinctl.backends.cri import RuntimeVersion

    return RuntimeVersion("containerd", "1.7.24", "v1")


def invoke(*args: str) -> tuple[int, str, str]:
    """Run pinctl as main() does (error mapping included), capturing stdout and stderr apart."""
    apart: dict[str, Any] = {"mix_stderr": False}  # click < 8.2 mixes stderr in without it; 8.2 has no such flag
    try:
        runner = CliRunner(**apart)
    except TypeError:
        runner = CliRunner()
    with runner.isolation() as streams:
        code = cli.run(list(args))
    out, err = streams[0], streams[1]
    return code, out.getvalue().decode(), err.getvalue().decode()


def test_common_options_work_before_and_after_the_command(store: FakeStore) -> None:
    before = invoke("-n", "other", "ls", "-o", "json")
    after = invoke("ls", "-n", "other", "-o", "json")
    assert before == after
    code, out, err = before
    assert code == EXIT_OK and err == ""
    assert [image["ref"] for image in json.loads(out)["images"]] == ["example.test/other:1"]


def test_the_option_nearer_the_command_wins(store: FakeStore) -> None:
    code, out, _ = invoke("-n", "other", "ls", "-n", "k8s.io", "-q")
    assert code == EXIT_OK and out.split() == ["example.test/app:1", "example.test/bee:1"]


def test_partial_pin_exits_3_with_data_on_stdout_and_the_failure_on_stderr(store: FakeStore) -> None:
    store.fail_names.add("example.test/bee:1")
    code, out, err = invoke("pin", "example.test/app:1", "example.test/bee:1")
    assert code == EXIT_PARTIAL
    assert "already pinned" in out and "failed" in out
    assert "pin example.test/bee:1: refused" in err and "pinctl: pin: 1 already pinned, 1 failed" in err


def test_an_empty_policy_prune_is_a_usage_error_on_stderr_alone(store: FakeStore) -> None:
    code, out, err = invoke("sync", "--prune")
    assert (code, out) == (EXIT_USAGE, "")
    assert err.count("\n") == 1 and "--allow-empty-policy" in err


def test_malformed_reference_changes_nothing(store: FakeStore) -> None:
    code, out, err = invoke("pin", "example.test/bee:1", "Bad Ref")
    assert (code, out) == (EXIT_USAGE, "") and "malformed image reference" in err
    assert store.writes == []


def test_check_exit_code_follows_agreement(store: FakeStore) -> None:
    code, out, err = invoke("check", "-o", "json")
    assert code == EXIT_OK, err
    assert json.loads(out)["agree"] is True


def test_lint_exit_code_and_streams(store: FakeStore) -> None:
    code, out, err = invoke("--pinned-image", "*", "config", "lint", "--offline")
    assert code == EXIT_ERROR
    assert "invalid" in out and "config lint: 1 problem" in err


@pytest.mark.parametrize("args, said", [
    (("help", "pinn"), "no such command 'pinn'; did you mean pin?"),
    (("ls", "-o", "jsn"), "-o/--output takes table, wide or json, not 'jsn'; did you mean json?"),
    (("prune", "--until-usage", "50", "example.test/app:1"), "--until-usage and REF do not go together"),
])
def test_new_usage_errors_are_one_line_and_exit_2(store: FakeStore, args: tuple[str, ...], said: str) -> None:
    code, out, err = invoke(*args)
    assert (code, out) == (EXIT_USAGE, "")
    assert err.count("\n") == 1 and said in err, err

"""pull's pure parts: credentials, scrubbing, transient errors, the disk budget, retries, exits."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Callable, Optional

import pytest

from pinctl.backends.registry_auth import PullError, RegistryAuth, is_transient, load_auths, scrub
from pinctl.errors import ConfigError
from pinctl.gc.model import ImageFs
from pinctl.landing.budget import Budget
from pinctl.model import LabelChange
from pinctl.pull import run as pull


def test_auths_decoded_and_keyed_by_host(tmp_path: Path) -> None:
    encoded = base64.b64encode(b"me:pa:ss").decode()
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"auths": {"https://registry.example:5000/v1/": {"auth": encoded},
                                          "https://index.docker.io/v1/": {"username": "u", "password": "p"}}}))
    found = load_auths(str(path))
    assert (found["registry.example:5000"].username, found["registry.example:5000"].password) == ("me", "pa:ss")
    assert found["docker.io"].password == "p"
    assert "pa:ss" not in repr(found["registry.example:5000"])


def test_bad_config_names_no_secret(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"auths": {"x": {"auth": "s3cret!!"}}')
    with pytest.raises(ConfigError) as caught:
        load_auths(str(path))
    assert "s3cret" not in str(caught.value)


def test_scrub_removes_password_and_auth() -> None:
    auth = RegistryAuth("r", "me", "hunter2", "bWU6aHVudGVyMg==")
    assert scrub("denied for me:hunter2 (bWU6aHVudGVyMg==)", auth) == "denied for me:<redacted> (<redacted>)"


@pytest.mark.parametrize("details, transient", [
    ("unexpected status from HEAD request to http://r/v2/a/manifests/1: 500 Internal Server Error", True),
    ("received unexpected HTTP status: 503 Service Unavailable", True),
    ("429 Too Many Requests", True),
    ("unexpected status: 404 Not Found", False),
    ("dial tcp 127.0.0.1:5000: connect: connection refused", False),
])
def test_transient(details: str, transient: bool) -> None:
    assert is_transient("UNKNOWN", details) is transient


class FakeTarget:
    name = "fake"
    namespace = "k8s.io"

    def __init__(self, used: int, failures: list[PullError]) -> None:
        self.fs = ImageFs(1000, 1000 - used)
        self.failures = failures
        self.pulls = 0

    def present(self, ref: str) -> bool:
        return False

    def pull(self, ref: str, auth: Optional[RegistryAuth], timeout: float, cancelled: Callable[[], bool]) -> str:
        self.pulls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "sha256:x"

    def filesystem(self) -> ImageFs:
        return self.fs


class FakeLabels:
    def __init__(self) -> None:
        self.pinned: list[str] = []

    def pin(self, namespace: str, ref: str) -> tuple[str, Optional[str]]:
        self.pinned.append(ref)
        return "pinned", None

    def pin_labels(self, namespace: str, ref: str) -> LabelChange:
        return {}

    def restore(self, namespace: str, ref: str, labels: LabelChange) -> None:
        pass


def make_run(target: FakeTarget, size: Optional[int], retries: int = 2, max_usage: float = 80) -> pull.PullRun:
    request = pull.PullRequest(("r/a:1",), pin=True, retries=retries, max_usage=max_usage)
    run = pull.PullRun(target, FakeLabels(), request, Budget(target, max_usage), {}, lambda _r, _a: size,
                       lambda _r, _s: None)
    return run


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pull, "BACKOFF_FIRST", 0.0)


def test_budget_refuses_a_known_size_that_does_not_fit() -> None:
    item = make_run(FakeTarget(used=500, failures=[]), size=110).one("r/a:1")  # 500 + 3*110 = 83%
    assert item.action == "skipped" and "83%" in (item.why or "") and item.pin is None


def test_budget_with_unknown_size_refuses_only_when_over() -> None:
    assert make_run(FakeTarget(used=790, failures=[]), size=None).one("r/a:1").action == "pulled"
    refused = make_run(FakeTarget(used=800, failures=[]), size=None).one("r/a:1")
    assert refused.action == "skipped" and "not known" in (refused.why or "")


def test_transient_errors_are_retried_then_pinned() -> None:
    target = FakeTarget(used=0, failures=[PullError("500 Internal Server Error", transient=True)])
    item = make_run(target, size=1).one("r/a:1")
    assert (item.action, item.attempts, item.pin) == ("pulled", 2, "pinned")


def test_retry_delays_grow_capped_and_keep_at_least_half(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pull, "BACKOFF_FIRST", 1.0)
    for attempt, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)):
        assert pull.retry_delay(attempt, lambda: 0.0) == ceiling / 2
        assert pull.retry_delay(attempt, lambda: 1.0) == ceiling
        assert ceiling / 2 <= pull.retry_delay(attempt) <= ceiling


def test_retry_delays_of_a_fleet_spread_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pull, "BACKOFF_FIRST", 1.0)
    # 1,000 nodes whose first pull failed together come back over half a second, not at one instant.
    delays = sorted(pull.retry_delay(1) for _ in range(1000))
    assert delays[-1] - delays[0] > 0.4
    assert len({round(delay, 3) for delay in delays}) > 300


def test_permanent_errors_are_not_retried() -> None:
    target = FakeTarget(used=0, failures=[PullError("404 not found")])
    item = make_run(target, size=1).one("r/a:1")
    assert (item.action, item.attempts, item.pin, target.pulls) == ("failed", 1, None, 1)


def test_exit_codes() -> None:
    ok = pull.PullItem("a", "k8s.io", "pulled")
    bad = pull.PullItem("b", "k8s.io", "failed", "x")
    skipped = pull.PullItem("c", "k8s.io", "skipped", "no room")
    assert pull.PullReport("r", [ok], 80).exit_code == 0
    assert pull.PullReport("r", [ok, bad], 80).exit_code == 3
    assert pull.PullReport("r", [ok, skipped], 80).exit_code == 3
    assert pull.PullReport("r", [bad], 80).exit_code == 1
    assert pull.PullReport("r", [skipped], 80).exit_code == 1  # named, not pulled: nothing done
    assert pull.PullReport("r", [skipped, bad], 80).exit_code == 1
    assert pull.PullReport("r", [ok], 80, interrupted=True).exit_code == 130
    # The JSON status follows the exit code; an interrupted run is partial, whatever its items.
    assert [pull.PullReport("r", items, 80, interrupted=stopped).status
            for items, stopped in (([ok], False), ([ok, bad], False), ([bad], False), ([ok], True))] == [
        "success", "partial", "error", "partial"]

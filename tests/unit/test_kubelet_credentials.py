"""check's judgement of the kubelet's image pull credential verification (KEP-2535): every
policy against the records, kubernetes #138175, and the record files as untrusted input."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
from typing import Optional

import pytest

from pinctl.backends.cri import CriImage, RuntimeVersion
from pinctl.check import compare, credentials, pull_records
from pinctl.check.credentials import (ALWAYS_VERIFY, NEVER_VERIFY, NEVER_VERIFY_ALLOWLISTED, NEVER_VERIFY_PRELOADED,
                                      Credentials, KubeletPolicy, PulledRecord, Unreadable, judge, repository)
from pinctl.model import Descriptor, ImageRow, Reason

IMAGE_ID = "sha256:" + "c" * 64
SIDE = "127.0.0.1:5000/side/app:1"  # the name it was side-loaded under
PRIVATE = "127.0.0.1:5000/private/app:1"  # the name the kubelet pulled it under, with credentials
PATH = "/var/lib/kubelet/image_manager/pulled/sha256-x"


def record(**mapping: Credentials) -> PulledRecord:
    return PulledRecord(PATH, IMAGE_ID, {name.replace("__", "/"): creds for name, creds in mapping.items()})


def policy(name: str, *allow: str) -> KubeletPolicy:
    return KubeletPolicy(name, tuple(allow), True, "/var/lib/kubelet/config.yaml imagePullCredentialsVerificationPolicy")


NODE_WIDE = Credentials(node_wide=True)
SECRET = Credentials(secrets=("team/pull",))


@pytest.mark.parametrize("name, repo", [
    ("example.test/app:1", "example.test/app"),
    ("example.test/app", "example.test/app"),
    ("127.0.0.1:5000/app:1", "127.0.0.1:5000/app"),
    ("127.0.0.1:5000/app", "127.0.0.1:5000/app"),
    ("example.test/app@sha256:" + "a" * 64, "example.test/app"),
    ("example.test/app:1@sha256:" + "a" * 64, "example.test/app"),
    ("app:1", "app"),
])
def test_repository_trims_tag_and_digest_only(name: str, repo: str) -> None:
    assert repository(name) == repo


# (policy, pulled record, intent) -> (verdict, reason) for a pod asking for SIDE.
CASES = [
    # NeverVerify: whatever the records say.
    (policy(NEVER_VERIFY), None, None, "uses", "never-verify"),
    (policy(NEVER_VERIFY), record(**{"127.0.0.1:5000__private__app": SECRET}), None, "uses", "never-verify"),
    # NeverVerifyPreloadedImages: no record, no intent: preloaded.
    (policy(NEVER_VERIFY_PRELOADED), None, None, "uses", "preloaded"),
    # A pull intent for the name: the kubelet started pulling it and never recorded it.
    (policy(NEVER_VERIFY_PRELOADED), None, True, "pulls", "pull-intent"),
    # Pulled by the kubelet under this name, node-wide or with a secret.
    (policy(NEVER_VERIFY_PRELOADED), record(**{"127.0.0.1:5000__side__app": NODE_WIDE}), None, "uses",
     "node-wide-record"),
    (policy(NEVER_VERIFY_PRELOADED), record(**{"127.0.0.1:5000__side__app": SECRET}), None, "credentials",
     "credential-record"),
    # kubernetes #138175: the same image ID pulled under another name.
    (policy(NEVER_VERIFY_PRELOADED), record(**{"127.0.0.1:5000__private__app": NODE_WIDE}), None, "pulls",
     "other-name"),
    # A record without credentials (the kubelet restarted mid-pull and found the image).
    (policy(NEVER_VERIFY_PRELOADED), record(), None, "pulls", "no-credentials-record"),
    (policy(NEVER_VERIFY_PRELOADED), record(**{"127.0.0.1:5000__side__app": Credentials()}), None, "pulls",
     "no-credentials-record"),
    # NeverVerifyAllowlistedImages: exact and /* entries; a record does not matter when allowlisted.
    (policy(NEVER_VERIFY_ALLOWLISTED, "127.0.0.1:5000/side/app"), None, None, "uses", "allowlisted"),
    (policy(NEVER_VERIFY_ALLOWLISTED, "127.0.0.1:5000/*"), record(**{"x": SECRET}), None, "uses", "allowlisted"),
    (policy(NEVER_VERIFY_ALLOWLISTED, "127.0.0.1:5000/side/app:1"), None, None, "pulls", "no-record"),
    (policy(NEVER_VERIFY_ALLOWLISTED, "127.0.0.1:5000/sid/*"), None, None, "pulls", "no-record"),
    (policy(NEVER_VERIFY_ALLOWLISTED), record(**{"127.0.0.1:5000__side__app": NODE_WIDE}), None, "uses",
     "node-wide-record"),
    # AlwaysVerify: a preloaded image is pulled again; a record under its name is honoured.
    (policy(ALWAYS_VERIFY), None, None, "pulls", "no-record"),
    (policy(ALWAYS_VERIFY), record(**{"127.0.0.1:5000__side__app": NODE_WIDE}), None, "uses", "node-wide-record"),
    (policy(ALWAYS_VERIFY), record(**{"127.0.0.1:5000__side__app": SECRET}), None, "credentials", "credential-record"),
    (policy(ALWAYS_VERIFY), record(**{"127.0.0.1:5000__private__app": NODE_WIDE}), None, "pulls", "other-name"),
    # A record the kubelet cannot decode: it pulls, whatever the policy, even NeverVerify.
    (policy(NEVER_VERIFY), Unreadable(PATH, "not JSON"), None, "pulls", "unreadable-record"),
    (policy(NEVER_VERIFY_PRELOADED), None, Unreadable(PATH, "not JSON"), "pulls", "unreadable-record"),
    # One of a newer version than pinctl reads: it cannot tell.
    (policy(ALWAYS_VERIFY), Unreadable(PATH, "apiVersion v2", certain=False), None, "unknown", "unreadable-record"),
    # The feature gate off: nothing is verified.
    (KubeletPolicy(ALWAYS_VERIFY, gate_enabled=False), None, None, "uses", "gate-off"),
    (policy("SometimesVerify"), None, None, "unknown", "unknown-policy"),
]


@pytest.mark.parametrize("given, pulled, intent, verdict, reason", CASES)
def test_judge(given: KubeletPolicy, pulled: credentials.PulledEntry, intent: credentials.IntentEntry, verdict: str,
               reason: str) -> None:
    found = judge(given, SIDE, pulled, intent)
    assert (found.verdict, found.reason) == (verdict, reason)
    assert found.reason in credentials.REASONS and found.verdict in credentials.VERDICTS
    if found.verdict == "pulls":
        assert SIDE in found.why and "ErrImagePull" in found.why and found.fix


def test_every_policy_and_reason_is_exercised() -> None:
    assert {case[0].policy for case in CASES} >= set(credentials.POLICIES)
    assert {case[4] for case in CASES} == set(credentials.REASONS)


def test_issue_138175_is_named_with_the_other_name_and_the_fix() -> None:
    found = judge(policy(NEVER_VERIFY_PRELOADED), SIDE, record(**{"127.0.0.1:5000__private__app": NODE_WIDE}), None)
    assert "kubernetes #138175" in found.why
    assert "127.0.0.1:5000/private/app" in found.why and "no longer counts as preloaded" in found.why
    assert found.fix is not None and 'preloadedImagesVerificationAllowlist: ["127.0.0.1:5000/side/app"]' in found.fix
    assert f"pull {SIDE} once" in found.fix
    # The name the kubelet pulled it under is still fine.
    assert judge(policy(NEVER_VERIFY_PRELOADED), PRIVATE, record(**{"127.0.0.1:5000__private__app": NODE_WIDE}),
                 None).verdict == "uses"


def test_a_record_under_a_repository_digest_is_named_and_never_counts() -> None:
    misfiled = PulledRecord("/r/sha256-d", "127.0.0.1:5000/private/app@sha256:" + "d" * 64,
                            {"127.0.0.1:5000/private/app": NODE_WIDE})
    found = judge(policy(NEVER_VERIFY_PRELOADED), SIDE, None, None, misfiled)
    assert (found.verdict, found.reason) == ("uses", "preloaded") and "keyed by the repository digest" in found.why
    strict = judge(policy(ALWAYS_VERIFY), PRIVATE, None, None, misfiled)
    assert (strict.verdict, strict.reason) == ("pulls", "no-record") and "/r/sha256-d" in strict.why
    # With the record under the image ID, the other one says nothing.
    assert "repository digest" not in judge(policy(ALWAYS_VERIFY), PRIVATE, record(), None, misfiled).why


def test_fix_names_the_allowlist_entry_for_the_allowlist_policy() -> None:
    found = judge(policy(NEVER_VERIFY_ALLOWLISTED, "other.test/*"), SIDE, None, None)
    assert found.fix is not None and found.fix.startswith('add "127.0.0.1:5000/side/app" to preloadedImagesVerificationAllowlist')


@pytest.mark.parametrize("pattern, ok", [
    ("example.test/app", True), ("example.test/*", True), ("example.test/app:1", False), (" example.test/app", False),
    ("/*", False), ("example.test/*/x", False), ("*", False), ("", False), (7, False),
])
def test_allowlist_entries_checked_as_the_kubelet_does(pattern: object, ok: bool) -> None:
    assert (credentials.allowlist_problem(pattern) is None) == ok


def test_policy_from_config() -> None:
    found, problems = credentials.policy_from_config(
        {"imagePullCredentialsVerificationPolicy": "NeverVerifyAllowlistedImages",
         "preloadedImagesVerificationAllowlist": ["example.test/*", "bad:1"],
         "featureGates": {"KubeletEnsureSecretPulledImages": True}}, "/k/config.yaml")
    assert found.policy == NEVER_VERIFY_ALLOWLISTED and found.allowlist == ("example.test/*",) and found.gate_enabled
    assert found.source == "/k/config.yaml imagePullCredentialsVerificationPolicy"
    assert len(problems) == 1 and "'bad:1'" in problems[0]
    default, none = credentials.policy_from_config({}, "/k/config.yaml")
    assert default.policy == NEVER_VERIFY_PRELOADED and "default" in default.source and none == []
    off, _ = credentials.policy_from_config({"featureGates": {"KubeletEnsureSecretPulledImages": False}}, "/k")
    assert not off.gate_enabled
    wrong, problems = credentials.policy_from_config({"imagePullCredentialsVerificationPolicy": 3,
                                                      "preloadedImagesVerificationAllowlist": "x"}, "/k")
    assert len(problems) == 3 and judge(wrong, SIDE, None, None).verdict == "unknown"


# --- the record files -----------------------------------------------------------------------------

def pulled_json(image_ref: str = IMAGE_ID, **extra: object) -> bytes:
    document: dict[str, object] = {
        "kind": "ImagePulledRecord", "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "lastUpdatedTime": "2026-12-06T14:00:00Z", "imageRef": image_ref,
        "credentialMapping": {"127.0.0.1:5000/private/app": {"kubernetesSecrets": [
            {"uid": "u", "namespace": "team", "name": "pull", "credentialHash": "h"}]}}}
    document.update(extra)
    return json.dumps(document).encode()


def test_record_file_name_is_the_kubelets() -> None:
    assert pull_records.record_file("x") == "sha256-" + hashlib.sha256(b"x").hexdigest()


def test_a_good_record_parses() -> None:
    entry, problem = pull_records.parse_pulled(pulled_json(), PATH, IMAGE_ID)
    assert problem is None and isinstance(entry, PulledRecord)
    assert entry.mapping == {"127.0.0.1:5000/private/app": Credentials(False, ("team/pull",), ())}


@pytest.mark.parametrize("raw, words", [
    (b"", "not JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b"[1]", "not a JSON object"),
    (b'{"kind": "ImagePulledRecord"}', "no apiVersion"),
    (pulled_json(kind="ImagePullIntent"), "kind is 'ImagePullIntent'"),
    (pulled_json(apiVersion="v1"), "not the kubelet's"),
    (pulled_json(extra=1), "unknown field 'extra'"),
    (pulled_json(imageRef=7), "imageRef is not a string"),
    (pulled_json(lastUpdatedTime="yesterday"), "not an RFC 3339 time"),
    (pulled_json(credentialMapping=[]), "credentialMapping is not an object"),
    (pulled_json(credentialMapping={"a": {"nodePodsAccessible": "yes"}}), "not true or false"),
    (pulled_json(credentialMapping={"a": {"kubernetesSecrets": [{"name": 1}]}}), "not a string"),
    (pulled_json(credentialMapping={"a": {"kubernetesSecrets": [{"nick": "x"}]}}), "unknown field 'nick'"),
    (pulled_json(credentialMapping={"a": {"kubernetesServiceAccounts": "x"}}), "is not a list"),
    (b'{"kind": "ImagePulledRecord", "kind": "ImagePulledRecord", "apiVersion": "kubelet.config.k8s.io/v1beta1"}',
     "duplicate field"),
])
def test_a_broken_record_is_one_line(raw: bytes, words: str) -> None:
    entry, problem = pull_records.parse_pulled(raw, PATH, IMAGE_ID)
    assert isinstance(entry, Unreadable) and entry.certain
    assert problem is not None and words in problem and "\n" not in problem


def test_a_newer_version_is_not_judged() -> None:
    entry, problem = pull_records.parse_pulled(pulled_json(apiVersion="kubelet.config.k8s.io/v1"), PATH, IMAGE_ID)
    assert isinstance(entry, Unreadable) and not entry.certain and problem and "not one pinctl reads" in problem


def test_a_record_of_another_image_counts_as_none() -> None:
    entry, problem = pull_records.parse_pulled(pulled_json("sha256:" + "d" * 64), PATH, IMAGE_ID)
    assert entry is None and problem and "the kubelet ignores it" in problem


def test_intents() -> None:
    good = b'{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1alpha1","image":"' + SIDE.encode() + b'"}'
    assert pull_records.parse_intent(good, PATH, SIDE) == (True, None)
    assert pull_records.parse_intent(good, PATH, PRIVATE)[0] is None
    assert isinstance(pull_records.parse_intent(b"{", PATH, SIDE)[0], Unreadable)


def write(root: pathlib.Path, kind: str, key: str, raw: bytes) -> pathlib.Path:
    path = root / "image_manager" / kind / pull_records.record_file(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    return path


def test_read_records_from_files(tmp_path: pathlib.Path) -> None:
    assert not pull_records.read_records(str(tmp_path), [IMAGE_ID], [SIDE]).present
    write(tmp_path, "pulled", IMAGE_ID, pulled_json())
    write(tmp_path, "pulling", SIDE, b"\x00garbage")
    other = "sha256:" + "e" * 64
    (tmp_path / "image_manager" / "pulled" / pull_records.record_file(other)).mkdir()
    fifo = tmp_path / "image_manager" / "pulling" / pull_records.record_file(PRIVATE)
    os.mkfifo(fifo)
    found = pull_records.read_records(str(tmp_path), [IMAGE_ID, other], [SIDE, PRIVATE, "absent:1"])
    assert found.present and isinstance(found.pulled[IMAGE_ID], PulledRecord)
    directory, fifo_intent = found.pulled[other], found.intents[PRIVATE]
    assert isinstance(directory, Unreadable) and "directory" in directory.problem
    assert isinstance(found.intents[SIDE], Unreadable)
    assert isinstance(fifo_intent, Unreadable) and not fifo_intent.certain
    assert found.intents["absent:1"] is None
    assert len(found.problems) == 3 and all(line.startswith("kubelet record ") for line in found.problems)


def test_a_huge_record_is_not_read_whole(tmp_path: pathlib.Path) -> None:
    write(tmp_path, "pulled", IMAGE_ID, b" " * (pull_records.MAX_RECORD_BYTES + 10))
    found = pull_records.read_records(str(tmp_path), [IMAGE_ID], [])
    assert isinstance(found.pulled[IMAGE_ID], Unreadable) and "1 MiB" in found.problems[0]


def test_kubelet_side(tmp_path: pathlib.Path) -> None:
    if not os.path.exists("/var/lib/kubelet/config.yaml"):  # no config, no records: no kubelet here
        assert pull_records.kubelet_side(None, str(tmp_path / "none")) is None
    (tmp_path / "image_manager").mkdir()
    if not os.path.exists("/var/lib/kubelet/config.yaml"):  # the records alone: its default policy
        found = pull_records.kubelet_side(None, str(tmp_path))
        assert found is not None and found.policy.policy == NEVER_VERIFY_PRELOADED and found.config is None
    config = tmp_path / "config.yaml"
    config.write_text("imagePullCredentialsVerificationPolicy: AlwaysVerify\n")
    side = pull_records.kubelet_side(str(config), str(tmp_path))
    assert side is not None and side.policy.policy == ALWAYS_VERIFY and side.config == str(config)
    config.write_text(": [\n")
    from pinctl.errors import ConfigError
    with pytest.raises(ConfigError):
        pull_records.kubelet_side(str(config), str(tmp_path))


# --- in check's result and its output ---------------------------------------------------------------

def check_result(names: tuple[str, ...] = (SIDE,)) -> compare.CheckResult:
    row = ImageRow(namespace="k8s.io", ref=names[0], image_id=IMAGE_ID, target=Descriptor("application/vnd.oci.image.manifest.v1+json", "sha256:" + "b" * 64, 400), size=1, labels={}, pinned=True,
                   reasons=[Reason("label", names[0])])
    return compare.check([row], [CriImage(IMAGE_ID, names, (), 1, True)], RuntimeVersion("containerd", "1.7.24", "v1"),
                         "unix:///run/containerd/containerd.sock")


def reader(pulled: credentials.PulledEntry) -> compare.RecordsReader:
    def read(ids: object, names: object) -> pull_records.RecordsRead:
        return pull_records.RecordsRead("/var/lib/kubelet/image_manager", True, {IMAGE_ID: pulled}, {})
    return read


def test_judge_kubelet_on_a_check_result() -> None:
    result = check_result((SIDE, PRIVATE))
    compare.judge_kubelet(result, policy(NEVER_VERIFY_PRELOADED), "/k", [],
                          reader(record(**{"127.0.0.1:5000__private__app": NODE_WIDE})))
    [item] = result.items
    assert [(j.name, j.verdict) for j in item.kubelet] == [(SIDE, "pulls"), (PRIVATE, "uses")]
    assert item.agrees and item.kubelet_warning is not None and result.kubelet_warnings == 1
    assert result.agree  # the exit code stays the pins'


def test_output_json_table_and_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    from pinctl.render import output

    result = check_result()
    compare.judge_kubelet(result, policy(ALWAYS_VERIFY), "/k", ["kubelet record /x: not JSON"], reader(None))
    buf = io.StringIO()
    output.print_check(result, "json", out=buf)
    doc = json.loads(buf.getvalue())
    assert doc["kubelet"]["policy"] == ALWAYS_VERIFY and doc["kubelet"]["warned_images"] == 1
    [check] = doc["images"][0]["kubelet_checks"]
    assert check["image_name"] == SIDE and check["verdict"] == "pulls" and check["reason"] == "no-record"
    table = io.StringIO()
    output.print_check(result, "table", out=table)
    header, row = table.getvalue().splitlines()
    assert "KUBELET" in header and "pulls again" in row
    err = capsys.readouterr().err
    assert f"check: kubelet: {SIDE}" in err and "AlwaysVerify" in err and "fix:" in err
    assert "kubelet record /x: not JSON" in err and "1 pinned image not run from disk" in err


def test_on_a_terminal_the_sentence_is_under_the_row(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from pinctl.render import output

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("NO_COLOR", "1")
    result = check_result((SIDE, PRIVATE))
    compare.judge_kubelet(result, policy(NEVER_VERIFY_PRELOADED), "/k", [],
                          reader(record(**{"127.0.0.1:5000__private__app": NODE_WIDE})))
    out = Terminal()
    output.print_check(result, "table", out=out)
    shown = out.getvalue()
    assert "kubelet:" in shown and "kubernetes #138175" in shown and "kubelet fix:" in shown
    err = capsys.readouterr().err
    assert "check: kubelet:" not in err and "1 pinned image not run from disk" in err


def test_no_kubelet_no_column() -> None:
    from pinctl.render import output

    result = check_result()
    out = io.StringIO()
    output.print_check(result, "wide", out=out)
    assert "KUBELET" not in out.getvalue()



def test_a_name_asked_is_judged_as_the_pod_spells_it() -> None:
    class Runtime:
        endpoint = "unix:///run/containerd/containerd.sock"

        def prefetch(self, *listings: str) -> None:
            pass

        def list_images(self) -> list[CriImage]:
            raise AssertionError("asked by name: no listing")

        def image_status(self, ref: str) -> Optional[CriImage]:
            return CriImage(IMAGE_ID, (SIDE,), (), 1, True) if ref in ("app:1", SIDE) else None

    row = ImageRow(namespace="k8s.io", ref=SIDE, image_id=IMAGE_ID,
                   target=Descriptor("application/vnd.oci.image.manifest.v1+json", "sha256:" + "b" * 64, 400), size=1,
                   labels={}, pinned=True, reasons=[Reason("label", SIDE)])
    result = compare.check_runtime([row], Runtime(), RuntimeVersion("containerd", "1.7.24", "v1"), ["app:1"])
    compare.judge_kubelet(result, policy(NEVER_VERIFY_ALLOWLISTED, "127.0.0.1:5000/side/app"), "/k", [], reader(None))
    [item] = result.items
    assert [(j.name, j.verdict) for j in item.kubelet] == [("app:1", "pulls"), (SIDE, "uses")]


def test_records_not_readable_are_one_line(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "pulled", IMAGE_ID, pulled_json())
    real_open = os.open

    def denied(path: str, *args: object, **kwargs: object) -> int:
        if "image_manager" in str(path):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", denied)
    found = pull_records.read_records(str(tmp_path), [IMAGE_ID, "sha256:" + "e" * 64], [SIDE, PRIVATE])
    assert found.problems == [f"kubelet records {tmp_path}/image_manager: permission denied: run pinctl as root"]
    entry = found.pulled[IMAGE_ID]
    assert isinstance(entry, Unreadable) and not entry.certain
    assert judge(policy(ALWAYS_VERIFY), SIDE, entry, None).verdict == "unknown"

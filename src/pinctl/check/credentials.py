"""What the kubelet does with an image already on the node, under its image pull credentials
verification policy (KEP-2535, "ensure secret pulled images", on by default from 1.35): use the
copy on disk, use it only for pods that present the credentials it was pulled with, or pull it
again first. Pure: the policy and the records come in parsed (check/pull_records.py reads them).

The rules are the kubelet's (pkg/kubelet/images/pullmanager, 1.37), restated:

1. No verification at all with the feature gate KubeletEnsureSecretPulledImages off.
2. The pulled record of the image (keyed by the CRI's image ID) that the kubelet cannot decode
   makes it pull again, whatever the policy: it reads the records before it asks the policy.
   (It keeps them in memory from its start on; the files say what it does from its next start.)
3. The image counts as pulled by the kubelet when a pulled record for its image ID exists, or a
   pull intent for the name the pod asks for (a pull that started and never finished).
4. The policy says whether to verify: NeverVerify never; NeverVerifyPreloadedImages only what
   the kubelet pulled; NeverVerifyAllowlistedImages all but the names on its allowlist;
   AlwaysVerify always.
5. Verifying, the record's credential mapping must hold the pod's name (without tag or digest,
   spelt as the pod spells it): node-wide credentials let every pod use it; recorded secrets or
   service accounts let the pods presenting them use it; anything else is a pull again.

Kubernetes #138175 is rule 3 with rule 5: a side-loaded image is preloaded (trusted) until the
kubelet pulls the same image (same image ID) under another name with credentials. From then on
the image has a pulled record, so it counts as pulled by the kubelet, and the record's mapping
holds the other name only: a pod using the side-loaded name makes the kubelet pull it again
(and with imagePullPolicy Never, fail with ErrImageNeverPull), though the image is on disk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, Literal, Mapping, Optional, Sequence, Union, get_args

NEVER_VERIFY: Final = "NeverVerify"
NEVER_VERIFY_PRELOADED: Final = "NeverVerifyPreloadedImages"
NEVER_VERIFY_ALLOWLISTED: Final = "NeverVerifyAllowlistedImages"
ALWAYS_VERIFY: Final = "AlwaysVerify"
POLICIES = (NEVER_VERIFY, NEVER_VERIFY_PRELOADED, NEVER_VERIFY_ALLOWLISTED, ALWAYS_VERIFY)
DEFAULT_POLICY = NEVER_VERIFY_PRELOADED
POLICY_FIELD = "imagePullCredentialsVerificationPolicy"
ALLOWLIST_FIELD = "preloadedImagesVerificationAllowlist"
FEATURE_GATE = "KubeletEnsureSecretPulledImages"
ISSUE = "kubernetes #138175"

# What the kubelet does when a pod with imagePullPolicy IfNotPresent asks for the image by a name.
Verdict = Literal["uses", "credentials", "pulls", "unknown"]
USES: Final = "uses"  # any pod runs the copy on disk
CREDENTIALS: Final = "credentials"  # only pods presenting the recorded credentials; others pull again
PULLS: Final = "pulls"  # every pod makes the kubelet pull it again first
UNKNOWN: Final = "unknown"  # pinctl cannot tell (a policy or record it does not know)
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
# Worst first: an image's verdict is its worst name's.
_SEVERITY = {PULLS: 0, UNKNOWN: 1, CREDENTIALS: 2, USES: 3}

# Why, as a closed set (JSON and metrics count by it).
Reason = Literal["gate-off", "never-verify", "preloaded", "allowlisted", "node-wide-record", "credential-record",
                 "no-record", "pull-intent", "other-name", "no-credentials-record", "unreadable-record",
                 "unknown-policy"]
REASONS: tuple[Reason, ...] = get_args(Reason)

_DIGEST = re.compile(r"@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}$")
_TAG = re.compile(r":[\w][\w.-]{0,127}$")


@dataclass(frozen=True)
class Credentials:
    """One entry of a pulled record's credentialMapping: who may use the image under that name."""

    node_wide: bool = False
    secrets: tuple[str, ...] = ()  # namespace/name
    service_accounts: tuple[str, ...] = ()  # namespace/name

    @property
    def empty(self) -> bool:
        return not self.node_wide and not self.secrets and not self.service_accounts


@dataclass(frozen=True)
class PulledRecord:
    """The kubelet's record that it pulled an image (image_manager/pulled/sha256-<sha256 of the
    image ID>): the image ID, and by name (no tag or digest) the credentials it was pulled with."""

    path: str
    image_ref: str
    mapping: Mapping[str, Credentials] = field(default_factory=dict)


@dataclass(frozen=True)
class Unreadable:
    """A record file the kubelet would fail to decode; problem says why, in a few words.
    certain: False for a record of a version newer than pinctl knows, which a newer kubelet
    (the one that wrote it) may well read."""

    path: str
    problem: str
    certain: bool = True


# A record as read: absent (None), one the kubelet decodes, or one it cannot.
PulledEntry = Optional[Union[PulledRecord, Unreadable]]
# A pull intent (image_manager/pulling/sha256-<sha256 of the name>): absent, present, unreadable.
IntentEntry = Optional[Union[bool, Unreadable]]


@dataclass(frozen=True)
class KubeletPolicy:
    """The kubelet's verification settings as its config file states them (or its defaults)."""

    policy: str = DEFAULT_POLICY
    allowlist: tuple[str, ...] = ()
    gate_enabled: bool = True
    source: str = "kubelet default"


@dataclass(frozen=True)
class Judgement:
    """What the kubelet does with the image on disk when a pod asks for it by name."""

    name: str
    verdict: Verdict
    reason: Reason
    why: str
    fix: Optional[str] = None


def repository(name: str) -> str:
    """The name without its digest and tag, as the kubelet keys its credential mapping and
    matches its allowlist (no normalising: a short name and the full name the runtime lists differ)."""
    bare = _DIGEST.sub("", name)
    slash = bare.rfind("/")
    tag = _TAG.search(bare, slash + 1)
    return bare[:tag.start()] if tag else bare


def allowlist_problem(pattern: object) -> Optional[str]:
    """Why the kubelet refuses an allowlist entry (it then does not start), or None."""
    if not isinstance(pattern, str):
        return f"{pattern!r} is not a string"
    if pattern != pattern.strip():
        return f"{pattern!r} has leading or trailing spaces"
    wildcard = pattern.endswith("/*")
    stem = pattern[:-1] if wildcard else pattern
    if not stem:
        return f"{pattern!r} is too short"
    if "*" in stem:
        return f"{pattern!r}: only a trailing /* is allowed"
    if wildcard and len(stem) == 1:
        return f"{pattern!r}: at least a registry host is required"
    if not wildcard and repository(pattern) != pattern:
        return f"{pattern!r}: no tag or digest is allowed"
    return None


def allowlisted(name: str, allowlist: Sequence[str]) -> Optional[str]:
    """The allowlist entry that exempts name, or None."""
    repo = repository(name)
    for pattern in allowlist:
        if pattern.endswith("/*") and repo.startswith(pattern[:-1]) or pattern == repo:
            return pattern
    return None


def judge(policy: KubeletPolicy, name: str, pulled: PulledEntry, intent: IntentEntry,
          misfiled: Optional[PulledRecord] = None) -> Judgement:
    """What the kubelet does when a pod with imagePullPolicy IfNotPresent asks for the image on
    disk by name; pulled: the record of its image ID, intent: the pull intent for name.

    misfiled: a record of this image kept under one of its repository digests. The kubelet keys a
    record by what the runtime's PullImage answers (CRI-O and cri-dockerd answer a repository
    digest) but looks it up by ImageStatus's image ID, so such a record never counts; it is named
    in the sentence, as the reason the kubelet's own pull does not show."""
    found = _judge(policy, name, pulled, intent)
    if misfiled is not None and pulled is None and found.reason in ("preloaded", "no-record"):
        note = (f" (the kubelet did pull it: its record {misfiled.path} is keyed by the repository digest "
                f"{misfiled.image_ref} that the runtime's PullImage answered, and it looks records up by the image ID, "
                "so that record never counts)")
        return Judgement(found.name, found.verdict, found.reason, found.why + note, found.fix)
    return found


def _judge(policy: KubeletPolicy, name: str, pulled: PulledEntry, intent: IntentEntry) -> Judgement:
    repo = repository(name)
    if not policy.gate_enabled:
        return Judgement(name, USES, "gate-off", f"the kubelet's feature gate {FEATURE_GATE} is off: it verifies "
                                                 "no credentials")
    # The kubelet reads the records before it asks the policy: one it cannot decode means a pull.
    broken = pulled if isinstance(pulled, Unreadable) else None
    if broken is None and pulled is None and isinstance(intent, Unreadable):
        broken = intent
    if broken is not None and not broken.certain:
        return Judgement(name, UNKNOWN, "unreadable-record",
                         f"pinctl cannot read the kubelet's record {broken.path} ({broken.problem}), so it cannot "
                         f"tell whether the kubelet uses the image on disk under {policy.policy}")
    if broken is not None:
        return Judgement(name, PULLS, "unreadable-record",
                         f"the kubelet cannot decode its record {broken.path} ({broken.problem}), so it pulls {name} "
                         f"again for every pod, whatever its policy ({policy.policy}); {_OFFLINE}",
                         f"let the kubelet pull {name} once with its credentials (a pod that uses it): it rewrites "
                         "the record")
    record = pulled if isinstance(pulled, PulledRecord) else None
    by_kubelet = record is not None or intent is True
    exempt = _exempt(policy, name, by_kubelet)
    if isinstance(exempt, Judgement):
        return exempt
    # Verifying from here on.
    held = f"under {policy.policy} ({policy.source})"
    if record is None:
        if intent is True:
            return Judgement(name, PULLS, "pull-intent",
                             f"{held} the kubelet verifies credentials, and its pull of {name} never finished (a pull "
                             f"intent, no record): it pulls {name} again; {_OFFLINE}", _pull_once(name, policy))
        return Judgement(name, PULLS, "no-record",
                         f"{held} the kubelet verifies credentials and has no record of pulling this image: it pulls "
                         f"{name} again with the pod's credentials; {_OFFLINE}", _pull_once(name, policy))
    creds = record.mapping.get(repo)
    if creds is None and record.mapping:
        others = ", ".join(sorted(record.mapping))
        if policy.policy == NEVER_VERIFY_PRELOADED:
            why = (f"{ISSUE}: the kubelet pulled this image (the same image ID) as {others}, so under "
                   f"{NEVER_VERIFY_PRELOADED} ({policy.source}) it no longer counts as preloaded, and its record "
                   f"{record.path} holds no credentials for {repo}: a pod using {name} makes it pull {name} again; "
                   f"{_OFFLINE}")
        else:
            why = (f"{held} the kubelet verifies credentials; its record {record.path} holds this image under "
                   f"{others} only (as in {ISSUE}), none for {repo}: it pulls {name} again; {_OFFLINE}")
        return Judgement(name, PULLS, "other-name", why, _pull_once(name, policy))
    if creds is None or creds.empty:
        return Judgement(name, PULLS, "no-credentials-record",
                         f"{held} the kubelet verifies credentials; its record {record.path} holds none for {repo} "
                         f"(a pull it could not attribute): it pulls {name} again; {_OFFLINE}",
                         _pull_once(name, policy))
    if creds.node_wide:
        return Judgement(name, USES, "node-wide-record", f"{held} the kubelet pulled {repo} with credentials every pod "
                                                         "on the node may use: any pod uses it")
    who = ", ".join([*(f"secret {s}" for s in creds.secrets), *(f"service account {a}" for a in creds.service_accounts)])
    return Judgement(name, CREDENTIALS, "credential-record",
                     f"{held} only pods presenting {who} use it; any other pod makes the kubelet pull {name} again; "
                     f"{_OFFLINE}", _pull_once(name, policy, node_wide=True))


_OFFLINE = ("on a node that cannot reach its registry the pod fails (ErrImagePull), and with imagePullPolicy Never "
            "(ErrImageNeverPull), though the pinned copy is on disk")


def _exempt(policy: KubeletPolicy, name: str, by_kubelet: bool) -> Optional[Judgement]:
    """The policy's answer when it verifies nothing for this name; None when it verifies."""
    if policy.policy == NEVER_VERIFY:
        return Judgement(name, USES, "never-verify", f"under {NEVER_VERIFY} ({policy.source}) any pod uses it")
    if policy.policy == NEVER_VERIFY_PRELOADED:
        if by_kubelet:
            return None
        return Judgement(name, USES, "preloaded", f"preloaded (the kubelet has no record of pulling it): under "
                                                  f"{NEVER_VERIFY_PRELOADED} ({policy.source}) any pod uses it")
    if policy.policy == NEVER_VERIFY_ALLOWLISTED:
        entry = allowlisted(name, policy.allowlist)
        if entry is None:
            return None
        return Judgement(name, USES, "allowlisted", f"{ALLOWLIST_FIELD} entry {entry!r} ({policy.source}): any pod "
                                                    "uses it")
    if policy.policy == ALWAYS_VERIFY:
        return None
    return Judgement(name, UNKNOWN, "unknown-policy", f"{POLICY_FIELD} {policy.policy!r} ({policy.source}) is not one "
                                                      f"pinctl knows ({', '.join(POLICIES)}); the kubelet refuses to "
                                                      "start with a policy it does not know")


def _pull_once(name: str, policy: KubeletPolicy, node_wide: bool = False) -> str:
    """The fix: an allowlist entry (the kubelet's config), or one pull through the kubelet with
    credentials every pod may use (node credentials), which records it for all pods."""
    repo = repository(name)
    entry = f'{ALLOWLIST_FIELD}: ["{repo}"]'
    pull = (f"let the kubelet pull {name} once with node credentials (its config.json or a credential provider): "
            "the record then lets every pod use it")
    if node_wide:
        return pull
    if policy.policy == ALWAYS_VERIFY:
        return f"{pull}; or set {POLICY_FIELD}: {NEVER_VERIFY_ALLOWLISTED} with {entry}, then restart the kubelet"
    if policy.policy == NEVER_VERIFY_ALLOWLISTED:
        return f"add \"{repo}\" to {ALLOWLIST_FIELD}, then restart the kubelet; or {pull}"
    return f"{pull}; or set {POLICY_FIELD}: {NEVER_VERIFY_ALLOWLISTED} with {entry}, then restart the kubelet"


def worst(judgements: Sequence[Judgement]) -> Optional[Judgement]:
    """The judgement that says the most: a pull before an unknown before credentials before use."""
    return min(judgements, key=lambda j: _SEVERITY[j.verdict], default=None)


def warns(judgement: Judgement) -> bool:
    """A pinned image the kubelet will not run from disk for every pod."""
    return judgement.verdict in (PULLS, UNKNOWN)


def policy_from_config(document: Optional[Mapping[str, object]], where: str) -> tuple[KubeletPolicy, list[str]]:
    """The verification policy, its allowlist and the feature gate from the kubelet's config
    (None: no config file: its defaults), and a line per problem with them."""
    if document is None:
        return KubeletPolicy(), []
    problems: list[str] = []
    raw = document.get(POLICY_FIELD)
    policy, source = DEFAULT_POLICY, f"the kubelet's default; {where} does not set {POLICY_FIELD}"
    if raw is not None and raw != "":
        source = f"{where} {POLICY_FIELD}"
        if isinstance(raw, str):
            policy = raw
        else:
            problems.append(f"kubelet config {where}: {POLICY_FIELD} must be a string, got {raw!r}")
            policy = repr(raw)
        if policy not in POLICIES:
            problems.append(f"kubelet config {where}: {POLICY_FIELD} {policy!r} is not one of {', '.join(POLICIES)}")
    allowlist: list[str] = []
    raw_list = document.get(ALLOWLIST_FIELD)
    if raw_list is not None:
        if not isinstance(raw_list, list):
            problems.append(f"kubelet config {where}: {ALLOWLIST_FIELD} must be a list, got {raw_list!r}")
        else:
            for entry in raw_list:
                bad = allowlist_problem(entry)
                if bad:
                    problems.append(f"kubelet config {where}: {ALLOWLIST_FIELD} entry {bad} (the kubelet will not "
                                    "start with it)")
                else:
                    allowlist.append(str(entry))
    gates = document.get("featureGates")
    enabled = True
    if isinstance(gates, Mapping) and FEATURE_GATE in gates:
        value = gates[FEATURE_GATE]
        if isinstance(value, bool):
            enabled = value
        else:
            problems.append(f"kubelet config {where}: featureGates.{FEATURE_GATE} must be true or false, got {value!r}")
    return KubeletPolicy(policy, tuple(allowlist), enabled, source), problems

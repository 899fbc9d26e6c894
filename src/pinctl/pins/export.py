"""config export: the policy rendered as another runtime's own configuration.

Each runtime expresses less than pinctl: containerd takes exact references only, cri-dockerd
no keywords, CRI-O does not anchor globs. What cannot be said is expanded to the references
present now, and every such compromise is returned as a note for stderr.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

from pinctl import refs as references
from pinctl.pins.patterns import PATTERN_EXACT, PATTERN_GLOB, PATTERN_KEYWORD, matches
from pinctl.pins.policy import Policy

if TYPE_CHECKING:
    from pinctl.pins.patterns import Pattern


@dataclass
class Export:
    text: str
    notes: list[str] = field(default_factory=list)


def export(target: str, policy: Policy, present: Optional[Sequence[str]], label_rules: Sequence[str]) -> Export:
    """present: the references on the node now (no sha256: IDs), for patterns that must be
    expanded; None when the engines were not asked (--offline)."""
    render = {"crio": _crio, "containerd": _containerd, "cri-dockerd": _cri_dockerd}[target]
    return render(policy, None if present is None else sorted(set(present)), label_rules)


def _toml_list(items: Sequence[str]) -> str:
    return "[\n" + "".join(f"  {json.dumps(item)},\n" for item in items) + "]"


def _expanded(pattern: Pattern, present: Optional[Sequence[str]], why: str, notes: list[str]) -> list[str]:
    if present is None:
        notes.append(f"{pattern.text!r} ({pattern.source}): {why}; left out, since --offline lists no images")
        return []
    found = [name for name in present if matches(pattern, name)]
    notes.append(f"{pattern.text!r} ({pattern.source}): {why}; expanded to the {len(found)} reference(s) present now")
    return found


def _crio(policy: Policy, present: Optional[Sequence[str]], label_rules: Sequence[str]) -> Export:
    notes: list[str] = []
    items: list[str] = []
    for p in policy.patterns:
        if p.dialect == "crio" or p.kind == PATTERN_KEYWORD:
            items.append(p.text)
        elif p.kind == PATTERN_EXACT and p.needle.startswith("sha256:"):
            items += _expanded(p, present, "CRI-O matches names, not image IDs", notes)
        elif p.kind == PATTERN_EXACT:
            items.append(p.needle)
        else:
            items.append(p.text)
            notes.append(f"{p.text!r} ({p.source}): CRI-O does not anchor globs, so it also pins names that "
                         "merely contain the prefix")
    if label_rules:
        notes.append("docker_pinned_image_labels have no CRI-O equivalent; left out")
    body = "# A crio.conf.d drop-in written by pinctl config export --for crio\n[crio.image]\npinned_images = "
    return Export(body + _toml_list(list(dict.fromkeys(items))) + "\n", notes)


def _containerd(policy: Policy, present: Optional[Sequence[str]], label_rules: Sequence[str]) -> Export:
    notes: list[str] = []
    refs: list[str] = []
    for p in policy.patterns:
        if p.kind == PATTERN_EXACT and p.dialect == "pinctl" and not p.needle.startswith("sha256:"):
            refs.append(p.needle)
        else:
            refs += _expanded(p, present, "containerd pins exact references only", notes)
    if label_rules:
        notes.append("docker_pinned_image_labels have no containerd equivalent; left out")
    lines = [
        "# containerd 2.x CRI config (version 3), written by pinctl config export --for containerd.",
        "# Merge the table into /etc/containerd/config.toml; keep your own 'sandbox' entry.",
        "version = 3",
        "",
        "[plugins.'io.containerd.cri.v1.images'.pinned_images]",
    ]
    lines += [f"  {json.dumps(f'pinctl-{n}')} = {json.dumps(ref)}" for n, ref in enumerate(dict.fromkeys(refs), 1)]
    return Export("\n".join(lines) + "\n", notes)


def _cri_dockerd(policy: Policy, present: Optional[Sequence[str]], label_rules: Sequence[str]) -> Export:
    """cri-dockerd (0.4.7+) compares --pinned-images with Docker's names as Docker writes them
    (pins.dockerd): exact names and prefixes go out in that familiar form; what it cannot say
    (keywords, CRI-O's unanchored globs, image IDs) is expanded to the names present now."""
    notes: list[str] = []
    refs: list[str] = []
    for p in policy.patterns:
        if p.dialect == "pinctl" and p.kind == PATTERN_GLOB:
            refs.append(references.familiar(p.needle) + "*")
            if p.text != p.text.lower():
                notes.append(f"{p.text!r} ({p.source}): cri-dockerd compares case-sensitively; written in lower case")
        elif p.dialect == "pinctl" and p.kind == PATTERN_EXACT and not p.needle.startswith("sha256:"):
            refs.append(references.familiar(p.needle))
        else:
            refs += [references.familiar(name) for name in
                     _expanded(p, present, "cri-dockerd takes whole names, repositories and prefixes only", notes)]
    flags = []
    if refs:
        flags.append("--pinned-images=" + ",".join(dict.fromkeys(refs)))
    if label_rules:
        flags.append("--pinned-image-labels=" + ",".join(label_rules))
    if flags:
        notes.append("cri-dockerd reads these flags from 0.4.7 on; before that, serve the kubelet through pinctl "
                     "cri-proxy instead")
    return Export(" ".join(flags) + "\n", notes)

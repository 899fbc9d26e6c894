"""config export: the policy rendered as another runtime's own configuration.

Each runtime expresses less than pinctl: containerd takes exact references only, cri-dockerd
no keywords, CRI-O does not anchor globs. What cannot be said is expanded to the references
present now, and every such compromise is returned as a note for stderr. An image-ID pattern
(pinctl's sha256:<id> or sha256:<prefix>*) is written as the names of the images with that ID
present now; with none present, or --offline, it is refused, never silently dropped: every
runtime matches names only. Each text says, in comments, how to make its runtime read it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence, Union

from pinctl import refs as references
from pinctl.display import counted
from pinctl.errors import UsageError
from pinctl.pins.patterns import PATTERN_EXACT, PATTERN_GLOB, PATTERN_KEYWORD, matches
from pinctl.pins.policy import Policy

if TYPE_CHECKING:
    from pinctl.config.crio import CrioEntry
    from pinctl.pins.patterns import Pattern

# A name present on the node with its image's ID and its record's manifest digest; a bare name
# has neither.
Present = Sequence[Union[str, tuple[str, str], tuple[str, str, str]]]
_ID_PREFIX = "sha256:"
_ID_FIX = "pin the image by name, or run export where the image is"


@dataclass
class Export:
    text: str
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ContainerdTarget:
    """The containerd a containerd export is for, as far as it is known: its config file (the
    containerd_config setting, else containerd's default) and that file's `version` (None: no
    file there), and the daemon's own version (None: not known, and unknown says why)."""

    config_path: str = "/etc/containerd/config.toml"
    config_version: Optional[int] = None
    version: Optional[str] = None
    address: str = ""
    unknown: str = "was not asked (--offline)"
    # The drop-in the config's imports take (config.containerd.dropin_path): its path, and the
    # import as written.
    dropin: Optional[tuple[str, str]] = None

    @property
    def major(self) -> Optional[int]:
        """The daemon's major version ("1.7.24~ds1" -> 1, "v2.1.9" -> 2); None when not known."""
        found = re.match(r"v?(\d+)\.", self.version or "")
        return int(found.group(1)) if found else None


def export(target: str, policy: Policy, present: Optional[Present], label_rules: Sequence[str],
           site: Sequence[CrioEntry] = (), containerd: Optional[ContainerdTarget] = None) -> Export:
    """present: the names on the node now, each with its image's ID and digest ((ref, image_id,
    digest)), for patterns that must be expanded; None when the
    engines were not asked (--offline). site: CRI-O's own effective entries, which a crio
    drop-in written last replaces and so must carry over. containerd: the containerd a
    containerd table is written for; one of 1.x is refused (it has no pinned_images)."""
    containerd = containerd or ContainerdTarget()
    if target == "containerd":
        _refuse_containerd_1(containerd)
    pairs = None if present is None else [_named(p) for p in present]
    names = None if pairs is None else sorted({ref for ref, _, _ in pairs if not ref.startswith(_ID_PREFIX)})
    # Every ID pattern is resolved (or refused) before anything is written.
    by_id = {i: _by_id(p, pairs) for i, p in enumerate(policy.patterns) if _is_id_pattern(p)}
    if target == "crio":
        return _crio(policy, names, label_rules, by_id, site)
    if target == "containerd":
        return _for_containerd(_containerd(policy, names, label_rules, by_id), containerd)
    return _cri_dockerd(policy, names, label_rules, by_id)


def _is_id_pattern(pattern: Pattern) -> bool:
    """pinctl's sha256:<id> and sha256:<hex>* name an image by its ID, which no runtime's own
    configuration matches (they compare names)."""
    return pattern.dialect == "pinctl" and pattern.anchored_start and pattern.needle.startswith(_ID_PREFIX)


def _named(item: Union[str, tuple[str, str], tuple[str, str, str]]) -> tuple[str, str, str]:
    if isinstance(item, str):
        return item, "", ""
    return (item[0], item[1], item[2]) if len(item) == 3 else (item[0], item[1], "")


def _digest_ref(ref: str, digest: str) -> str:
    """repo@digest for a tagged name, which every runtime matches as a name too; "" otherwise."""
    if not digest or "@" in ref or ref.startswith(_ID_PREFIX):
        return ""
    # A colon after the last slash starts the tag (a registry's port never does).
    return (ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref) + "@" + digest


def _by_id(pattern: Pattern, pairs: Optional[list[tuple[str, str, str]]]) -> tuple[str, ...]:
    """The names of the images present whose ID the pattern matches (their refs and digest
    references), or a refusal naming it."""
    if pairs is None:
        raise UsageError(f"{pattern.text!r} ({pattern.source}) names an image by its ID, which the runtimes' "
                         "configurations cannot; --offline lists no images to name it by", _ID_FIX)
    hits = [(ref, digest) for ref, image_id, digest in pairs if image_id and matches(pattern, image_id)]
    found = sorted({name for ref, digest in hits for name in (ref, _digest_ref(ref, digest))
                    if name and not name.startswith(_ID_PREFIX)})
    if not found:
        raise UsageError(f"{pattern.text!r} ({pattern.source}) names an image by its ID, and no image with that "
                         "ID is present here to name it by", _ID_FIX)
    return tuple(found)


def _id_names(p: Pattern, names: tuple[str, ...], runtime: str, notes: list[str]) -> list[str]:
    notes.append(f"{p.text!r} ({p.source}): {runtime} matches names, not image IDs; written as the "
                 f"{counted(len(names), 'name')} of that image present now: {', '.join(names)}")
    return list(names)


def _expanded(pattern: Pattern, present: Optional[Sequence[str]], why: str, notes: list[str]) -> list[str]:
    if present is None:
        notes.append(f"{pattern.text!r} ({pattern.source}): {why}; left out, since --offline lists no images")
        return []
    found = [name for name in present if matches(pattern, name)]
    notes.append(f"{pattern.text!r} ({pattern.source}): {why}; expanded to the {counted(len(found), 'reference')} present now")
    return found


def _crio(policy: Policy, present: Optional[Sequence[str]], label_rules: Sequence[str],
          by_id: dict[int, tuple[str, ...]], site: Sequence[CrioEntry]) -> Export:
    notes: list[str] = []
    items: list[str] = []
    for i, p in enumerate(policy.patterns):
        if i in by_id:
            items += _id_names(p, by_id[i], "CRI-O", notes)
        elif p.dialect == "crio" or p.kind == PATTERN_KEYWORD:
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
    header = [
        "# A crio.conf.d drop-in written by pinctl config export --for crio.",
        "# Write it as the LAST drop-in (e.g. /etc/crio/crio.conf.d/zz-exported.conf), then",
        "# reload CRI-O: systemctl reload crio (or kill -HUP $(pidof crio)). The last file",
        "# that sets pinned_images replaces the lists before it: a later drop-in setting it",
        "# overrides this one, and this one replaces the site's own list, so the site's",
        "# effective items ('# site:') are carried over. Where pinctl runs on the node,",
        "# pinctl sync keeps its own drop-in (zz-pinctl.conf) and reloads CRI-O instead.",
        "[crio.image]",
        "pinned_images = [",
    ]
    seen: set[str] = set()
    lines: list[str] = []
    for text, comment in [(e.text, f"  # site: {_one_line(e.where)}") for e in site] + [(t, "") for t in items]:
        if text not in seen:
            seen.add(text)
            lines.append(f"  {json.dumps(text)},{comment}")
    return Export("\n".join([*header, *lines, "]"]) + "\n", notes)


def _one_line(text: str) -> str:
    # A newline in a path would end the comment and break the TOML.
    return "".join("?" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in text)


def _containerd(policy: Policy, present: Optional[Sequence[str]], label_rules: Sequence[str],
                by_id: dict[int, tuple[str, ...]]) -> Export:
    """The entries of containerd 2.x's pinned_images table (its header: _for_containerd).

    containerd 2.x labels a record when an entry equals its name as a plain string, and its
    CRI names records fully normalised (docker.io/library/x:1), so that is how entries are
    written. None is ever tagless: an entry without a tag pins nothing (containerd issue 13314),
    so a tagless exact pattern goes out with the :latest it means, and a present name that is not
    a whole name:tag is left out with a note."""
    notes: list[str] = []
    refs: list[str] = []
    for i, p in enumerate(policy.patterns):
        if i in by_id:
            refs += _whole_names(p, _id_names(p, by_id[i], "containerd", notes), notes)
        elif p.kind == PATTERN_EXACT and p.dialect == "pinctl" and not p.needle.startswith("sha256:"):
            refs.append(_as_containerd_names_it(p, notes))
            refs += _other_spellings(p, refs[-1], present, notes)
        else:
            refs += _whole_names(p, _expanded(p, present, "containerd pins exact references only", notes), notes)
    if label_rules:
        notes.append("docker_pinned_image_labels have no containerd equivalent; left out")
    lines = [f"  {json.dumps(f'pinctl-{n}')} = {json.dumps(ref)}" for n, ref in enumerate(dict.fromkeys(refs), 1)]
    return Export("\n".join(lines) + "\n" if lines else "", notes)


# What merges the table: the file, and a restart (containerd reads its config at start only).
_RESTART = "Then restart containerd (systemctl restart containerd)."
_ONLY_2X = ("containerd 1.x has no pinned_images and ignores this table: there, pinctl sync writes the pin "
            "labels its CRI reads.")
_SYNC_FIX = "its pins are labels: run pinctl sync, which writes them for the policy; sync --watch keeps them written"


def _refuse_containerd_1(target: ContainerdTarget) -> None:
    """containerd 1.x has no pinned_images, and refuses to start on a version 3 config (1.7.24:
    "unsupported config version `3`"): no table is right for it, so none is written."""
    major = target.major
    if major is not None and major < 2:
        where = f" at {target.address}" if target.address else ""
        raise UsageError(f"containerd {target.version}{where} has no pinned_images, which came with containerd 2.0",
                         _SYNC_FIX)


def _for_containerd(table: Export, target: ContainerdTarget) -> Export:
    """The table under the header its file needs: the version that file is (2 or 3; containerd
    2.x reads the images plugin's pinned_images in both), said to be merged into that file.

    Without the daemon's version, a file that is not version 3 (or none) may be 1.x's: the
    table is written as version 2, which 1.x starts with and ignores, and that is said on stderr
    too. Written as version 3 it would stop 1.x from starting."""
    notes = list(table.notes)
    path, found = target.config_path, target.config_version
    known_2x = (target.major or 0) >= 2 or (found or 0) >= 3
    # 2 or 3 as the file is (4 for containerd 2.3 and later's own); 3 when there is no file.
    version = found if known_2x and found and found >= 3 else 3 if known_2x and found != 2 else 2
    name = f"containerd {target.version}" if target.version else "containerd 2.x" if known_2x else "containerd"
    if known_2x and target.dropin:
        return _dropin(table, target, name, notes)
    if found is None:
        into = f"Write the table into {path} (there is none yet) with a 'sandbox' entry for your pause image."
    elif found == 2:
        into = (f"Merge the table into {path}, which is version 2: containerd 2.x reads the table there "
                "too, and its sandbox_image stays the 'sandbox' entry.")
    elif found < 2:
        into = (f"{path} is version {found}: convert it first (containerd --config {path} config migrate "
                "prints it converted; check its 'sandbox' entry), then merge the table into it under the "
                "version it then says.")
    else:
        into = f"Merge the table into {path}; keep its 'sandbox' entry."
    header = _wrapped(f"{name} CRI config (version {version}), written by pinctl config export --for "
                      f"containerd. {into} {_RESTART}")
    if not known_2x:
        header += _wrapped(_ONLY_2X)
        notes.append(f"containerd's version {target.unknown}, and {_file_says(target)}: the table pins on "
                     "containerd 2.x only; on 1.x run pinctl sync, which writes the pin labels its CRI reads")
    lines = [*(f"# {line}" for line in header), f"version = {version}", "",
             "[plugins.'io.containerd.cri.v1.images'.pinned_images]"]
    return Export("\n".join(lines) + "\n" + table.text, notes)


def _dropin(table: Export, target: ContainerdTarget, name: str, notes: list[str]) -> Export:
    """The table as a file of its own for the directory the config imports. It declares the main
    file's version: containerd 2.0 to 2.2 merge the files first and move a version 2 file's
    sandbox_image only when the last version declared is below 3, so a version 3 drop-in under
    a version 2 file would lose the pause image's pin."""
    assert target.dropin is not None
    file, imported = target.dropin
    version = max(target.config_version or 2, 2)
    header = _wrapped(f"{name} CRI config (version {version}), a drop-in written by pinctl config export "
                      f"--for containerd. Save it as {file}: {target.config_path} imports {imported!r}. "
                      f"containerd merges pinned_images key by key, so the entries of the other files stay. "
                      f"containerd reads pinned_images at start only: {_RESTART}")
    notes.append(f"a drop-in for {target.config_path}'s imports: save it as {file}, then restart containerd "
                 "(it reads pinned_images at start only)")
    lines = [*(f"# {line}" for line in header), f"version = {version}", "",
             "[plugins.'io.containerd.cri.v1.images'.pinned_images]"]
    return Export("\n".join(lines) + "\n" + table.text, notes)


def _file_says(target: ContainerdTarget) -> str:
    if target.config_version is None:
        return f"there is no {target.config_path} to tell"
    return f"{target.config_path} is version {target.config_version}, which containerd 1.x reads too"


def _wrapped(text: str, width: int = 78) -> list[str]:
    """A comment's text in lines that fit a terminal beside the '# '."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _as_containerd_names_it(pattern: Pattern, notes: list[str]) -> str:
    """An exact pattern's normalised name (a tag added when it had none), as the CRI stores it:
    a pull of name:tag@digest is stored as name@digest, which is what must be written."""
    name, _, digest = pattern.needle.partition("@")
    if not digest:
        return name
    # The needle is normalised, so a colon after the last slash starts its tag (a port never does).
    repository = name[: name.rindex(":")] if ":" in name.rsplit("/", 1)[-1] else name
    notes.append(f"{pattern.text!r} ({pattern.source}): containerd names a pull by tag and digest by its digest "
                 f"alone; written as {repository}@{digest}")
    return f"{repository}@{digest}"


def _other_spellings(pattern: Pattern, written: str, present: Optional[Sequence[str]], notes: list[str]) -> list[str]:
    """Names present that the exact pattern covers in another case (a tag such as V2): pinctl
    matches case-insensitively, containerd compares exactly, so they are written too."""
    others = [name for name in present or () if name != written and matches(pattern, name)]
    if not others:
        return []
    notes.append(f"{pattern.text!r} ({pattern.source}): containerd compares names case-sensitively and pinctl "
                 f"does not; also written as {', '.join(others)}")
    return _whole_names(pattern, others, notes)


def _whole_names(pattern: Pattern, names: Sequence[str], notes: list[str]) -> list[str]:
    """The names an entry can match: fully normalised, with a tag or digest. The others (records
    named short or tagless, say by ctr) are left out, and said."""
    whole = [name for name in names if _is_whole(name)]
    left_out = [name for name in names if name not in whole]
    if left_out:
        notes.append(f"{pattern.text!r} ({pattern.source}): left out {', '.join(left_out)}: containerd matches an "
                     "entry only as a full name:tag (a tagless entry pins nothing, containerd issue 13314)")
    return whole


def _is_whole(name: str) -> bool:
    try:
        return references.normalize(name) == name
    except UsageError:
        return False


def _cri_dockerd(policy: Policy, present: Optional[Sequence[str]], label_rules: Sequence[str],
                 by_id: dict[int, tuple[str, ...]]) -> Export:
    """cri-dockerd (0.4.7+) compares --pinned-images with Docker's names as Docker writes them
    (pins.dockerd): exact names and prefixes go out in that familiar form; what it cannot say
    (keywords, CRI-O's unanchored globs, image IDs) is expanded to the names present now."""
    notes: list[str] = []
    refs: list[str] = []
    for i, p in enumerate(policy.patterns):
        if i in by_id:
            refs += [references.familiar(name) for name in _id_names(p, by_id[i], "cri-dockerd", notes)]
        elif p.dialect == "pinctl" and p.kind == PATTERN_GLOB:
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
        notes.append("cri-dockerd reads these flags from 0.4.7 on: restart cri-dockerd with them added to its "
                     "command line; before 0.4.7, serve the kubelet through pinctl cri-proxy instead")
    return Export(" ".join(flags) + "\n", notes)

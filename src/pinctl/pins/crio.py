"""CRI-O's pins as CRI-O v1.34.0 works them out, and the entries pinctl keeps in its own drop-in.

CRI-O has no image labels. It pins an image when one of its names (repo tags and repo digests,
never its ID) matches an item of the effective ``pinned_images`` (internal/storage/image.go,
``FilterPinnedImage`` over ``image.Names``), or is its ``pause_image``, which it appends to that
list (``GetImageService``, and again on every SIGHUP). Pure: the images come from the CRI's
ListImages and the configuration from ``pinctl.config.crio``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Optional, Sequence

from pinctl import refs
from pinctl.errors import PatternError, UsageError
from pinctl.model import (
    REASON_CRIO_CONFIG,
    REASON_CRIO_PIN,
    REASON_SANDBOX,
    SOURCE_CRIO,
    Descriptor,
    ImageRow,
    Reason,
)
from pinctl.pins.patterns import PATTERN_EXACT, PATTERN_GLOB, PATTERN_KEYWORD, Pattern, matches, parse_pattern

if TYPE_CHECKING:
    from pinctl.backends.cri import CriImage
    from pinctl.config.crio import CrioConfig, CrioEntry, Owner
    from pinctl.pins.policy import Policy

OWNER_SITE: Final = "site"
OWNER_PIN: Final = "pin"
OWNER_SYNC: Final = "sync"


def names_of(image: CriImage) -> list[str]:
    """The names CRI-O holds for an image, which are what it matches pinned_images against.

    Its CRI lists more digest names than it holds: for every tagged repository it adds
    ``repo@<image digest>`` (``makeRepoDigests``), though only a pull by digest stores such a
    name. So a digest name counts only when no tag of its repository is listed: then it can only
    have come from a pull by digest. (An image pulled by tag and by digest from one repository
    looks the same as one pulled by tag alone; pinctl takes it as the latter, the common case.)
    """
    tagged = {_repository(tag) for tag in image.repo_tags}
    held = [name for name in image.repo_digests if name.split("@", 1)[0] not in tagged]
    return list(dict.fromkeys((*image.repo_tags, *held)))


def _repository(tag: str) -> str:
    name, _, last = tag.rpartition(":")
    return name if name and "/" not in last else tag


def compile_item(text: str) -> Optional[Pattern]:
    """One pinned_images item as CRI-O compiles it; None for one that matches no name (an empty
    or blank item: CRI-O's exact regexp ^$ or ^ $ never matches a name)."""
    if not text.strip():
        return None
    try:
        return parse_pattern(text, "crio", "")
    except PatternError:
        return None  # a lone *: CRI-O refuses to start with it, so it pins nothing here either


def item_matches(text: str, names: Sequence[str]) -> bool:
    pattern = compile_item(text)
    return pattern is not None and any(matches(pattern, name) for name in names)


def pause_matches(pause_image: str, names: Sequence[str]) -> bool:
    """CRI-O appends pause_image to pinned_images as it is written: an exact, case-insensitive item."""
    return bool(pause_image) and item_matches(pause_image, names)


def reasons_for(names: Sequence[str], config: CrioConfig) -> list[Reason]:
    """Why CRI-O keeps an image with these names: each effective item that matches, and the pause image."""
    reasons = [Reason(REASON_CRIO_CONFIG if entry.owner == OWNER_SITE else REASON_CRIO_PIN, entry.text, entry.where)
               for entry in config.pinned_images if item_matches(entry.text, names)]
    if pause_matches(config.pause_image, names):
        reasons.append(Reason(REASON_SANDBOX, config.pause_image, config.pause_where))
    return reasons


def rows_for(images: Sequence[CriImage], config: CrioConfig) -> list[ImageRow]:
    """One row per name of each image (its ID when it has none), pinned as CRI-O's configuration
    says, with what the CRI says now in cri_pinned."""
    rows: list[ImageRow] = []
    for image in images:
        names = names_of(image)
        reasons = reasons_for(names, config)
        digest = next((name.split("@", 1)[1] for name in image.repo_digests if "@" in name), image.id)
        target = Descriptor("", digest, image.size)
        for name in names or [image.id]:
            rows.append(ImageRow(namespace=None, ref=name, image_id=image.id, target=target, size=image.size,
                                 labels={}, pinned=bool(reasons), reasons=list(reasons), source=SOURCE_CRIO,
                                 cri_pinned=image.pinned))
    return rows


# -- pinctl's own entries ---------------------------------------------------------------------


@dataclass
class OwnEntries:
    """pinctl's items in its drop-in, in order, each with who put it there (pin or sync)."""

    items: list[tuple[str, Owner]] = field(default_factory=list)

    @classmethod
    def of(cls, config: CrioConfig) -> OwnEntries:
        return cls([(entry.text, entry.owner) for entry in config.own_entries])

    def texts(self, owner: Optional[str] = None) -> list[str]:
        return [text for text, who in self.items if owner is None or who == owner]

    def add(self, text: str, owner: Owner) -> bool:
        """Add an item unless pinctl already has it (any owner, compared as CRI-O does: case aside)."""
        if any(text.lower() == have.lower() for have, _ in self.items):
            return False
        self.items.append((text, owner))
        return True

    def remove(self, wanted: Sequence[str], owner: Owner) -> list[str]:
        """Drop this owner's items equal (case aside) to any of wanted; returns those dropped."""
        lowered = {text.lower() for text in wanted}
        dropped = [text for text, who in self.items if who == owner and text.lower() in lowered]
        self.items = [(text, who) for text, who in self.items if not (who == owner and text.lower() in lowered)]
        return dropped

    def replace(self, owner: Owner, texts: Sequence[str]) -> None:
        """Set this owner's items to texts (the others keep their place)."""
        kept = [(text, who) for text, who in self.items if who != owner]
        self.items = kept
        for text in texts:
            self.add(text, owner)


def pin_items_for(image_names: Sequence[str]) -> list[str]:
    """What `pin` writes for an image asked for by ID: its digest names, which stay with the
    image when a tag moves, else its tags."""
    digests = [name for name in image_names if "@" in name]
    return digests or list(image_names)


@dataclass
class PolicyItems:
    """The policy as CRI-O pinned_images items, what could not be said, and what CRI-O reads otherwise."""

    items: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def policy_items(policy: Policy, images: Sequence[CriImage]) -> PolicyItems:
    """Each pattern in CRI-O's dialect: crio patterns as written, pinctl's exact names normalised
    (CRI-O's names are), keywords as they are, pinctl's prefix globs as CRI-O globs (which CRI-O
    does not anchor: said when that pins an image pinctl's would not), image IDs as the names of
    the image with that ID. An ID pattern no image present has is refused: CRI-O cannot say it."""
    out = PolicyItems()
    for pattern in policy.patterns:
        where = f"{pattern.text!r} ({pattern.source})"
        if pattern.dialect == "crio" or pattern.kind == PATTERN_KEYWORD:
            out.items.append(pattern.text)
        elif pattern.kind == PATTERN_EXACT and pattern.needle.startswith("sha256:"):
            found = _names_with_id(pattern.needle, images)
            if found:
                out.items += found
            else:
                out.refused.append(f"{where}: CRI-O matches names, not image IDs, and no image here has this ID; "
                                   "pin the image by name")
        elif pattern.kind == PATTERN_EXACT:
            out.items.append(pattern.needle)
        elif pattern.kind == PATTERN_GLOB and pattern.needle.startswith("sha256:"):
            found = [name for image in images if _id_of(image).startswith(pattern.needle)
                     for name in pin_items_for(names_of(image))]
            if found:
                out.items += found
            else:
                out.refused.append(f"{where}: CRI-O matches names, not image IDs, and no image here has such an "
                                   "ID; pin the image by name")
        else:
            out.items.append(pattern.needle + "*")
            extra = _wider(pattern, images)
            if extra:
                out.notes.append(f"{where}: CRI-O does not anchor globs, so it also pins {', '.join(extra)}")
    out.items = list(dict.fromkeys(out.items))
    return out


def _id_of(image: CriImage) -> str:
    return image.id if image.id.startswith("sha256:") else f"sha256:{image.id}"


def _names_with_id(full_id: str, images: Sequence[CriImage]) -> list[str]:
    return [name for image in images if _id_of(image) == full_id for name in pin_items_for(names_of(image))]


def _wider(pattern: Pattern, images: Sequence[CriImage]) -> list[str]:
    crio = parse_pattern(pattern.text, "crio", pattern.source)
    return sorted({name for image in images for name in names_of(image)
                   if matches(crio, name) and not matches(pattern, name)})


def normalised_name(text: str) -> str:
    """A name as CRI-O stores it (fully qualified), or the text itself when it is no reference."""
    try:
        return refs.normalize(text)
    except UsageError:
        return text

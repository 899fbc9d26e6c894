"""What cri-dockerd (0.4.7 and later) pins by its own flags, in its semantics. No I/O.

--pinned-images entries are compared with an image's Docker names exactly as Docker writes
them, with no normalisation (`nginx:1.27`, not its fully qualified form): an entry with a tag or
digest must equal one of the image's RepoTags or RepoDigests; a bare repository pins every tag
and digest of it; a trailing `*` is a plain string prefix of any of them. --pinned-image-labels
entries, `key` or `key=value`, are matched against the labels of the image's config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence


@dataclass(frozen=True)
class Selectors:
    """cri-dockerd's --pinned-images and --pinned-image-labels, parsed as it parses them."""

    exact: frozenset[str]
    repositories: frozenset[str]
    prefixes: tuple[str, ...]
    labels: tuple[tuple[str, Optional[str]], ...]

    @classmethod
    def parse(cls, images: Sequence[str], labels: Sequence[str] = ()) -> Selectors:
        exact: set[str] = set()
        repositories: set[str] = set()
        prefixes: list[str] = []
        for entry in (item.strip() for item in images):
            if not entry:
                continue
            if entry.endswith("*"):
                prefixes.append(entry[:-1])
            elif has_tag_or_digest(entry):
                exact.add(entry)
            else:
                repositories.add(entry)
        parsed_labels = []
        for entry in (item.strip() for item in labels):
            if entry:
                key, sep, value = entry.partition("=")
                parsed_labels.append((key, value if sep else None))
        return cls(frozenset(exact), frozenset(repositories), tuple(prefixes), tuple(parsed_labels))

    def __bool__(self) -> bool:
        return bool(self.exact or self.repositories or self.prefixes or self.labels)

    def match(self, repo_tags: Sequence[str], repo_digests: Sequence[str],
              config_labels: Mapping[str, str]) -> Optional[str]:
        """The flag entry that pins an image with these Docker names and config labels; None when none does."""
        for key, value in self.labels:
            if key in config_labels and (value is None or config_labels[key] == value):
                return f"--pinned-image-labels {key if value is None else f'{key}={value}'}"
        for name in (*repo_tags, *repo_digests):
            if name in self.exact:
                return f"--pinned-images {name}"
            if repository(name) in self.repositories:
                return f"--pinned-images {repository(name)}"
            for prefix in self.prefixes:
                if name.startswith(prefix):
                    return f"--pinned-images {prefix}*"
        return None


def has_tag_or_digest(name: str) -> bool:
    """A registry's port (`localhost:5000/app`) is no tag: only the part after the last slash counts."""
    return "@" in name or ":" in name[name.rfind("/") + 1:]


def repository(name: str) -> str:
    """A Docker name without its tag or digest."""
    name = name.split("@", 1)[0]
    start = name.rfind("/") + 1
    colon = name.rfind(":", start)
    return name[:colon] if colon >= 0 else name

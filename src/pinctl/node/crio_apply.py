"""Putting pinctl's items into CRI-O, and hearing from its CRI that it took them.

A change is judged by what CRI-O's CRI says, not by pinctl's file: the drop-in is written when it
differs from what it must say, CRI-O is reloaded when it was written or when the CRI disagrees
with what the files say (a write whose reload never came, a site's edit not yet read), and then
the CRI is asked until it agrees. CRI-O's log says whether the reload was done or refused (and
why); without a log to read, the CRI's agreement is the only word.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Protocol, Sequence

from pinctl.config import crio as crio_config
from pinctl.errors import PinctlError
from pinctl.node import crio_process
from pinctl.pins import crio as crio_pins

if TYPE_CHECKING:
    from pinctl.backends.cri import CriImage
    from pinctl.config.crio import CrioConfig
    from pinctl.node.crio_process import CrioProcess

# CRI-O applies a SIGHUP in a fraction of a second; the wait for the CRI to say so is generous,
# since a busy node must not turn a slow reload into a failed pin.
READ_BACK_S = 30.0
READ_BACK_POLL_S = 0.1


class ReloadTarget(Protocol):
    """What apply needs of a CRI-O node (crio.CrioNode is one): the process to signal, its files
    and its CRI's images, each read afresh."""

    def writable(self) -> CrioProcess: ...

    def config(self) -> CrioConfig: ...

    def images(self) -> list[CriImage]: ...


@dataclass
class Applied:
    """One change as CRI-O took it: the CRI's pins before and after (image ID -> pinned; None: the
    image went meanwhile), what the files say now, and why the two differ when CRI-O did not apply
    them (a refused reload, a write that failed, no confirmation in time)."""

    before: dict[str, bool]
    after: dict[str, Optional[bool]]
    expected: dict[str, bool]
    config: CrioConfig
    failure: Optional[str] = None
    reloaded: bool = False


def expected_pins(images: Sequence[CriImage], config: CrioConfig) -> dict[str, bool]:
    """Whether CRI-O pins each image by the files as they are (its effective list, its pause image)."""
    return {image.id: bool(crio_pins.reasons_for(crio_pins.names_of(image), config)) for image in images}


def planned_pins(images: Sequence[CriImage], config: CrioConfig, own: crio_pins.OwnEntries) -> dict[str, bool]:
    """Whether CRI-O would pin each image once pinctl's drop-in holds own's items: its list is the
    effective one unless a later drop-in sets pinned_images."""
    texts = ([entry.text for entry in config.pinned_images] if config.overriding
             else [entry.text for entry in config.site_entries] + own.texts())
    return {image.id: any(crio_pins.item_matches(text, crio_pins.names_of(image)) for text in texts)
            or crio_pins.pause_matches(config.pause_image, crio_pins.names_of(image)) for image in images}


def dropin_stale(config: CrioConfig, own: crio_pins.OwnEntries) -> bool:
    """Whether pinctl's drop-in differs from what it must say now: its own items changed, or a
    site file did (the drop-in sorts last, so a site item counts only once it is carried over)."""
    if not own.items and not os.path.exists(config.dropin_path):
        return False  # nothing of pinctl's: the site's files are effective as they are
    try:
        with open(config.dropin_path, encoding="utf-8") as handle:
            current: Optional[str] = handle.read()
    except OSError:
        current = None
    return current != crio_config.render_dropin(config.site_entries, own.items)


def apply(crio: ReloadTarget, config: CrioConfig, own: crio_pins.OwnEntries, images: Sequence[CriImage],
          dry_run: bool) -> Applied:
    """Write own's items (when they or the site's changed), reload CRI-O when it was written or the
    CRI disagrees with the files, and read the CRI back. The caller holds the writers' lock and read
    config and images under it."""
    before = {image.id: image.pinned for image in images}
    if dry_run:
        planned = planned_pins(images, config, own)
        return Applied(before, dict(planned), planned, config)
    process = crio.writable()
    stale = dropin_stale(config, own)
    try:
        crio_config.remove_stale_temps(config.dropin_dir)
        if stale:
            crio_config.write_dropin(config.dropin_path, crio_config.render_dropin(config.site_entries, own.items))
        now = crio.config() if stale else config
    except PinctlError as err:
        return Applied(before, dict(before), before, config, failure=str(err))
    expected = expected_pins(images, now)
    if not stale and all(before[key] == value for key, value in expected.items()):
        return Applied(before, dict(before), expected, now)  # written and applied already: nothing to do
    after, failure = _reload(crio, process, images, before, expected, wrote=stale, dropin=now.dropin_path)
    return Applied(before, after, expected, now, failure, reloaded=True)


def _reload(crio: ReloadTarget, process: CrioProcess, images: Sequence[CriImage], before: dict[str, bool],
            expected: dict[str, bool], wrote: bool, dropin: str) -> tuple[dict[str, Optional[bool]], Optional[str]]:
    """SIGHUP, then the CRI asked until it agrees with the files, CRI-O's log says how the reload
    ended, or READ_BACK_S passes; the CRI's last word and, when CRI-O did not apply the files, why."""
    log = process.log
    mark, signalled_at = log.mark(), time.time()
    try:
        crio_process.signal_reload(process)
    except PinctlError as err:
        return dict(before), f"{'written to ' + dropin + ', but ' if wrote else ''}{err}"
    deadline = time.monotonic() + READ_BACK_S
    ids = [image.id for image in images]
    while True:
        text = log.since(mark, signalled_at)
        outcome = crio_process.reload_outcome(text) if text else None
        try:
            listed = {image.id: image.pinned for image in crio.images()}
        except PinctlError as err:
            where = f"written to {dropin} and " if wrote else ""
            return dict(before), f"{where}CRI-O was told to reload, but its CRI did not answer: {err}"
        said: dict[str, Optional[bool]] = {key: listed.get(key) for key in ids}
        if outcome is not None and not outcome.done:
            where = f"written to {dropin}, but " if wrote else ""
            return said, f"{where}CRI-O refused to reload its configuration: {outcome.reason}"
        agree = all(said[key] in (value, None) for key, value in expected.items())
        moved = any(said[key] is not None and said[key] != before[key] for key in ids)
        if outcome is not None or (agree and (text is None or moved)):
            return said, None  # done: what still disagrees is each image's own failure
        if time.monotonic() >= deadline:
            if agree:
                return said, None  # a log too quiet to say "completed", and nothing refused
            heard = (f"its log ({log.describe()}) says nothing of it" if text is not None
                     else "see its log: journalctl -u crio")
            return said, f"CRI-O did not confirm the reload within {READ_BACK_S:g} s ({heard})"
        time.sleep(READ_BACK_POLL_S)

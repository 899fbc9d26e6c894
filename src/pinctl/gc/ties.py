"""Ties in the kubelet's eviction order: which images it ranks equal, and what a tie its
threshold step stops inside can free.

``imagesInEvictionOrder`` fills its list by ranging over the kubelet's image records, a Go map
whose iteration order is random, and sorts it with ``sort.Sort`` by lastUsed, then
firstDetected. Images equal on both therefore come in an order that differs from one kubelet
(and one pass) to the next. The maximum-age step deletes a whole tie or none of it, and so does
a threshold step that stops before or after it; only a threshold step that stops inside a tie
makes the outcome a matter of chance. ``freeSpace`` deletes until the bytes it freed reach its
target, so with the bytes still needed when the walk reaches the tie, the possible outcomes are
bounded by the tie's sizes alone: taking the largest first deletes the fewest, the smallest
first the most, and the last deletion overshoots the need by less than the largest size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Optional

from pinctl.gc.records import Fate, OrderEntry, TieGroup


def tie_groups(order: Sequence[OrderEntry], amount_to_free: Optional[int]) -> tuple[TieGroup, ...]:
    """Every run of two or more neighbours the kubelet ranks equal, with what each can lose.

    ``amount_to_free``: the threshold step's target (None when it does not run, or has no
    target, as in ``DeleteUnusedImages``).
    """
    groups: list[TieGroup] = []
    freed_before = 0  # by the threshold step, before the run at hand
    for run in _runs(order):
        if len(run) > 1:
            need = None if amount_to_free is None else amount_to_free - freed_before
            groups.append(_group(len(groups) + 1, run, need))
        for entry in run:
            if entry.fate is Fate.DELETED_SPACE:
                freed_before += entry.image.size
    return tuple(groups)


def _runs(order: Sequence[OrderEntry]) -> Iterator[list[OrderEntry]]:
    run: list[OrderEntry] = []
    last = None  # the run's rank, worked out once per entry
    for entry in order:
        rank = entry.image.kubelet_rank
        if run and rank != last:
            yield run
            run = []
        run.append(entry)
        last = rank
    if run:
        yield run


def _group(number: int, run: Sequence[OrderEntry], need: Optional[int]) -> TieGroup:
    sizes = [entry.image.size for entry in run]
    deleted = [entry.image.size for entry in run if entry.fate.deleted]
    fewest, most, freed_min, freed_max = len(deleted), len(deleted), sum(deleted), sum(deleted)
    walked = all(entry.fate in (Fate.DELETED_SPACE, Fate.NOT_REACHED, Fate.REFUSED_SPACE) for entry in run)
    # A member the runtime refuses to delete frees nothing, whenever the walk tries it.
    freeable = [entry.image.size for entry in run if entry.refused_because is None]
    straddled = False
    if walked and need is not None and 0 < need <= sum(freeable):
        fewest, most, freed_min, freed_max = stop_range(freeable, need)
        # Else every order deletes the whole tie; but whether the walk tries a refused member
        # before it stops is chance too.
        straddled = fewest < len(freeable) or len(freeable) < len(run)
    return TieGroup(
        number=number,
        positions=tuple(entry.position for entry in run),
        image_ids=tuple(entry.image.id for entry in run),
        total_bytes=sum(sizes),
        straddled=straddled,
        deleted_min=fewest,
        deleted_max=most,
        freed_min=freed_min,
        freed_max=freed_max,
    )


def stop_range(sizes: Sequence[int], need: int) -> tuple[int, int, int, int]:
    """Over every order of ``sizes``, a walk that deletes until it has freed ``need`` (which the
    sizes reach): the fewest and most deletions, and bounds on the bytes freed."""
    ascending = sorted(sizes)
    largest_first = list(accumulate(reversed(ascending)))
    smallest_first = list(accumulate(ascending))
    fewest = next(count for count, total in enumerate(largest_first, start=1) if total >= need)
    # The most: as many of the smallest as stay short of the need, then one more.
    most = min(len(ascending), 1 + sum(1 for total in smallest_first if total < need))
    freed_min = max(need, smallest_first[fewest - 1])
    freed_max = min(need - 1 + ascending[-1], largest_first[most - 1])
    return fewest, most, freed_min, freed_max

"""The columns of `pinctl ls`, each declared once: its JSON key and value, its table header and
cell, in which views it shows. The table, `-o wide`, the JSON envelope and the contract test all
read LS_COLUMNS, so a new column is one entry here (and a line in docs/json.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional

from pinctl import refs
from pinctl.display import human_size
from pinctl.model import SOURCE_CRIO, ImageRow
from pinctl.render.cells import CRIO_DRIFT_BRIEF, CRIO_DRIFT_TEXT, DRIFT_BRIEF, DRIFT_TEXT, abbreviate, why, why_brief
from pinctl.render.table import give_way

# table: the default view; wide: -o wide; a column may show in both, one, or neither (JSON only).
View = Literal["table", "wide"]
# A column shown only when its switch is given: ls --drift, ls --cri.
Switch = Literal["drift", "cri"]


@dataclass(frozen=True)
class Cell:
    """How a table cell is being drawn: full values (-o wide), and how a terminal shortens them."""

    wide: bool
    ellipsis: str  # set when the table must fit a terminal: sha256: references are then shortened


@dataclass(frozen=True)
class Column:
    json_key: Optional[str]  # None: table only
    header: Optional[str]  # None: JSON only
    value: Callable[[ImageRow], Any] = lambda row: None  # the JSON value
    text: Callable[[ImageRow, Cell], str] = lambda row, cell: ""  # the table cell
    views: frozenset[View] = frozenset(("table", "wide"))
    switch: Optional[Switch] = None
    brief: Optional[Callable[[ImageRow], str]] = None  # a shorter cell for a narrow terminal (LS_FIT says when)
    highlight: Optional[dict[str, str]] = None  # cell text -> rich style

    def shown(self, wide: bool, switches: frozenset[Switch]) -> bool:
        if self.header is None or (self.switch is not None and self.switch not in switches):
            return False
        return ("wide" if wide else "table") in self.views


_YES_NO = {True: "yes", False: "no", None: "-"}


def _yes(value: Optional[bool]) -> str:
    return _YES_NO[value]


def _ref(row: ImageRow, cell: Cell) -> str:
    return abbreviate(row.ref, cell.ellipsis) if cell.ellipsis and not cell.wide else row.ref


def _labels(row: ImageRow, cell: Cell) -> str:
    merged = {**(row.config_labels or {}), **row.labels}
    return ",".join(f"{key}={value}" for key, value in sorted(merged.items())) or "-"


def _why(row: ImageRow, cell: Cell) -> str:
    return why(row, cell.wide)


def _drift(row: ImageRow, cell: Cell) -> str:
    if row.drift and row.source == SOURCE_CRIO:
        return CRIO_DRIFT_TEXT[row.drift]
    return DRIFT_TEXT[row.drift] if row.drift else "-"


def _drift_brief(row: ImageRow) -> str:
    if row.drift and row.source == SOURCE_CRIO:
        return CRIO_DRIFT_BRIEF[row.drift]
    return DRIFT_BRIEF[row.drift] if row.drift else "-"


GREEN_YES = {"yes": "green"}
TABLE_ONLY: frozenset[View] = frozenset(("table",))
WIDE_ONLY: frozenset[View] = frozenset(("wide",))
NOWHERE: frozenset[View] = frozenset()

LS_COLUMNS: tuple[Column, ...] = (
    Column("namespace", "NAMESPACE", lambda r: r.namespace,
           lambda r, c: r.namespace or ("cri-o" if r.source == SOURCE_CRIO else "docker")),
    Column("ref", "REF", lambda r: r.ref, _ref),
    Column("id", "IMAGE ID", lambda r: r.engine_id,
           lambda r, c: (r.engine_id or "<none>") if c.wide else refs.short_id(r.engine_id)),
    Column("id_kind", None, lambda r: r.id_kind),
    Column("config_digest", None, lambda r: r.image_id),
    Column("digest", "DIGEST", lambda r: r.digest, lambda r, c: r.digest, views=WIDE_ONLY),
    Column("size", "SIZE", lambda r: r.size, lambda r, c: _human(r.size)),
    Column("pinned", "PINNED", lambda r: r.pinned, lambda r, c: _yes(r.pinned), highlight=GREEN_YES),
    Column("cri_pinned", "CRI PINNED", lambda r: r.cri_pinned, lambda r, c: _yes(r.cri_pinned), switch="cri",
           highlight=GREEN_YES),
    Column("drift", "DRIFT", lambda r: r.drift, _drift, switch="drift", brief=_drift_brief),
    Column("reasons", "WHY", lambda r: [reason.as_dict() for reason in r.reasons], _why, brief=why_brief),
    Column("labels", "LABELS", lambda r: dict(r.labels), _labels, views=WIDE_ONLY),
    Column("source", None, lambda r: r.source),
    Column("config_labels", None, lambda r: r.config_labels),
)


# How the table gives way on a terminal narrower than it (render/table.py, give_way): NAMESPACE
# folds into a heading, DRIFT takes its brief form, WHY wraps, IMAGE ID then SIZE leave (-o wide
# and JSON keep them), WHY goes on under its row; REF is never shortened: its row folds.
# WHY's brief form is for pipes (PIPE_ROW), never taken on a terminal, where WHY wraps.
LS_FIT = give_way("REF", "WHY", fold=["NAMESPACE"], brief=["DRIFT"], drop=["IMAGE ID", "SIZE"])
# Into a pipe a row whose WHY would take it to this many columns takes WHY's brief form.
PIPE_ROW = 120


def _human(size: int) -> str:
    return human_size(size)


def json_keys() -> list[str]:
    return sorted(column.json_key for column in LS_COLUMNS if column.json_key)

"""Terminal tables that fit the window, drawn with rich.

Each table states the order in which its columns give way when it is wider than the window
(Fit.steps): a column that says the same on every row folds into a heading line above the
table; a column takes its brief form; a column narrows to a floor, shortening its cells by
its shape (a sentence wrapped onto more lines, a path shortened in its middle, other text cut
with an ellipsis); a figure leaves the table. Steps run in order until the table fits, and each
takes only what is missing. A column that is empty on every row (Fit.drop_empty) takes no
space at all. A wrapped last column gets whatever width is left; with less than ALIGN_MIN
cells, or when it would take half as many lines again or break inside a word, it continues on
full-width lines indented by HANG under its row, keeping room on its row for a one-word cell
("sandbox").

The table's name column (Fit.name: an image reference, a node) is never shortened. When the
rest of the row leaves it too little room even so, the last column leaves the row lines (each
row's goes wholly under it, Layout.under), and then the rows whose names do not fit fold: the
name on a line of its own, the row's other cells on the line under it (Layout.folded). A name
is cut only when it alone is wider than the window, and then into a pattern that matches no
other name of the table (shape.NameCuts). Pipes and files never come here: they get plain
columns with every value whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Mapping, Optional, Sequence, TextIO

from pinctl.render import shape

if TYPE_CHECKING:
    from rich.text import Text

Shape = Literal["wrap", "path", "cut", "fixed", "name"]
GAP = 2  # cells between columns on a terminal; pipes keep three spaces (scripts split on them)
HANG = 4  # indent of a narrow last column's continuation lines
ALIGN_MIN = 24  # a last column at least this wide continues under itself
TOKEN_CAP = 32  # a wrapped column need not be wider than this to keep its words whole
SQUEEZE_MIN = 8  # past every step, shaped columns narrow to this before a line may overflow
WORD_CAP = 12  # a hanging last column keeps room on its row for one-word cells up to this wide
Notes = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class Give:
    """One step of a table's give-way order."""

    column: str
    floor: int = 0  # the narrowest this step takes the column (never below its header)
    fold: bool = False  # leave the table for a heading line when every row says the same
    brief: bool = False  # take the column's brief cells
    drop: bool = False  # leave the column out (a figure -o wide shows), so that names stay whole


@dataclass(frozen=True)
class Fit:
    """How a table gives way: each column's shape (fixed when not named) and the steps, in order."""

    shapes: Mapping[str, Shape] = field(default_factory=dict)
    steps: tuple[Give, ...] = ()
    least: Mapping[str, int] = field(default_factory=dict)  # never narrower, past every step
    drop_empty: tuple[str, ...] = ()  # left out when no row has anything in it
    name: Optional[str] = None  # never shortened: its rows fold instead (the module's docstring)


NO_FIT = Fit()


@dataclass
class Layout:
    """What a terminal shows of a table: the columns kept, their widths, the folded headings."""

    columns: list[int]
    widths: dict[int, int]
    rows: list[list[str]]
    headings: list[str]
    hang: bool = False  # the last column goes on at HANG under its row, not under itself
    name: Optional[int] = None  # the name column, whose wide cells fold their rows
    folded: set[int] = field(default_factory=set)  # rows whose name has a line of its own
    fold_all: bool = False  # every row folds: the name column leaves, the rest is indented by HANG
    under: Optional[int] = None  # the last column, left the row lines: wholly under each row at HANG

    @property
    def indent(self) -> int:
        """Where the lines a row goes on in start: under a folded row's indented cells, further in."""
        return HANG * (2 if self.fold_all else 1)

    @property
    def last(self) -> int:
        return self.columns[-1]


def lay_out(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, fit: Fit,
            brief: Optional[Mapping[str, Sequence[str]]] = None, ellipsis: str = "…") -> Layout:
    """Columns and widths within width, by fit's steps; see the module's docstring."""
    table = [list(row) for row in rows]
    natural = {i: max([shape.cells(h), *(shape.cells(r[i]) for r in table)]) for i, h in enumerate(headers)}
    layout = Layout(list(range(len(headers))), dict(natural), table, [])
    if fit.name in headers:
        layout.name = headers.index(fit.name)
    for column in fit.drop_empty:
        if column in headers and len(layout.columns) > 1 and not any(r[headers.index(column)].strip() for r in table):
            layout.columns.remove(headers.index(column))

    def excess() -> int:
        used = sum(layout.widths[i] for i in layout.columns) + GAP * (len(layout.columns) - 1)
        return used + (HANG if layout.fold_all else 0) - width

    for step in fit.steps:
        if excess() <= 0:
            break
        if step.column not in headers or headers.index(step.column) not in layout.columns:
            continue
        index = headers.index(step.column)
        if step.fold:
            _fold(layout, headers, index)
        elif step.drop:
            if len(layout.columns) > 1:
                layout.columns.remove(index)
        elif step.brief:
            _take_brief(layout, headers, index, (brief or {}).get(step.column))
        else:
            floor = _floor(layout, headers, index, fit, step.floor)
            layout.widths[index] = min(layout.widths[index], max(floor, layout.widths[index] - excess()))
    if excess() > 0:
        _fold_names(layout, headers, fit, excess)
        # Folding may leave room over: shortened paths take it back first.
        for i in layout.columns:
            if fit.shapes.get(headers[i]) == "path" and excess() < 0:
                layout.widths[i] = min(natural[i], layout.widths[i] - excess())
    _squeeze(layout, headers, fit, excess())
    # A shortened reference may need fewer cells than its column got: the rest goes to the last.
    for i in layout.columns:
        if fit.shapes.get(headers[i]) == "path" and i != layout.last:
            shortened = (shape.cells(shape.shorten_ref(row[i], layout.widths[i], ellipsis)) for row in layout.rows)
            layout.widths[i] = max([shape.cells(headers[i]), *shortened])
    # The last column gets what is left, up to its natural width.
    last = layout.last
    spare = -excess()
    if spare > 0:
        full = max([shape.cells(headers[last]), *(shape.cells(r[last]) for r in layout.rows)])
        layout.widths[last] = min(full, layout.widths[last] + spare)
    layout.hang = fit.shapes.get(headers[last]) == "wrap" and _hangs(layout, width)
    if layout.folded and not layout.fold_all and layout.name is not None:
        # A name column that is the last took what was left: a name that fits now stays on its row.
        layout.folded = {n for n in layout.folded if shape.cells(layout.rows[n][layout.name]) > layout.widths[layout.name]}
    return layout


def _fold_names(layout: Layout, headers: Sequence[str], fit: Fit, excess: Callable[[], int]) -> None:
    """Before a name folds its row, a sentence last column goes wholly under each row (its header
    on a line under the table's). Then the name column keeps the widest name the row has room
    for, and a wider name folds its row; when no name fits, every row folds and the name column
    leaves the row lines. A sentence that left the rows comes back when folding made room."""
    index = layout.name
    if index is None or index not in layout.columns or len(layout.columns) < 2:
        return
    last = layout.last
    if last != index and fit.shapes.get(headers[last]) == "wrap":
        # A one-word last cell ("sandbox") kept its place on the row; it goes under it first.
        spared = min(excess(), layout.widths[last] - shape.cells(headers[last]))
        layout.widths[last] -= max(spared, 0)
        if excess() > 0 and len(layout.columns) > 2:
            layout.columns.remove(last)
            layout.under = last
        if excess() <= 0:
            return
    room = layout.widths[index] - excess()
    fitting = [shape.cells(row[index]) for row in layout.rows if shape.cells(row[index]) <= room]
    if fitting:
        layout.widths[index] = max([shape.cells(headers[index]), *fitting])
        layout.folded = {n for n, row in enumerate(layout.rows) if shape.cells(row[index]) > layout.widths[index]}
    else:
        layout.fold_all = True
        layout.folded = set(range(len(layout.rows)))
        layout.columns.remove(index)
    under = layout.under
    if under is not None and excess() + layout.widths[under] + GAP <= 0:
        layout.columns = sorted([*layout.columns, under])
        layout.under = None


def _hangs(layout: Layout, width: int) -> bool:
    """Whether the last column is better read on full-width lines under its row: when it is
    narrow, or when under itself it would take half as many lines again."""
    w = layout.widths[layout.last]
    texts = [row[layout.last] for row in layout.rows if shape.cells(row[layout.last]) > w]
    if w < ALIGN_MIN or shape.widest_token(texts) > w:  # under itself it would break inside words
        return True
    under = sum(len(shape.wrap(text, w, w)) for text in texts)
    hanging = sum(len(hung(text, w, width)) for text in texts)
    return under * 2 > hanging * 3


def hung(text: str, w: int, width: int) -> list[str]:
    """A hanging last column's lines: the first on the row (w cells), the rest at HANG. Text that
    takes no more lines starting under the row goes there whole ("label; sandbox" rather than
    "label;" on the row and "sandbox" alone under it); an empty first line says so."""
    on_row = shape.wrap(text, w, width - HANG)
    under = shape.wrap(text, 0, width - HANG)
    return under if shape.cells(text) > w and len(under) <= len(on_row) else on_row


def _fold(layout: Layout, headers: Sequence[str], index: int) -> None:
    values = {row[index] for row in layout.rows}
    if len(values) == 1 and len(layout.columns) > 1:
        layout.columns.remove(index)
        layout.headings.append(f"{headers[index]}: {values.pop()}")


def _take_brief(layout: Layout, headers: Sequence[str], index: int, cells: Optional[Sequence[str]]) -> None:
    if cells is None or len(cells) != len(layout.rows):
        return
    for row, cell in zip(layout.rows, cells):
        row[index] = cell
    layout.widths[index] = max([shape.cells(headers[index]), *(shape.cells(c) for c in cells)])


def _floor(layout: Layout, headers: Sequence[str], index: int, fit: Fit, floor: int) -> int:
    header = shape.cells(headers[index])
    how = fit.shapes.get(headers[index], "fixed")
    if how == "fixed":
        return layout.widths[index]
    if how == "wrap" and floor == 0 and index == layout.last:
        # Going on under its row, the last column still keeps a one-word cell on the row itself.
        one_word = [shape.cells(cell) for row in layout.rows if len((cell := row[index]).split()) == 1]
        return max([header, *(cells for cells in one_word if cells <= WORD_CAP)])
    if how == "wrap":
        # Narrower than its longest word, a wrapped column would break inside words.
        words = min(TOKEN_CAP, shape.widest_token([row[index] for row in layout.rows]))
        return max(floor, header, words)
    return max(floor, header)


def _squeeze(layout: Layout, headers: Sequence[str], fit: Fit, excess: int) -> None:
    """Past every step: the widest shaped column gives a cell at a time, down to SQUEEZE_MIN, a
    column's least width, and a wrapped column in the middle to its widest word (as its step)."""
    least = {i: max(SQUEEZE_MIN, shape.cells(headers[i]), fit.least.get(headers[i], 0)) for i in layout.columns}
    for i in layout.columns:
        if fit.shapes.get(headers[i]) == "wrap" and i != layout.last:
            least[i] = max(least[i], min(TOKEN_CAP, shape.widest_token([row[i] for row in layout.rows])))
    while excess > 0:
        shaped = [i for i in layout.columns if fit.shapes.get(headers[i], "fixed") not in ("fixed", "name")
                  and layout.widths[i] > least[i]]
        if not shaped:
            return  # what cannot shrink stays whole: the terminal wraps the line
        widest = max(shaped, key=lambda i: layout.widths[i])
        layout.widths[widest] -= 1
        excess -= 1


def draw(headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO, fit: Fit = NO_FIT, *,
         styles: Optional[Mapping[str, Mapping[str, str]]] = None, notes: Sequence[Notes] = (),
         brief: Optional[Mapping[str, Sequence[str]]] = None, ellipsis: str = "…") -> None:
    """The table on a terminal: laid out to its width, coloured unless NO_COLOR."""
    from rich.console import Console
    from rich.text import Text

    console = Console(file=out, highlight=False, soft_wrap=True)
    width = console.width
    layout = lay_out(headers, rows, width, fit, brief, ellipsis)
    text = Text()
    for heading in layout.headings:
        label, _, value = heading.partition(": ")
        text.append(f"{label}:", style="bold")
        # A long value (an archive's path) goes on at HANG, as a hanging column does.
        first, *more = shape.wrap(value, width - shape.cells(label) - 2, width - HANG)
        text.append((f" {first}" if first else "") + "".join(f"\n{' ' * HANG}{line}" for line in more) + "\n")
    cuts = shape.NameCuts([row[layout.name] for row in layout.rows] if layout.name is not None else [], width)
    if layout.fold_all and layout.name is not None:
        text.append(f"{headers[layout.name]}\n", style="bold")
    text.append_text(_block([str(h) for h in headers], layout, headers, fit, width, ellipsis, bold=True))
    indent = layout.indent
    if layout.under is not None:
        text.append(" " * indent + headers[layout.under] + "\n", style="bold")
    styles = styles or {}
    for index, cells in enumerate(layout.rows):
        colour = {i: styles.get(headers[i], {}).get(rows[index][i], "") for i in layout.columns}
        if index in layout.folded and layout.name is not None:
            # The name has a line of its own; the row's other cells go on under it.
            for line in cuts.lines(cells[layout.name]):
                text.append(line + "\n", style=styles.get(headers[layout.name], {}).get(cells[layout.name]) or None)
            cells = [("" if i == layout.name else cell) for i, cell in enumerate(cells)]
        text.append_text(_block(cells, layout, headers, fit, width, ellipsis, colour=colour))
        if layout.under is not None and cells[layout.under] not in ("", "-"):  # "-": nothing to say
            for line in shape.wrap(cells[layout.under], width - indent, width - indent):
                text.append(" " * indent + line + "\n")
        row_notes = notes[index] if index < len(notes) else ()
        label_width = max((len(label) for label, _ in row_notes), default=0)
        for label, note in row_notes:
            text.append(_note(f"{label}:".ljust(label_width + 1), note, width))
    console.print(text, end="")


def _block(cells: Sequence[str], layout: Layout, headers: Sequence[str], fit: Fit, width: int, ellipsis: str,
           bold: bool = False, colour: Optional[Mapping[int, str]] = None) -> Text:
    """One row: its line, the lines its wrapped cells continue on, and a narrow last column's
    continuation at HANG."""
    from rich.text import Text

    shown: dict[int, list[str]] = {}
    hanging: list[str] = []
    for i in layout.columns:
        w = layout.widths[i]
        how = fit.shapes.get(headers[i], "fixed")
        cell = cells[i]
        if shape.cells(cell) <= w or bold:
            shown[i] = [cell]
        elif how == "path":
            shown[i] = [shape.shorten_ref(cell, w, ellipsis)]
        elif how == "wrap" and i == layout.last and layout.hang:
            first, *hanging = hung(cell, w, width - (HANG if layout.fold_all else 0))
            shown[i] = [first]
        elif how == "wrap":
            shown[i] = shape.wrap(cell, w, w)
        else:
            shown[i] = [shape.cut_end(cell, w, ellipsis)]
    text = Text()
    for n in range(max(len(lines) for lines in shown.values())):
        line = Text(" " * HANG if layout.fold_all else "")
        for position, i in enumerate(layout.columns):
            part = shown[i][n] if n < len(shown[i]) else ""
            style = "bold" if bold else ((colour or {}).get(i) if n == 0 else "")
            line.append(part, style=style or None)
            if position < len(layout.columns) - 1:
                line.append(" " * (layout.widths[i] - shape.cells(part) + GAP))
        line.rstrip()
        if not line.plain.strip() and hanging:
            continue  # a folded row with nothing left on its line but what goes on under it
        text.append_text(line)
        text.append("\n")
    for more in hanging:
        text.append(" " * layout.indent + more + "\n")
    return text


def _note(label: str, note: str, width: int) -> str:
    """  label: text, folded to width with the continuation under the text."""
    lead = f"  {label} "
    room = width - len(lead)
    if room < 20:
        return f"{lead}{note}\n"  # too narrow to fold usefully: let the terminal wrap it
    folded = [line for line in shape.wrap(note, room, room) if line] or [""]
    return lead + ("\n" + " " * len(lead)).join(folded) + "\n"


# The order pinctl's tables give way in, with the widths it stops at.
REF_FLOOR = 20  # a path keeps this many cells
LAST_COMFORT = 30  # a wrapped last column keeps this many cells before figures leave


def give_way(ref: Optional[str] = None, last: Optional[str] = None, *, fold: Sequence[str] = (),
             brief: Sequence[str] = (), wrap: Sequence[str] = (), paths: Sequence[str] = (),
             drop: Sequence[str] = ()) -> Fit:
    """The one give-way order of pinctl's tables, first to last (last, when empty on every row,
    takes no space at all):

    1. fold: a column saying the same on every row (NAMESPACE) becomes a heading line;
    2. brief: a column takes its short form (DRIFT);
    3. last (WHY and the like) wraps within its column, down to LAST_COMFORT cells;
    4. wrap: a column in the middle wraps, down to its widest word;
    5. drop: figures (IMAGE ID, SIZE) leave the table, in the order given;
    6. last starts on the row and goes on in indented full-width lines under it;
    7. paths (import's ARCHIVE) are shortened in their middle, down to REF_FLOOR cells;
    8. ref, the name, is never shortened: last leaves the row lines, then a row whose name
       still does not fit folds (the module's docstring); a name wider than the window alone is
       cut into a pattern that names it alone. A path may still narrow to SQUEEZE_MIN.
    """
    shapes: dict[str, Shape] = {}
    steps = [Give(column, fold=True) for column in fold] + [Give(column, brief=True) for column in brief]
    if last:
        shapes[last] = "wrap"
        steps.append(Give(last, LAST_COMFORT))
    for column in wrap:
        shapes[column] = "wrap"
        steps.append(Give(column))
    steps += [Give(column, drop=True) for column in drop]
    if last:
        steps.append(Give(last))
    for column in paths:
        shapes[column] = "path"
        steps.append(Give(column, REF_FLOOR))
    if ref:
        shapes[ref] = "name"
    return Fit(shapes, tuple(steps), drop_empty=(last,) if last else (), name=ref)

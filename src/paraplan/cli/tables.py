"""Tables that keep the names a user copies whole at any width, pipes and 80-column terminals included.

rich fits a table to the console (80 columns when stdout is a pipe) by narrowing its columns and, once the columns
that may wrap are as narrow as it will make them, cutting every column alike with an ellipsis (`nemotron-h-…`,
`465,2…`). Here the widths are set before rich sees the table: a *name* or *number* column is as wide as its widest
cell and never wraps; the *text* columns share what is left, each wrapping at spaces and never narrower than its
longest word. Where even that does not fit the console, the table is printed wider than the console rather than cut
(a terminal wraps the long lines; a pipe keeps them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

Kind = Literal["name", "number", "text"]


def _cell_width(cell: str, whole: bool) -> int:
    """A cell's width on one line (`whole`) or its longest word (markup not counted)."""
    plain = Text.from_markup(cell).plain
    parts = plain.splitlines() if whole else plain.split()
    return max((len(part) for part in parts), default=0)


def column_widths(
    columns: Sequence[tuple[str, Kind]], rows: Sequence[Sequence[str]], width: int, show_header: bool = True
) -> list[int]:
    """Each column's width for a table `width` wide (one space between columns): names and numbers whole, the
    widest text column narrowed first, a text column never below its longest word. The sum may exceed `width`
    when the names, numbers and longest words alone do."""
    widths: list[int] = []
    floors: list[int] = []
    for index, (header, kind) in enumerate(columns):
        cells = [str(row[index]) for row in rows] + ([header] if show_header else [])
        whole = max((_cell_width(cell, True) for cell in cells), default=0)
        widths.append(whole)
        floors.append(whole if kind != "text" else max((_cell_width(cell, False) for cell in cells), default=0))
    excess = sum(widths) + len(widths) - 1 - width
    while excess > 0:
        shrinkable = [i for i, (w, f) in enumerate(zip(widths, floors, strict=True)) if w > f]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    return widths


def print_whole_table(
    console: Console,
    title: str | None,
    columns: Sequence[tuple[str, Kind]],
    rows: Sequence[Sequence[str]],
    show_header: bool = True,
    sections: Sequence[int] = (),
) -> None:
    """Print `rows` under `columns` (header, kind), the columns one space apart under a rule (rich's SIMPLE_HEAD
    box without edges or padding), as `column -t` prints them: the width goes to the cells. A rule goes above each
    row index in `sections`."""
    widths = column_widths(columns, rows, console.width, show_header)
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0), show_header=show_header)
    for (header, kind), width in zip(columns, widths, strict=True):
        justify: Literal["left", "right"] = "right" if kind == "number" else "left"
        table.add_column(header, justify=justify, no_wrap=kind != "text", overflow="fold", width=width)
    for index, row in enumerate(rows):
        if index in sections:
            table.add_section()
        table.add_row(*row)
    needed = sum(widths) + len(widths) - 1
    if needed <= console.width:
        console.print(table)
        return
    kept = console._width  # None: the terminal's width; `Console.print(width=)` is capped at the console's
    console.width = needed
    try:
        console.print(table, crop=False)
    finally:
        console._width = kept

"""Text that fits a width: the terminal's columns, wrapped prose, tables that drop or wrap columns."""

from __future__ import annotations

import os
import sys
import textwrap


# ----- text that fits a width (the terminal's COLUMNS) -----------------------------------------------------------------

TERMINAL_FALLBACK = 120  # columns when neither COLUMNS nor a terminal says (a CI log, a pipe)
NARROWEST = 40  # a width below this is taken as this
CHECKS_DETAIL_COLUMNS = ("Timing", "Units")  # left out of the checks table, in this order, when it does not fit
COLUMN_GAP = 2  # tabulate's "simple" format: two spaces between columns


def terminal_width(stream=None) -> int:
    """``COLUMNS`` when set, else the width of the terminal ``stream`` (standard output) writes to, else
    :data:`TERMINAL_FALLBACK` (output that goes to a file or a pipe)."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isascii() and columns.isdigit() and int(columns) > 0:  # int() reads "٣"; isdigit() passes "²"
        return max(int(columns), NARROWEST)
    stream = sys.stdout if stream is None else stream
    try:
        if stream.isatty():
            return max(os.get_terminal_size(stream.fileno()).columns, NARROWEST)
    except (AttributeError, OSError, ValueError):  # no descriptor (captured), or not a terminal after all
        pass
    return TERMINAL_FALLBACK


def wrap(text: str, width: int | None, indent: str = "", first: str = "") -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken only between words (a word longer than the width
    stands alone on its line, whole): ``first`` before the first line, ``indent`` before the others."""
    if width is None:
        return [first + text]
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [first.rstrip()]


def _longest_word(text: str) -> int:
    return max((len(word) for word in str(text).split()), default=0)


def _cell_width(text: str) -> int:
    return max((len(line) for line in str(text).splitlines()), default=0)


def fit_table(headers, rows, width: int | None, droppable=()) -> str:
    """A "simple" table that fits ``width``: cells wrapped between words, the widest column first; where even that is
    too wide, the ``droppable`` columns left out in their order (named in a last line). A table whose words alone do
    not fit is printed as narrow as its words allow."""
    headers, rows = [str(h) for h in headers], [[str(c) for c in row] for row in rows]
    dropped = []
    for name in droppable:  # detail columns go before any cell is wrapped
        if width is None or _natural_width(headers, rows) <= width or name not in headers:
            continue
        index = headers.index(name)
        dropped.append(headers.pop(index))
        rows = [row[:index] + row[index + 1:] for row in rows]
    text = _wrapped_table(headers, rows, width)
    if dropped:
        text += f"\n(left out to fit {width} columns: {', '.join(dropped)}; a wider COLUMNS shows them)"
    return text


def _natural_width(headers: list[str], rows: list[list[str]]) -> int:
    return sum(max(_cell_width(c) for c in column) for column in zip(headers, *rows)) + COLUMN_GAP * (len(headers) - 1)


def simple_table(headers, rows) -> str:
    """tabulate's "simple" format (left-aligned, two spaces between columns, dashes under the headers), without its
    padding of the headers, so that a column is as narrow as its longest word; cells may hold several lines."""
    headers, rows = [str(h) for h in headers], [[str(c) for c in row] for row in rows]
    sizes = [max(_cell_width(c) for c in column) for column in zip(headers, *rows)]
    gap = " " * COLUMN_GAP

    def lines(cells) -> list[str]:
        split = [c.splitlines() or [""] for c in cells]
        return [gap.join(part[i].ljust(size) if i < len(part) else " " * size for part, size in zip(split, sizes))
                .rstrip() for i in range(max(len(part) for part in split))]

    out = lines(headers) + [gap.join("-" * size for size in sizes)]
    for row in rows:
        out += lines(row)
    return "\n".join(out)


def _wrapped_table(headers: list[str], rows: list[list[str]], width: int | None) -> str:
    """The table with its widest columns' cells wrapped between words until it fits ``width`` (or its words do)."""
    columns = list(zip(headers, *rows))
    natural = [max(_cell_width(c) for c in column) for column in columns]
    budget = None if width is None else width - COLUMN_GAP * (len(headers) - 1)
    if budget is None or sum(natural) <= budget:
        return simple_table(headers, rows)
    least = [max(_longest_word(c) for c in column) for column in columns]
    sizes = list(natural)
    while sum(sizes) > budget:
        slack = [size - low for size, low in zip(sizes, least)]
        widest = max(range(len(sizes)), key=lambda i: (sizes[i] if slack[i] > 0 else -1, -i))
        if slack[widest] <= 0:
            break  # every column is down to its longest word
        sizes[widest] -= 1

    def cell(text: str, size: int) -> str:
        return "\n".join(line for part in text.splitlines() or [""] for line in wrap(part, size))

    return simple_table([cell(h, sizes[i]) for i, h in enumerate(headers)],
                        [[cell(c, sizes[i]) for i, c in enumerate(row)] for row in rows])

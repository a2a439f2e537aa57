"""How the command prints: rich tables on a terminal, plain aligned text elsewhere."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["RICH_ROW_LIMIT", "plain_table", "print_table"]

#: Above this many rows a table is printed as plain text even on a terminal: rich lays
#: out a table as a whole, which takes seconds for a long capture.
RICH_ROW_LIMIT = 1000


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], *, plain: bool) -> None:
    """A table through rich on a terminal when it is installed, else aligned plain text.

    Plain text too when ``plain`` is set, when stdout is a pipe or a file, and for
    tables longer than ``RICH_ROW_LIMIT``.
    """
    if plain or len(rows) > RICH_ROW_LIMIT or not sys.stdout.isatty():
        _print_plain(title, headers, rows)
        return
    try:
        from rich.console import Console  # noqa: PLC0415  (optional dependency)
        from rich.table import Table  # noqa: PLC0415
    except ImportError:
        _print_plain(title, headers, rows)
        return
    table = Table(title=title or None, show_header=any(headers))  # no empty header row
    for header in headers:
        table.add_column(header)
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def _print_plain(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    if title:
        print(title)
    print(plain_table(headers, rows))


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``rows`` under ``headers`` (unless all are blank) in columns two spaces apart,
    trailing blanks removed."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = []
    if any(headers):
        lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)

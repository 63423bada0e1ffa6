"""Terminal output for the command-line tools: values from outside (events, errors,
receipts, bundle files, arguments) are shown as literal text.

The consoles here never read markup or emoji codes (``[link=…]``, ``[/]``, ``:warning:``
in a payload stay as typed), and every value becomes a ``Text`` with its control and bidi
characters shown as escapes, so data cannot move the cursor, restyle or hyperlink the
terminal. Our own styling is passed in as ``Text`` with a style, never as markup.
"""

from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# C0 (but tab and newline), DEL and C1 controls: ESC starts every terminal sequence and C1
# 0x9b is an 8-bit CSI. Bidi overrides and isolates reorder what is shown.
_HIDDEN = (*range(0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPES = {c: f"\\x{c:02x}" for c in _HIDDEN} | {c: f"\\u{c:04x}" for c in _BIDI}


def safe_console(**options: Any) -> Console:
    """A Rich console that reads no markup, emoji codes or highlighting from strings."""
    return Console(markup=False, emoji=False, highlight=False, **options)


console = safe_console()


def literal(value: object) -> Text:
    """Any value as plain text, control and bidi characters shown as escapes."""
    return value if isinstance(value, Text) else Text(str(value).translate(_ESCAPES))


def line(*parts: object) -> Text:
    """Parts joined by spaces: our styled ``Text`` as it is, anything else as ``literal``."""
    return Text(" ").join(literal(p) for p in parts)


def say(*parts: object) -> None:
    """Print one line of ``parts`` (see :func:`line`)."""
    console.print(line(*parts))


def kv_table(title: object, rows: dict[str, Any]) -> Table:
    """A two-column name/value table."""
    table = Table(title=literal(title), show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in rows.items():
        table.add_row(literal(name), literal(value))
    return table


def rows_table(
    title: object, rows: list[dict[str, Any]], columns: tuple[str, ...], right: tuple[str, ...] = ()
) -> Table:
    """One row per record, the given columns (``right`` ones right-aligned)."""
    table = Table(title=literal(title))
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left")
    for row in rows:
        table.add_row(*(literal(row.get(c, "")) for c in columns))
    return table


def utc(ms: int | None) -> str:
    """Epoch milliseconds as an ISO time in UTC, or '-'."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds") if ms else "-"

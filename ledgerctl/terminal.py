"""Terminal output for the command-line tools: values from outside (events, errors,
receipts, bundle files, arguments) are shown as literal text.

The consoles here never read markup or emoji codes (``[link=…]``, ``[/]``, ``:warning:``
in a payload stay as typed), and every value becomes a ``Text`` with its control and bidi
characters shown as escapes, so data cannot move the cursor, restyle or hyperlink the
terminal. Our own styling is passed in as ``Text`` with a style, never as markup.
"""

import sys
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, RenderableType
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
    """Print one line of ``parts`` (see :func:`line`), never wrapped (ids stay whole)."""
    console.print(line(*parts), soft_wrap=True)


def show(renderable: RenderableType) -> None:
    """Print a table: on a terminal folded to its width; into a pipe or file as wide as it
    needs, so no id is ever cut or wrapped."""
    if console.is_terminal:
        console.print(renderable)
        return
    width = console.measure(renderable, options=console.options.update(width=10**5)).maximum
    safe_console(width=max(width, 80), file=sys.stdout).print(renderable)


def kv_table(
    title: object, rows: dict[str, Any], caption: object = None, caption_left: bool = False
) -> Table:
    """A two-column name/value table (values as :func:`shown`); a caption of sentences
    reads better ``caption_left``."""
    table = Table(
        title=literal(title),
        show_header=False,
        caption=_caption(caption),
        caption_justify="left" if caption_left else "center",
    )
    table.add_column(style="bold", overflow="fold")
    table.add_column(overflow="fold")
    for name, value in rows.items():
        table.add_row(literal(name), shown(value))
    return table


def rows_table(
    title: object,
    rows: list[dict[str, Any]],
    columns: tuple[str, ...],
    right: tuple[str, ...] = (),
    caption: object = None,
) -> Table:
    """One row per record, the given columns (``right`` ones right-aligned); long values
    fold onto more lines rather than being cut."""
    table = Table(title=literal(title), caption=_caption(caption), caption_justify="left")
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left", overflow="fold")
    for row in rows:
        table.add_row(*(shown(row.get(c, "")) for c in columns))
    return table


def _caption(caption: object) -> Text | None:
    return None if caption is None else literal(caption)


def shown(value: object) -> Text:
    """A value as people read it: times as ISO-8601 UTC, numbers with thousands separated,
    yes/no, '-' for nothing; anything else as literal text."""
    if isinstance(value, Text):
        return value
    if value is None or value == "":
        return Text("-")
    if isinstance(value, datetime):
        return Text(iso(value))
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    if isinstance(value, int | float):
        return Text(f"{value:,}")
    return literal(value)


def iso(moment: datetime | None) -> str:
    """A time as ISO-8601 UTC to the second ('2026-01-02T03:04:05Z'), or '-'."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def utc(ms: int | None) -> str:
    """Epoch milliseconds as ISO-8601 UTC, or '-'."""
    return iso(datetime.fromtimestamp(ms / 1000, UTC)) if ms else "-"

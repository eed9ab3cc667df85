"""``nirbridge support``: the default conversion maps."""

from __future__ import annotations

import json

import click

from .common import (
    echo,
)


@click.command(name="support")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def support(as_json: bool) -> None:
    """Show what converts to what, as a table.

    For each NIR type: the module nirbridge builds for it, the torch modules exported
    as it, and the norse, snntorch and spikingjelly modules (⇄ both ways, → NIR export only, ← NIR
    import only).

    \b
    Example:
      nirbridge support
      nirbridge support --json
    """
    from ..support import COLUMNS, support_table

    rows = support_table()
    if as_json:
        echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in COLUMNS}
    echo("  ".join(c.ljust(widths[c]) for c in COLUMNS).rstrip())
    echo("  ".join("-" * widths[c] for c in COLUMNS))
    for row in rows:
        echo("  ".join(row[c].ljust(widths[c]) for c in COLUMNS).rstrip())

"""``nirbridge draw``: a picture of a graph."""

from __future__ import annotations

from pathlib import Path

import click

from ..draw import ENGINES, RANKDIRS
from ..io import load
from .common import (
    echo,
    one_line_errors,
    outputs_apart,
)


@click.command(name="draw")
@click.argument("file", type=click.Path(path_type=str))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=str),
    help="Picture (.svg, .png, .pdf) or text (.dot, .gv, .mmd) to write.",
)
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="auto",
    show_default=True,
    help="auto: Graphviz when installed, else matplotlib.",
)
@click.option(
    "--rankdir",
    type=click.Choice(RANKDIRS),
    default=None,
    help="TB: top to bottom; LR: left to right. Default: TB for graphs with a chain of more than "
    "8 nodes (a deep CNN), LR otherwise.",
)
@one_line_errors("draw")
def draw(file: str, output: str, engine: str, rankdir: str | None) -> None:
    """Draw FILE's graph, its recurrent edges marked.

    Boxes show node names, types and shapes; delayed (recurrent) edges are dashed and
    red; nested graphs are boxes around their nodes.

    \b
    Example:
      nirbridge draw braille.nir -o braille.svg
      nirbridge draw braille.nir -o braille.mmd    # Mermaid text, for Markdown
      nirbridge draw cnn.nir -o cnn.svg --rankdir LR
    """
    from .. import draw as drawing

    outputs_apart({"FILE": file}, {"-o": output, "-o (DOT text when nothing draws)": output + ".dot"})
    node = load(file).node
    used = drawing.draw(node, output, engine=engine, rankdir=rankdir)
    if used == "dot text, no engine":
        echo(
            f"neither Graphviz nor matplotlib is installed: wrote the DOT text to {output}.dot "
            f"(render it with `dot -T{Path(output).suffix.lstrip('.')}`)"
        )
    else:
        echo(f"wrote {output} ({used})")

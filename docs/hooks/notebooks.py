"""An mkdocs hook that puts the notebooks in notebooks/ on the site.

The notebooks live beside the package, not in docs/, and are committed without outputs.
This hook adds each ``notebooks/*.ipynb`` to the site's files as ``notebooks/NAME.ipynb``
(a page at ``notebooks/NAME/``), before mkdocs-jupyter, which executes it in a fresh
python3 kernel of the interpreter building the site and renders it with its outputs. Its
source path stays the real file, so the kernel starts in notebooks/, as when the notebook
is opened there. The kernel inherits the environment: an ``MPLBACKEND`` set for headless
runs (Agg) would keep the figures from being shown, so it is dropped and the kernel picks
its own (inline) backend. ``mkdocs serve`` rebuilds when a notebook changes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

NOTEBOOKS = Path(__file__).resolve().parent.parent.parent / "notebooks"


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns .ipynb files into pages
def on_files(files: Files, config: Any) -> Files:
    os.environ.pop("MPLBACKEND", None)
    # jupyter_core 5.x warns that it will move to platformdirs unless asked to now
    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        uri = f"notebooks/{path.name}"
        if files.get_file_from_path(uri) is None:
            # a file of the checkout, not File.generated: mkdocs-jupyter wraps the File and
            # reads its abs_src_path, which a generated file only holds on the instance
            files.append(File(uri, str(NOTEBOOKS.parent), config["site_dir"], config["use_directory_urls"]))
    return files


def on_serve(server: Any, config: Any, builder: Any) -> Any:
    server.watch(str(NOTEBOOKS))
    return server

"""The documentation site: it builds with warnings as errors, its quickstart page renders
in a real browser with the API names and the plots generated at build time, and the
notebooks are pages of it, executed at build time, with their figures.

The site is built once per session with ``mkdocs build --strict`` (what ``make docs``
runs) into a temporary folder, served from 127.0.0.1 and opened in Chromium through
playwright. ``make tools`` installs Chromium.
"""

from __future__ import annotations

import contextlib
import functools
import html
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_notebooks import SHOWS  # notebook: (figures, verify reports it prints)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def find_chromium() -> Path:
    """$CHROMIUM, else Debian's Chromium, else one on PATH or in macOS's Applications."""
    candidates = [os.environ.get("CHROMIUM"), "/usr/bin/chromium"]
    candidates += [shutil.which(name) for name in ["chromium", "chromium-browser"]]
    candidates += ["/Applications/Chromium.app/Contents/MacOS/Chromium"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return Path("/usr/bin/chromium")


CHROMIUM = find_chromium()
# no network here: without the background-networking flags Chromium tries to connect out
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# in the pages mkdocs-jupyter renders: an output cell's figure, its text, its stderr (or a
# traceback), and a code cell's execution count
NB_FIGURE = re.compile(
    r'<div class="jp-RenderedImage jp-OutputArea-output"[^>]*>\s*<img [^>]*src="data:image/png;base64,[A-Za-z0-9+/]{100}'
)
NB_TEXT = re.compile(
    r'<div class="jp-RenderedText jp-OutputArea-output" data-mime-type="text/plain"[^>]*>\s*<pre>(.*?)</pre>',
    re.S,
)
NB_STDERR = re.compile(
    r'<div [^>]*data-mime-type="application/vnd.jupyter.stderr"[^>]*>\s*<pre>(.*?)</pre>', re.S
)
NB_PROMPT = re.compile(r'<div class="jp-InputPrompt jp-InputArea-prompt">In\s*\[(\d*)\]:</div>')
# API names the quickstart must show as text
API_NAMES = [
    "nirbridge.read",
    "nirbridge.nir_to_torch",
    "nirbridge.run",
    "result.raster",
    "result.plot",
    "nirbridge.torch_to_nir",
    "nirbridge.write",
    "nirbridge.verify",
]


# size and load state of each plot: <img> (a PNG) or inline <svg>
MEASURE = """nodes => nodes.map(node => {
    const box = node.getBoundingClientRect();
    const img = node.tagName.toLowerCase() === "img";
    return {
        tag: node.tagName.toLowerCase(),
        complete: img ? node.complete : true,
        naturalWidth: img ? node.naturalWidth : null,
        width: box.width,
        height: box.height,
    };
})"""


class Site:
    def __init__(self, folder: Path, output: str, seconds: float) -> None:
        self.folder = folder
        self.output = output
        self.seconds = seconds


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    folder = tmp_path_factory.mktemp("site")
    start = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds = time.perf_counter() - start
    output = ANSI.sub("", completed.stdout + completed.stderr)
    assert completed.returncode == 0, f"mkdocs build --strict failed:\n{output}"
    return Site(folder, output, seconds)


@pytest.fixture(scope="module")
def server(site: Site) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=site.folder))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_build_is_clean(site: Site) -> None:
    warnings_seen = [line for line in site.output.splitlines() if re.match(r"\s*WARNING\b", line)]
    assert not warnings_seen, "\n".join(warnings_seen)
    for page in ["index.html", "semantics/index.html", "cli/index.html", "api/neurons/index.html"]:
        assert (site.folder / page).is_file(), page
    print(f"mkdocs build --strict: {site.seconds:.1f} s")


def test_pages_hold_what_was_generated(site: Site) -> None:
    semantics = (site.folder / "semantics" / "index.html").read_text()
    assert "delayed_outputs" in semantics, "the executed gm.code is missing"
    cli = (site.folder / "cli" / "index.html").read_text()
    assert "nirbridge info" in cli, "the generated command-line reference is missing"
    neurons = (site.folder / "api" / "neurons" / "index.html").read_text()
    assert 'id="nirbridge.neurons.LIF"' in neurons, "the API reference of the neurons is missing"
    assert ":math:" not in neurons and ":func:" not in neurons, "reStructuredText roles were not rewritten"


@contextlib.contextmanager
def browser_page(url: str) -> Iterator[tuple[Any, list[str]]]:
    """Headless Chromium on ``url``, loaded: the page, and the URLs it has requested."""
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: `make tools` installs Chromium (Debian's package)"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            requests: list[str] = []
            page.on("request", lambda request: requests.append(request.url))
            page.goto(url, wait_until="load")
            yield page, requests
        finally:
            browser.close()


def test_quickstart_in_browser(site: Site, server: str, tmp_path: Path) -> None:
    with browser_page(f"{server}/") as (page, requests):
        text = page.inner_text("article")
        plots = page.eval_on_selector_all("article img.nb-figure, article svg.nb-figure", MEASURE)
        page.screenshot(path=str(tmp_path / "quickstart.png"), full_page=True)

    missing = [name for name in API_NAMES if name not in text]
    assert not missing, f"not shown on the quickstart: {missing}"
    assert "Run(dt=0.0001" in text, "the executed run() output is missing"
    assert "verify: equivalent" in text, "the executed verify() report is missing"

    assert len(plots) >= 2, f"expected the raster and the trace plot, found {plots}"
    for plot in plots:
        assert plot["width"] > 100 and plot["height"] > 50, plot
        if plot["tag"] == "img":
            assert plot["complete"] and plot["naturalWidth"] > 0, plot

    outside = [url for url in requests if not url.startswith((server, "data:"))]
    assert not outside, f"the page fetched from elsewhere: {outside}"


def test_the_notebooks_are_pages_in_the_nav(site: Site) -> None:
    names = sorted(path.stem for path in NOTEBOOKS.glob("*.ipynb"))
    assert names == sorted(Path(name).stem for name in SHOWS)
    index = (site.folder / "index.html").read_text()
    for name in names:
        assert (site.folder / "notebooks" / name / "index.html").is_file(), name
        assert f'href="notebooks/{name}/"' in index, f"{name} is not in the site's navigation"


@pytest.mark.parametrize("name", sorted(SHOWS))
def test_notebook_page_shows_its_executed_outputs(site: Site, name: str) -> None:
    page = (site.folder / "notebooks" / Path(name).stem / "index.html").read_text()
    prompts = NB_PROMPT.findall(page)
    assert prompts, f"{name}: no code cells on the page"
    assert all(prompts), f"{name}: code cells without an execution count, not executed: {prompts}"
    assert [int(n) for n in prompts] == list(range(1, len(prompts) + 1)), prompts
    figures, reports = SHOWS[name]
    assert len(NB_FIGURE.findall(page)) == figures, f"{name}: expected {figures} PNG figures"
    text = html.unescape("".join(NB_TEXT.findall(page)))
    assert text.count("verify: equivalent") == reports, text
    assert "NOT equivalent" not in text
    stderr = [html.unescape(block) for block in NB_STDERR.findall(page)]
    assert not stderr, f"{name} printed to stderr or raised:\n{stderr}"


def test_notebook_page_in_browser(site: Site, server: str, tmp_path: Path) -> None:
    name = "02_braille_srnn"
    with browser_page(f"{server}/notebooks/{name}/") as (page, requests):
        title = page.title()
        plots = page.eval_on_selector_all("article .jp-RenderedImage img", MEASURE)
        page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)

    assert "Braille" in title, title
    assert len(plots) == SHOWS[f"{name}.ipynb"][0], plots
    for plot in plots:
        assert plot["complete"] and plot["naturalWidth"] > 0, plot
        assert plot["width"] > 100 and plot["height"] > 50, plot
    outside = [url for url in requests if not url.startswith((server, "data:"))]
    assert not outside, f"the page fetched from elsewhere: {outside}"

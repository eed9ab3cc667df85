"""The documentation site: it builds with warnings as errors, and its quickstart page
renders in a real browser with the API names and the plots generated at build time.

The site is built once per session with ``mkdocs build --strict`` (what ``make docs``
runs) into a temporary folder, served from 127.0.0.1 and opened in Debian's Chromium
through playwright. ``make tools`` installs Chromium.
"""

from __future__ import annotations

import functools
import http.server
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
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


def test_quickstart_in_browser(site: Site, server: str, tmp_path: Path) -> None:
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: `make tools` installs Chromium (Debian's package)"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            requests: list[str] = []
            page.on("request", lambda request: requests.append(request.url))
            page.goto(f"{server}/", wait_until="load")
            text = page.inner_text("article")
            plots = page.eval_on_selector_all("article img.nb-figure, article svg.nb-figure", MEASURE)
            page.screenshot(path=str(tmp_path / "quickstart.png"), full_page=True)
        finally:
            browser.close()

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

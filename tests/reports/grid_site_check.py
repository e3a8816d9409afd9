"""Check a real grid's pages in headless Chromium: `python -m tests.reports.grid_site_check SITE [--out DIR]`.

SITE is a report directory (`amqp-conformance grid ... --report` writes DIR/report). For each of
1600, 1280 and 1024 px: grid.html is loaded over HTTP, its areas opened; the page must not scroll
sideways and its header must not cover it (tests.reports.test_browser.LAYOUT); every cell letter of
its tables must be a link, and every link must lead to a page of the site that exists (the test page
with its frames, the rule's page, or the client page). A screenshot per width goes to DIR (default
build/artifacts/grid). Prints one line per width and exits 1 on the first failure, with what failed.
"""

from __future__ import annotations

import argparse
import functools
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from tests.reports.test_browser import LAYOUT

WIDTHS = (1600, 1280, 1024)
CELLS = """
const links = Array.from(document.querySelectorAll('table.grid td a'));
return {letters: links.length, unlinked: links.filter(a => !a.getAttribute('href')).length,
        hrefs: Array.from(new Set(links.map(a => a.getAttribute('href')))),
        tables: document.querySelectorAll('table.grid').length};
"""


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *_: Any) -> None:
        pass


def _browser() -> Any:
    import shutil
    import tempfile

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='amqpc-grid-check-')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=shutil.which("chromedriver") or ""))
    driver.set_page_load_timeout(60)
    return driver


def check(site: Path, out: Path) -> list[str]:
    """What is wrong with SITE's grid page (empty: nothing), checked at every width."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/grid.html"
    out.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    driver = _browser()
    try:
        for width in WIDTHS:
            driver.set_window_size(width, 1000)
            driver.get(url)
            driver.execute_script("const o = document.getElementById('grid-open'); if (o) o.click();")
            layout = driver.execute_script(LAYOUT)
            found = driver.execute_script(CELLS)
            missing = [h for h in found["hrefs"] if not (site / unquote(urlsplit(h).path)).is_file()]
            driver.save_screenshot(str(out / f"grid-{width}.png"))
            print(f"{width} px: {found['tables']} tables, {found['letters']} cell links ({len(found['hrefs'])} pages), "
                  f"sideways overflow {layout['overflow']} px, unlinked {found['unlinked']}, missing pages {len(missing)}")
            if layout["overflow"] > 0 or not layout["mainBelowTop"]:
                problems.append(f"{width} px: the page does not fit: {layout}")
            if found["letters"] == 0 or found["unlinked"]:
                problems.append(f"{width} px: {found['unlinked']} of {found['letters']} cell letters link nowhere")
            if missing:
                problems.append(f"{width} px: links to pages that do not exist: {missing[:5]}")
    finally:
        driver.quit()
        server.shutdown()
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path)
    parser.add_argument("--out", type=Path, default=Path("build/artifacts/grid"))
    args = parser.parse_args(argv)
    problems = check(args.site, args.out)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""The report in real headless Chromium (Selenium + chromedriver): overview, matrix filters, frame log.

The site is the one the real pipeline built from the synthetic lake (`site` fixture). It is
served over HTTP from a local thread. Screenshots go to $AMQPC_ARTIFACTS (default
build/artifacts/report/), a CI artifact path. Without Chromium, chromedriver or Selenium the
test skips, and fails under AMQPC_STRICT=1.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from tests.reports.conftest import Site

pytestmark = [pytest.mark.browser, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
WAIT = 20.0


def artifacts() -> Path:
    directory = Path(os.environ.get("AMQPC_ARTIFACTS", ROOT / "build" / "artifacts")) / "report"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture(scope="module")
def served(site: Site) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site.root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require(CHROMIUM and CHROMEDRIVER, "Chromium and chromedriver (Debian packages chromium, chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        require(False, "the selenium package (pip install selenium)")
        raise
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tempfile.mkdtemp(prefix="amqpc-chromium-")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(WAIT)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def wait_for(driver: Any, script: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT).until(lambda d: d.execute_script(script))


def visible_rules(driver: Any) -> list[str]:
    return driver.execute_script(  # type: ignore[no-any-return]
        "return Array.from(document.querySelectorAll('#matrix tbody tr:not(.hidden)')).map(r => r.dataset.rule)")


def test_report_overview_loads(browser: Any, served: str, site: Site) -> None:
    browser.get(f"{served}/index.html")
    assert "conformance" in browser.title.lower()
    rows = browser.execute_script("return document.querySelectorAll('#scores tbody tr').length")
    assert rows == len(site.data.targets)
    assert browser.execute_script("return document.querySelector('svg.chart polyline') !== null")
    assert browser.execute_script("return Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
    browser.save_screenshot(str(artifacts() / "overview.png"))


def test_report_matrix_filters(browser: Any, served: str, site: Site) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(f"{served}/matrix.html")
    total = len(site.data.rules)
    assert len(visible_rules(browser)) == total
    assert browser.find_element(By.ID, "matrix-count").text == f"{total} of {total} rules"
    browser.find_element(By.ID, "filter-text").send_keys("PC-")
    shown = visible_rules(browser)
    assert shown and all("PC-" in r for r in shown) and len(shown) < total
    browser.find_element(By.ID, "filter-text").clear()
    browser.execute_script("document.getElementById('filter-text').dispatchEvent(new Event('input'))")
    Select(browser.find_element(By.ID, "filter-verdict")).select_by_value("failed")
    failing = {r for r, cells in site.data.matrix.items() if any(c.verdict == "failed" for c in cells.values())}
    assert set(visible_rules(browser)) == failing
    browser.save_screenshot(str(artifacts() / "matrix-failed.png"))
    Select(browser.find_element(By.ID, "filter-area")).select_by_value("confirms")
    assert set(visible_rules(browser)) == {r for r in failing if site.data.matrix[r] and
                                           next(x for x in site.data.rules if x.id == r).area == "confirms"}


def test_report_failing_test_shows_its_frame_log(browser: Any, served: str, site: Site) -> None:
    test = next(t for t in site.data.failing if t.frames and t.violations) if any(
        t.frames and t.violations for t in site.data.failing) else next(t for t in site.data.failing if t.frames)
    browser.get(f"{served}/tests/{test.page}.html")
    wait_for(browser, "return document.getElementById('frame-log').dataset.loaded === 'true'")
    rows = browser.execute_script("return document.querySelectorAll('#frame-log-table tbody tr').length")
    assert rows == test.frames
    text = browser.execute_script("return document.getElementById('frame-log-table').innerText")
    assert "basic.deliver" in text and "channel.open" in text
    flagged = browser.execute_script("return document.querySelectorAll('#frame-log-table tr.flagged').length")
    assert flagged == len({(v.connection, v.channel, v.seq) for v in test.violations})
    browser.save_screenshot(str(artifacts() / "failing-test.png"))


LAYOUT = """
const doc = document.documentElement;
const overflow = doc.scrollWidth - doc.clientWidth;
const bar = document.querySelector('form.filters');
const names = Array.from(document.querySelectorAll('#matrix th.target span')).map(s => s.getBoundingClientRect());
const top = document.querySelector('header.top').getBoundingClientRect();
const main = document.querySelector('main').getBoundingClientRect();
return {overflow: overflow,
        namesBelowBar: bar ? names.every(r => r.top >= bar.getBoundingClientRect().bottom) : true,
        namesBelowTop: names.every(r => r.top >= top.bottom),
        mainBelowTop: main.top >= top.bottom,
        scoresFit: (() => { const box = document.querySelector('#scores')?.parentElement;
                            return !box || box.scrollWidth <= box.clientWidth; })(),
        cutBadges: Array.from(document.querySelectorAll('img.badge')).filter(
            i => i.getBoundingClientRect().right > doc.clientWidth).length};
"""


@pytest.mark.parametrize("width", [1400, 1024])
@pytest.mark.parametrize("page", ["index.html", "matrix.html", "rules/{rule}.html", "through/{through}.html"])
def test_report_layout_at_common_widths(browser: Any, served: str, site: Site, page: str, width: int) -> None:
    """No page scrolls sideways, matrix target names sit between the filter bar and the rows, no
    badge is cut off; the screenshots are the artifacts to look at."""
    page = page.format(rule=site.data.rules[0].id, through=site.data.client_matrices[0].slug)
    browser.set_window_size(width, 1000)
    try:
        browser.get(f"{served}/{page}")
        layout = browser.execute_script(LAYOUT)
        assert layout == {"overflow": 0, "namesBelowBar": True, "namesBelowTop": True, "mainBelowTop": True,
                          "scoresFit": True, "cutBadges": 0}, layout
        browser.save_screenshot(str(artifacts() / f"{page.replace('/', '-').removesuffix('.html')}-{width}.png"))
    finally:
        browser.set_window_size(1400, 1000)


def test_report_rule_page_links_to_the_catalogue(browser: Any, served: str, site: Site) -> None:
    rule = next(r for r in site.data.rules if r.in_catalogue)
    browser.get(f"{served}/rules/{rule.id}.html")
    links = browser.execute_script("return Array.from(document.querySelectorAll('a')).map(a => a.href)")
    assert f"{served}/catalogue.html#{rule.id}" in links
    browser.get(f"{served}/catalogue.html#{rule.id}")
    assert browser.execute_script(f"return document.getElementById({rule.id!r}) !== null")

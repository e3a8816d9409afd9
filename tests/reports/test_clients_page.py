"""The clients x scenarios pages: rendered without Spark, then built by the real pipeline from real
client runs and checked in headless Chromium."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from reports.model import ClientColumn, ClientScenario, ClientsData, ReportData
from reports.render import render_site
from tests.conftest import require
from tests.reports.test_browser import _QuietHandler, artifacts, browser  # noqa: F401  (the browser fixture)

T0 = datetime(2026, 11, 23, tzinfo=UTC)


def test_render_clients_matrix_and_client_pages(tmp_path: Path) -> None:
    failing = ClientScenario("repeated-cancel", ["CL-CCN-03"], "failed", "KeyError <tag>", 0.4, "rc-page")
    clients = ClientsData([ClientColumn("pika", "1.4.4", "r-pika", T0, {
        "server-cancel": ClientScenario("server-cancel", ["CL-CCN-02"], "passed", None, 0.2),
        "repeated-cancel": failing})], ["server-cancel", "repeated-cancel"],
        {"server-cancel": ["CL-CCN-02"], "repeated-cancel": ["CL-CCN-03"]})
    data = ReportData(T0, "/r", 1, 2, [], [], [], {}, [], [], [], [], [], [], clients=clients)
    frames = [{"seq": 0, "ts": T0, "connection": 1, "channel": 1, "direction": "in", "method": "basic.cancel",
               "consumer_tag": "ctag1"}]
    render_site(data, tmp_path, [("rc-page", frames)])
    matrix = (tmp_path / "clients.html").read_text()
    assert "1.4.4" in matrix and 'data-verdict="failed"' in matrix and "clients/pika.html#repeated-cancel" in matrix
    page = (tmp_path / "clients" / "pika.html").read_text()
    assert 'id="repeated-cancel"' in page and "KeyError &lt;tag&gt;" in page and "basic.cancel" in page
    assert 'consumer_tag=&#34;ctag1&#34;' in page or "consumer_tag=&quot;ctag1&quot;" in page
    assert "Clients (1)" in (tmp_path / "index.html").read_text()


@pytest.fixture(scope="module")
def client_site(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conformance.clientside import runner
    from conformance.clientside.clients import CLIENTS
    from conformance.clientside.record import write_client_run
    from reports.build import build_report

    specs = [CLIENTS[c] for c in ("pika", "amqp") if CLIENTS[c].installed_version()]
    require(len(specs) == 2, "pika and py-amqp")
    lake, out = tmp_path_factory.mktemp("client-lake"), tmp_path_factory.mktemp("client-site")
    found = runner.run_clients(specs, runner.select(["server-cancel", "repeated-cancel"]), jobs=2)
    for client, results in found.items():
        write_client_run(lake, "b", client, results, T0, 1.0, 1)
    build_report(spark, lake, out)
    return out


@pytest.fixture(scope="module")
def served_clients(client_site: Path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(client_site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.spark
@pytest.mark.browser
def test_clients_matrix_and_client_page_in_chromium(browser: Any, served_clients: str) -> None:  # noqa: F811
    browser.get(f"{served_clients}/clients.html")
    cells = browser.execute_script(
        "return Array.from(document.querySelectorAll('#clients-matrix td.cell a'))"
        ".map(a => [a.closest('tr').dataset.scenario, a.dataset.client, a.dataset.verdict])")
    assert sorted(map(tuple, cells)) == [("repeated-cancel", "amqp", "failed"), ("repeated-cancel", "pika", "failed"),
                                         ("server-cancel", "amqp", "passed"), ("server-cancel", "pika", "passed")]
    browser.save_screenshot(str(artifacts() / "clients-matrix.png"))
    browser.get(f"{served_clients}/clients/pika.html")
    text = browser.execute_script("return document.getElementById('repeated-cancel').innerText")
    assert "KeyError" in text and "basic.cancel" in text and "basic.consume" in text
    rows = browser.execute_script("return document.querySelectorAll('table[data-frames=\"repeated-cancel\"] tbody tr').length")
    assert rows > 10
    browser.save_screenshot(str(artifacts() / "client-pika.png"))

"""The clients x scenarios pages: rendered from hand-made data, collected by Spark from real client
runs in a lake, and rendered from those runs and checked in headless Chromium."""

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
def played(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[Any]]]:
    """Real client runs (pika and py-amqp, a passing and a failing scenario) written to a lake."""
    from conformance.clientside import runner
    from conformance.clientside.clients import CLIENTS
    from conformance.clientside.record import write_client_run

    specs = [CLIENTS[c] for c in ("pika", "amqp") if CLIENTS[c].installed_version()]
    require(len(specs) == 2, "pika and py-amqp")
    lake = tmp_path_factory.mktemp("client-lake")
    found = runner.run_clients(specs, runner.select(["server-cancel", "repeated-cancel"]), jobs=2)
    for client, results in found.items():
        write_client_run(lake, "b", client, results, T0, 1.0, 1)
    return lake, found


@pytest.mark.spark
def test_collect_clients_reads_the_latest_client_runs(spark: Any, played: tuple[Path, dict[str, list[Any]]]) -> None:
    from reports.build import read_lake
    from reports.clients import collect_clients

    lake, found = played
    data = collect_clients(read_lake(spark, lake), [])
    assert data is not None
    assert [(c.client, c.version) for c in data.clients] == sorted(
        (client, results[0].client_version) for client, results in found.items())
    assert {(c.client, name): s.verdict for c in data.clients for name, s in c.scenarios.items()} == {
        ("amqp", "repeated-cancel"): "failed", ("amqp", "server-cancel"): "passed",
        ("pika", "repeated-cancel"): "failed", ("pika", "server-cancel"): "passed"}
    assert data.rules["repeated-cancel"] == ["CL-CCN-03"]


@pytest.fixture(scope="module")
def client_site(played: tuple[Path, dict[str, list[Any]]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site rendered from those runs (the pages `build_report` writes from `collect_clients`)."""
    from conformance.clientside.record import scenario_test_id
    from conformance.plugin.results import frame_rows
    from reports.model import page_for_test

    _lake, found = played
    columns, logs = [], []
    for client, results in sorted(found.items()):
        scenarios = {}
        for r in results:
            page = page_for_test(f"b-{client}", scenario_test_id(client, r.scenario.id)) if r.verdict == "failed" else None
            scenarios[r.scenario.id] = ClientScenario(r.scenario.id, list(r.scenario.rules), str(r.verdict), r.message,
                                                      r.duration, page)
            if page:
                logs.append((page, list(frame_rows("b", "t", r.frames, 0.0))))
        columns.append(ClientColumn(client, results[0].client_version, f"b-{client}", T0, scenarios))
    clients = ClientsData(columns, ["server-cancel", "repeated-cancel"],
                          {"server-cancel": ["CL-CCN-02"], "repeated-cancel": ["CL-CCN-03"]})
    out = tmp_path_factory.mktemp("client-site")
    render_site(ReportData(T0, "/r", 2, 4, [], [], [], {}, [], [], [], [], [], [], clients=clients), out, logs)
    return out


@pytest.fixture(scope="module")
def served_clients(client_site: Path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(client_site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


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

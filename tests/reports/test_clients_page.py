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


def _column(client: str, language: str, verdicts: dict[str, str]) -> ClientColumn:
    frames = [{"seq": 0, "ts": T0, "connection": 1, "channel": 1, "direction": "in", "method": "basic.cancel",
               "consumer_tag": "ctag1"},
              {"seq": 1, "ts": T0, "connection": 1, "channel": 0, "direction": "out", "method": "connection.start-ok",
               "capabilities": ["consumer_cancel_notify", "publisher_confirms"]}]
    scenarios = {name: ClientScenario(name, [RULES.get(name, "CL-X")], verdict, "KeyError <tag>" if verdict == "failed" else None,
                                      0.4, f"{client}-{name}" if verdict == "failed" else None,
                                      frames if verdict != "not-applicable" else [])
                 for name, verdict in verdicts.items()}
    return ClientColumn(client, "1.0", f"r-{client}", T0, scenarios, language)


RULES = {"server-cancel": "CL-CCN-02", "repeated-cancel": "CL-CCN-03", "confirm-multiple": "CL-PC-02"}


def test_render_clients_matrix_groups_clients_by_language_and_links_every_cell_to_its_frame_log(tmp_path: Path) -> None:
    clients = ClientsData([
        _column("pika", "Python", {"server-cancel": "passed", "repeated-cancel": "failed",
                                   "confirm-multiple": "not-applicable"}),
        _column("amqp", "Python", {"server-cancel": "passed", "repeated-cancel": "failed", "confirm-multiple": "passed"}),
        _column("amqp091-go", "Go", {"server-cancel": "passed", "repeated-cancel": "passed"})],
        list(RULES), {name: [rule] for name, rule in RULES.items()}, {"server-cancel": "a broker basic.cancel arrives"})
    assert [(language, [c.client for c in columns]) for language, columns in clients.groups] == [
        ("Python", ["pika", "amqp"]), ("Go", ["amqp091-go"])]
    data = ReportData(T0, "/r", 3, 8, [], [], [], {}, [], [], [], [], [], [], clients=clients)
    render_site(data, tmp_path)
    matrix = (tmp_path / "clients.html").read_text()
    assert matrix.index('data-language="Python">Python</th>') < matrix.index('data-language="Go">Go</th>')
    assert 'colspan="2" data-language="Python"' in matrix and 'colspan="1" data-language="Go"' in matrix
    assert 'class="cell v-failed"' in matrix and 'class="cell v-passed group-start"' in matrix
    assert 'class="cell v-none group-start" title="amqp091-go did not play confirm-multiple"' in matrix
    for client in ("pika", "amqp", "amqp091-go"):
        assert f'href="clients/{client}/server-cancel.html"' in matrix
    assert "a broker basic.cancel arrives" in matrix
    page = (tmp_path / "clients" / "pika" / "repeated-cancel.html").read_text()  # a failure: message, frames, test page
    assert "KeyError &lt;tag&gt;" in page and "basic.cancel" in page and "../../tests/pika-repeated-cancel.html" in page
    assert "consumer_tag=&#34;ctag1&#34;" in page and "capabilities=[consumer_cancel_notify, publisher_confirms]" in page
    passed = (tmp_path / "clients" / "amqp" / "server-cancel.html").read_text()  # a pass has its frame log too
    assert 'id="verdict">passed' in passed and passed.count("<tr class=") == 2 and "test page" not in passed
    assert "Not played" in (tmp_path / "clients" / "pika" / "confirm-multiple.html").read_text()
    client_page = (tmp_path / "clients" / "pika.html").read_text()
    assert 'href="../clients/pika/repeated-cancel.html"' in client_page and "Python" in client_page
    assert "Clients (3)" in (tmp_path / "index.html").read_text()


def test_a_clients_language_is_the_recorded_one_and_orders_the_columns() -> None:
    from reports.clients import column_order, language_name, scenario_order

    assert [language_name(r) for r in ("python", "node", "go", "c", "ruby")] == ["Python", "Node.js", "Go", "C", "Ruby"]
    assert language_name("rust") == "rust" and language_name(None) == "?"
    columns = [_column(c, language_name(recorded), {}) for c, recorded in (
        ("my-client", "rust"), ("php-amqplib", "php"), ("pika", "python"), ("kombu", "python"), ("amqplib", "node"),
        ("lost", None))]
    assert [c.client for c in sorted(columns, key=column_order)] == ["kombu", "pika", "amqplib", "php-amqplib",
                                                                     "lost", "my-client"]
    assert scenario_order({"b": 1, "a": 1, "c": 0}) == ["c", "a", "b"]


PLAYED = ("pika", "amqp", "amqplib")  # two languages: Python and Node.js
SCENARIOS = ["server-cancel", "repeated-cancel"]


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[Any]]]:
    """Real client runs (pika, py-amqp and Node's amqplib; a passing and a failing scenario) written to a lake."""
    from conformance.client_judge import runner
    from conformance.client_judge.record import write_client_run
    from conformance.drivers.registry import REGISTRY

    specs = [REGISTRY[c] for c in PLAYED if REGISTRY[c].installed_version()]
    require(len(specs) == len(PLAYED), "pika, py-amqp and amqplib (make .venv/.installed-stamp)")
    lake = tmp_path_factory.mktemp("client-lake")
    found = runner.run_clients(specs, runner.select(SCENARIOS), jobs=3)
    for spec in specs:
        write_client_run(lake, "b", spec.name, found[spec.name], T0, 1.0, 1, spec.language)
    return lake, found


@pytest.fixture(scope="module")
def collected(spark: Any, played: tuple[Path, dict[str, list[Any]]]) -> ClientsData:
    from reports.build import read_lake
    from reports.clients import collect_clients

    data = collect_clients(read_lake(spark, played[0]), [])
    assert data is not None
    return data


@pytest.mark.spark
def test_collect_clients_reads_the_latest_client_runs_grouped_by_language(
        collected: ClientsData, played: tuple[Path, dict[str, list[Any]]]) -> None:
    _lake, found = played
    assert [(c.client, c.version, c.language) for c in collected.clients] == [
        ("amqp", found["amqp"][0].client_version, "Python"), ("pika", found["pika"][0].client_version, "Python"),
        ("amqplib", found["amqplib"][0].client_version, "Node.js")]
    assert [language for language, _columns in collected.groups] == ["Python", "Node.js"]
    assert {(c.client, name): s.verdict for c in collected.clients for name, s in c.scenarios.items()} == {
        ("amqp", "repeated-cancel"): "failed", ("amqp", "server-cancel"): "passed",
        ("pika", "repeated-cancel"): "failed", ("pika", "server-cancel"): "passed",
        ("amqplib", "repeated-cancel"): "failed", ("amqplib", "server-cancel"): "passed"}
    assert collected.scenarios == SCENARIOS and collected.rules["repeated-cancel"] == ["CL-CCN-03"]
    assert collected.titles["server-cancel"] == "a broker basic.cancel reaches the application"
    for column in collected.clients:  # every scenario, passed or failed, carries its whole frame log
        for name, s in column.scenarios.items():
            assert [f["seq"] for f in s.frames] == list(range(len(s.frames))) and len(s.frames) > 8, (column.client, name)
            assert s.frames[0]["frame_type"] == "protocol-header" and s.frames[0]["direction"] == "out"
            assert any(f["method"] == "basic.cancel" and f["direction"] == "in" for f in s.frames)


@pytest.fixture(scope="module")
def client_site(collected: ClientsData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site rendered from those runs as `build_report` writes it from `collect_clients`."""
    out = tmp_path_factory.mktemp("client-site")
    render_site(ReportData(T0, "/r", 3, 6, [], [], [], {}, [], [], [], [], [], [], clients=collected), out)
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
def test_clients_matrix_and_a_cells_frame_log_in_chromium(browser: Any, served_clients: str) -> None:  # noqa: F811
    browser.get(f"{served_clients}/clients.html")
    languages = browser.execute_script(
        "return Array.from(document.querySelectorAll('#clients-matrix th.language')).map(th => [th.textContent, th.colSpan])")
    assert languages == [["Python", 2], ["Node.js", 1]]
    cells = browser.execute_script(
        "return Array.from(document.querySelectorAll('#clients-matrix td.cell a')).map(a => [a.closest('tr')"
        ".dataset.scenario, a.dataset.client, a.dataset.verdict, getComputedStyle(a.closest('td')).backgroundColor,"
        " a.getAttribute('href')])")
    colours = {"passed": "rgb(46, 157, 73)", "failed": "rgb(210, 60, 60)"}
    assert sorted((s, c, v) for s, c, v, _bg, _href in cells) == sorted(
        (s, c, "passed" if s == "server-cancel" else "failed") for s in SCENARIOS for c in PLAYED)
    for scenario, client, verdict, background, href in cells:
        assert background == colours[verdict] and href == f"clients/{client}/{scenario}.html"
    width = browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    assert width, "the matrix fits the window"
    browser.save_screenshot(str(artifacts() / "clients-matrix.png"))
    browser.find_element("css selector", 'a[data-client="amqplib"][href$="repeated-cancel.html"]').click()
    assert browser.current_url.endswith("/clients/amqplib/repeated-cancel.html")
    text = browser.execute_script("return document.querySelector('main').innerText")
    assert "FAILED" in text.upper() and "Unknown consumer" in text and "amqplib" in text
    rows = browser.execute_script("return Array.from(document.querySelectorAll('#scenario-frames tbody tr'))"
                                  ".map(tr => [tr.className, tr.cells[4].textContent, tr.cells[5].textContent])")
    assert len(rows) > 8 and rows[0] == ["out", "→", "protocol-header"]
    assert ["in", "←", "basic.cancel"] in rows and ["out", "→", "basic.consume"] in rows
    browser.save_screenshot(str(artifacts() / "client-amqplib-repeated-cancel.png"))
    browser.get(f"{served_clients}/clients/pika/server-cancel.html")  # a pass has its frame log too
    assert browser.execute_script("return document.querySelectorAll('#scenario-frames tbody tr').length") > 8


@pytest.fixture(scope="module")
def every_client_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Every registered client on every scenario (hand-made verdicts), served: the matrix at its real size."""
    from conformance.client_judge import scenarios  # noqa: F401  (registers the scenarios)
    from conformance.client_judge.scenario import SCENARIOS
    from conformance.drivers.registry import REGISTRY
    from reports.clients import column_order, language_name

    verdicts = ("passed", "passed", "failed", "not-applicable")
    columns = [_column(name, language_name(spec.language), {sc: verdicts[(i + j) % 4] for j, sc in enumerate(SCENARIOS)})
               for i, (name, spec) in enumerate(REGISTRY.items())]
    clients = ClientsData(sorted(columns, key=column_order), list(SCENARIOS),
                          {sc.id: list(sc.rules) for sc in SCENARIOS.values()},
                          {sc.id: sc.title for sc in SCENARIOS.values()})
    out = tmp_path_factory.mktemp("every-client-site")
    render_site(ReportData(T0, "/r", len(columns), len(columns) * len(SCENARIOS), [], [], [], {}, [], [], [], [], [],
                           [], clients=clients), out)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(out)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.browser
def test_eleven_clients_in_seven_languages_fit_a_1280_pixel_window(browser: Any,  # noqa: F811
                                                                   every_client_site: str) -> None:
    browser.set_window_size(1280, 1000)
    try:
        browser.get(f"{every_client_site}/clients.html")
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
        assert browser.execute_script(
            "const t = document.getElementById('clients-matrix'); return t.scrollWidth <= t.parentElement.clientWidth")
        # each language's heading spans exactly its libraries' columns
        spans = browser.execute_script("""
            const heads = Array.from(document.querySelectorAll('#clients-matrix th.language'));
            const libs = Array.from(document.querySelectorAll('#clients-matrix th.client'));
            return heads.map(h => { const mine = libs.filter(l => l.dataset.language === h.dataset.language);
              const r = h.getBoundingClientRect(), a = mine[0].getBoundingClientRect(),
                    b = mine[mine.length - 1].getBoundingClientRect();
              return [h.textContent, mine.length, Math.abs(r.left - a.left) < 2 && Math.abs(r.right - b.right) < 2]; });""")
        assert spans == [["Python", 5, True], ["Node.js", 1, True], ["Go", 1, True], ["Java", 1, True], ["C", 1, True],
                         ["Ruby", 1, True], ["PHP", 1, True]]
        browser.save_screenshot(str(artifacts() / "clients-matrix-every-client.png"))
    finally:
        browser.set_window_size(1400, 1000)

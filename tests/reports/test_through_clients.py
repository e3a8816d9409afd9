"""The client x rule matrix: laid out from hand-made cells, built by the real pipeline from a
lake written by the harness's own `ResultsWriter` (a raw run and a pika run of one broker, a rule
failing only through pika), that page checked in headless Chromium at two widths, and proven on
real runs: a broker that breaks ACK-05 for pika's connections only is flagged for pika."""

from __future__ import annotations

import functools
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from codec import ConnectionStartOk
from conformance.interpose.frames import Frame
from conformance.results.parts import ResultsWriter
from conformance.results.records import RunRecord, TestRecord
from reference_broker.server import EmbeddedBroker
from reports.model import Cell, ReportData, Target
from reports.through_clients import client_matrices, reasons_of, runs_to_explain
from tests.conformance.deviant import DeviantProxy, Io
from tests.conformance.deviations import AckMultipleAsSingle
from tests.conftest import cli_env
from tests.reports.test_browser import _QuietHandler, artifacts, browser  # noqa: F401  (the browser fixture)

T0 = datetime(2026, 11, 23, 4, 0, tzinfo=UTC)
BROKER = ("RabbitMQ", "3.10.8", "rabbitmq-3.10")
NOT_THROUGH = "not-applicable: pika: this check drives the wire through the raw codec client"
# rule -> client -> (verdict, message): ACK-03 passes raw and fails only through pika
RESULTS = {
    "ACK-03": {"raw": ("passed", None), "pika": ("failed", "expected channel.close 406 (ACK-03), pika raised KeyError")},
    "QOS-02": {"raw": ("passed", None), "pika": ("passed", None)},
    "PC-02": {"raw": ("failed", "expected basic.ack 1, got basic.ack 2"), "pika": ("not-applicable", NOT_THROUGH)},
    "CCN-01": {"raw": ("passed", None), "pika": ("not-applicable", NOT_THROUGH)},
}


def _target(client: str, run_id: str, product: str = "RabbitMQ") -> Target:
    label = f"{product} 3.10.8 · rabbitmq-3.10 · {client}"
    return Target(label, run_id, T0, product, "3.10.8", "rabbitmq-3.10", client, "amqp://guest@h/", 1, None, {}, {})


def test_client_matrix_flags_a_rule_passing_raw_and_failing_through_a_client() -> None:
    raw, pika, other = _target("raw", "r1"), _target("pika", "p1"), _target("raw", "g1", product="GarageMQ")
    matrix = {rule_id: {t.label: Cell(clients[t.client][0], t.run_id, 1, 0, ["ack-page"] if t.client == "pika" and
                                      clients[t.client][0] == "failed" else [])
                        for t in (raw, pika)} for rule_id, clients in RESULTS.items()}
    matrix["ACK-03"][other.label] = Cell("failed", "g1", 1, 1)
    rows = [type("Row", (), {"run_id": "p1", "rule_ids": ["PC-02", "CCN-01"], "verdict": "not-applicable",
                             "message": NOT_THROUGH})()]
    found = client_matrices([pika, other, raw], matrix, ["ACK-03", "QOS-02", "PC-02", "CCN-01", "X-1"],
                            reasons_of(rows * 2))
    assert len(found) == 1  # GarageMQ has one client: no matrix
    m = found[0]
    assert m.broker == "RabbitMQ 3.10.8 · rabbitmq-3.10" and [t.client for t in m.columns] == ["raw", "pika"]
    assert m.raw == "raw" and m.rules == ["ACK-03", "QOS-02", "PC-02", "CCN-01"]
    assert m.flagged == [("ACK-03", "pika")]  # PC-02 fails raw, so its not-applicable pika cell is no flag
    assert m.cells["ACK-03"]["pika"].pages == ["ack-page"]
    assert m.cells["CCN-01"]["pika"].reasons == [NOT_THROUGH]  # once, however many tests say it
    assert [r for r in m.rules if m.library_judged(r)] == ["ACK-03", "QOS-02"]


def test_runs_to_explain_names_the_latest_runs_of_brokers_with_several_clients() -> None:
    def run(run_id: str, client: str, latest: bool = True, profile: str = "rabbitmq-3.10") -> dict[str, Any]:
        return {"run_id": run_id, "product": "RabbitMQ", "version": "3.10.8", "profile": profile, "client": client,
                "latest": latest}

    runs = [run("r0", "raw", latest=False), run("r1", "raw"), run("p1", "pika"), run("c1", "pika", profile="client-side"),
            {**run("g1", "raw"), "product": "GarageMQ"}]
    assert runs_to_explain(runs) == ["p1", "r1"]
    assert runs_to_explain([run("r1", "raw"), run("c1", "pika", profile="client-side")]) == []


def write_two_clients(root: Path) -> None:
    """The lake of a raw run and a pika run of one RabbitMQ, written as the harness writes it."""
    for index, client in enumerate(("raw", "pika")):
        run_id = f"{client}-run"
        started = T0 + timedelta(minutes=index)
        writer = ResultsWriter(root, run_id)
        writer.write_run(RunRecord(run_id, "amqp://guest@127.0.0.1:5672/", client, "0.1.0", 1.0, started, *BROKER,
                                   finished=started + timedelta(seconds=30), exit_status=1, tests=len(RESULTS),
                                   client_version=None if client == "raw" else "1.3.2"))
        for rule_id, clients in RESULTS.items():
            verdict, message = clients[client]
            writer.add_test(TestRecord(run_id, f"conformance/suite/test_x.py::test_rule[{rule_id}]", [rule_id],
                                       "x", verdict, "failed" if verdict == "failed" else "passed", "call", started,
                                       message=message))
        writer.close()


@pytest.fixture(scope="module")
def through_site(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ReportData]:
    from reports.build import build_report

    lake = tmp_path_factory.mktemp("two-clients")
    write_two_clients(lake)
    out = tmp_path_factory.mktemp("two-clients-site")
    return out, build_report(spark, lake, out)


@pytest.mark.spark
def test_build_client_matrix_from_a_raw_and_a_pika_run(through_site: tuple[Path, ReportData]) -> None:
    out, data = through_site
    (m,) = data.client_matrices
    assert [(t.client, t.client_version) for t in m.columns] == [("raw", None), ("pika", "1.3.2")]
    assert {(r, c): cell.verdict for r, row in m.cells.items() for c, cell in row.items()} == {
        (r, c): verdict for r, clients in RESULTS.items() for c, (verdict, _) in clients.items()}
    assert m.flagged == [("ACK-03", "pika")]
    failing = m.cells["ACK-03"]["pika"]
    assert failing.reasons == [RESULTS["ACK-03"]["pika"][1]] and len(failing.pages) == 1
    assert (out / "tests" / f"{failing.pages[0]}.html").is_file()
    assert m.cells["CCN-01"]["pika"].reasons == [NOT_THROUGH]
    page = (out / "through" / f"{m.slug}.html").read_text()
    assert page.count('class="cell v-failed flagged"') == 1 and "passes raw, fails through pika" in page
    assert "fails through <b>pika</b>: a client bug or a rule the client cannot express" in (
        out / "rules" / "ACK-03.html").read_text()
    assert "fails through" not in (out / "rules" / "PC-02.html").read_text()
    for linking in ("index.html", "matrix.html"):
        assert f'href="through/{m.slug}.html"' in (out / linking).read_text()


@pytest.fixture(scope="module")
def served_through(through_site: tuple[Path, ReportData]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(through_site[0])))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# The flagged cell is on screen, inside its row, and not covered by anything; no cell's text is cut off
# (a cell whose content is wider or taller than its box); no two cells of a row overlap; no sideways scroll.
THROUGH_LAYOUT = """
const doc = document.documentElement;
const cell = document.querySelector('#through-matrix td.flagged');
const box = cell.getBoundingClientRect();
const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
const cells = Array.from(document.querySelectorAll('#through-matrix tr:not(.hidden) > *'));
const overlaps = Array.from(document.querySelectorAll('#through-matrix tr:not(.hidden)')).flatMap(row => {
  const boxes = Array.from(row.children).map(c => c.getBoundingClientRect());
  return boxes.slice(1).filter((b, i) => b.left < boxes[i].right - 0.5);
}).length;
return {overflow: doc.scrollWidth - doc.clientWidth,
        flaggedVisible: box.width > 0 && box.height > 0 && box.left >= 0 && box.right <= doc.clientWidth
                        && cell.contains(hit),
        flagText: cell.innerText.includes('passes raw, fails through pika'),
        clipped: cells.filter(c => c.scrollWidth > c.clientWidth + 1 || c.scrollHeight > c.clientHeight + 1).length,
        overlaps: overlaps,
        shown: document.getElementById('through-count').textContent};
"""


@pytest.mark.browser
@pytest.mark.spark
@pytest.mark.parametrize("width", [1400, 1024])
def test_client_matrix_page_in_chromium(browser: Any, served_through: str,  # noqa: F811
                                        through_site: tuple[Path, ReportData], width: int) -> None:
    (m,) = through_site[1].client_matrices
    browser.set_window_size(width, 900)
    try:
        browser.get(f"{served_through}/through/{m.slug}.html")
        layout = browser.execute_script(THROUGH_LAYOUT)
        assert layout == {"overflow": 0, "flaggedVisible": True, "flagText": True, "clipped": 0, "overlaps": 0,
                          "shown": "2 of 4 rules"}, layout  # ACK-03 and QOS-02 ran through pika
        browser.save_screenshot(str(artifacts() / f"through-{width}.png"))
        browser.find_element("id", "filter-library").click()
        assert browser.execute_script("return document.getElementById('through-count').textContent") == "4 of 4 rules"
        title = browser.execute_script(
            "return document.querySelector('#through-matrix tr[data-rule=\"CCN-01\"] td[data-client=\"pika\"]').title")
        assert NOT_THROUGH in title
        browser.get(f"{served_through}/rules/ACK-03.html")
        note = browser.execute_script("return document.querySelector('p.flag-note').innerText")
        assert "fails through pika: a client bug or a rule the client cannot express" in note
        assert browser.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth") == 0
        browser.save_screenshot(str(artifacts() / f"through-rule-ACK-03-{width}.png"))
    finally:
        browser.set_window_size(1400, 1000)


class AckMultipleAsSingleForPika(AckMultipleAsSingle):
    """The broker reads basic.ack multiple=true as single (ACK-05), on pika's connections only (the
    product in its connection.start-ok): a rule that passes raw and fails through pika."""

    name = "ack_multiple_as_single_for_pika"

    def __init__(self) -> None:
        super().__init__()
        self.pika = False

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, ConnectionStartOk):
            self.pika = "pika" in str(m.client_properties.get("product", "")).lower()
        if self.pika:
            super().client(frame, io)
        else:
            io.to_broker(frame.raw)


def run_suite(out: Path, url: str, client: str, *select: str) -> int:
    """`amqp-conformance run` as a user runs it, into the lake under `out`."""
    done = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--broker-url", url, "--out", str(out),
                           "--client", client, "--run-id", f"{client}-run", "--select", *select],
                          capture_output=True, text=True, timeout=600, env=cli_env())
    return done.returncode


@pytest.mark.spark
def test_a_rule_broken_for_pika_only_is_flagged_from_real_runs(spark: Any, tmp_path: Path) -> None:
    from reports.build import build_report

    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), AckMultipleAsSingleForPika) as proxy:
        assert run_suite(tmp_path, proxy.url, "raw", "ACK-05") == 0
        assert not proxy.actions  # the raw driver's connections are left alone
        assert run_suite(tmp_path, proxy.url, "pika", "ACK-05") == 1
        assert proxy.actions and set(proxy.actions) == {AckMultipleAsSingleForPika.name}
    data = build_report(spark, tmp_path / "results", tmp_path / "site")
    (m,) = data.client_matrices
    assert [t.client for t in m.columns] == ["raw", "pika"]
    assert ("ACK-05", "pika") in m.flagged and {client for _, client in m.flagged} == {"pika"}
    assert m.cells["ACK-05"]["raw"].verdict == "passed" and m.cells["ACK-05"]["pika"].pages
    assert "passes raw, fails through pika" in (tmp_path / "site" / "through" / f"{m.slug}.html").read_text()

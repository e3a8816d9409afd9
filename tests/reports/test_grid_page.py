"""The grid page (reports.grid): laid out from hand-made report data (letters, the interop score,
changed cells as regression, flake or change, clients x brokers), and the page the real pipeline
built from the synthetic lake checked in headless Chromium at 1600, 1280 and 1024 px."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from reports.grid import grid_data
from reports.model import Cell, ClientMatrix, Flake, ReportData, Rule, Target
from tests.reports.conftest import Site
from tests.reports.test_browser import LAYOUT, artifacts, browser, served  # noqa: F401  (fixtures)

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _target(product: str, version: str, profile: str, client: str = "raw", score: float | None = 1.0) -> Target:
    return Target(f"{product} {version} · {profile} · {client}", f"{product}-{client}", T0, product, version, profile,
                  client, "amqp://guest@h/", 2, score, {}, {"ack": score})


def _data() -> ReportData:
    rmq, garage, plain = (_target("RabbitMQ", "4.3.6", "rabbitmq-4.3"), _target("GarageMQ", "0.7", "rabbitmq-4.3"),
                          _target("Other", "1", "amqp-0-9-1"))
    pika = _target("RabbitMQ", "4.3.6", "rabbitmq-4.3", "pika", 0.5)
    rules = [Rule("ACK-01", "ack", "tags", "", ""), Rule("ACK-02", "ack", "multiple", "", ""),
             Rule("QOS-01", "qos", "prefetch", "", "")]
    verdicts = {"ACK-01": [(rmq, "passed"), (garage, "passed"), (plain, "failed"), (pika, "passed")],
                "ACK-02": [(rmq, "passed"), (garage, "failed"), (plain, "passed")],
                "QOS-01": [(rmq, "not-applicable"), (garage, "needs-admin")]}
    matrix = {r: {t.label: Cell(v, t.run_id, 1, v == "failed", ["page-1"] if v == "failed" else [])
                  for t, v in cells} for r, cells in verdicts.items()}
    history = {"ACK-02": {garage.label: [("g0", "passed"), ("g1", "failed")], rmq.label: [("r0", "failed"), ("r1", "passed")]},
               "ACK-01": {rmq.label: [("r0", "passed"), ("r1", "passed")]}}
    return ReportData(T0, "lake", 7, 10, ["ack", "qos"], [rmq, garage, plain, pika], rules, matrix, [], [], [],
                      [Flake(rmq.label, "ACK-02", "ack", 4, 3, 2, "PFPF", "passed", 0.75)], [], [], rule_history=history,
                      client_matrices=[ClientMatrix("RabbitMQ 4.3.6 · rabbitmq-4.3", [rmq, pika], ["ACK-01"], {})])


def test_the_grid_has_a_letter_per_cell_and_scores_what_every_compatible_broker_passes() -> None:
    g = grid_data(_data())
    assert g is not None
    assert [t.product for t in g.brokers] == ["GarageMQ", "Other", "RabbitMQ"] and g.compatible == [True, False, True]
    ack = g.areas[0]
    assert [r[0] for r in ack.rules] == ["ACK-01", "ACK-02"]
    assert [c.letter if c else "" for c in ack.rules[0][2]] == ["P", "F", "P"]
    assert [c.href if c else "" for c in (ack.rules[1][2][0], ack.rules[0][2][0])] == [
        "tests/page-1.html", "rules/ACK-01.html"]
    # ACK-01: both compatible brokers pass (the plain broker's failure does not count); ACK-02: GarageMQ fails
    assert ack.interop == 0.5 and g.areas[1].interop is None and g.interop == 0.5
    assert [c.letter if c else "" for c in g.areas[1].rules[0][2]] == ["A", "", "N"]
    garage, rmq = ack.rules[1][2][0], ack.rules[1][2][2]
    assert garage is not None and rmq is not None
    assert (garage.change, garage.before) == ("regression", "passed")  # passed -> failed on the same target
    assert (rmq.change, rmq.before) == ("flake", "failed")  # it flips in that target's history
    assert ack.changed == 2 and g.changed == 2 and g.flakes == ["ACK-02 on RabbitMQ 4.3.6 · rabbitmq-4.3 · raw"]
    clients = {row.client: row.cells for row in g.clients}
    assert list(clients) == ["raw", "pika"]
    assert clients["pika"] == [None, None, (0.5, "through/rabbitmq-4.3.6-rabbitmq-4.3.html")]


def test_no_broker_no_grid() -> None:
    data = _data()
    data.targets = [t for t in data.targets if t.client == "pika"]
    assert grid_data(data) is None


@pytest.mark.browser
@pytest.mark.spark
@pytest.mark.parametrize("width", [1600, 1280, 1024])
def test_the_grid_page_fits_and_filters(browser: Any, served: str, site: Site, width: int) -> None:  # noqa: F811
    browser.set_window_size(width, 1000)
    try:
        browser.get(f"{served}/grid.html")
        browser.execute_script("document.getElementById('grid-open').click()")
        layout = browser.execute_script(LAYOUT)
        assert layout["overflow"] == 0 and layout["mainBelowTop"], layout
        letters = browser.execute_script("return document.querySelectorAll('table.grid td a').length")
        assert letters > 0
        broken = browser.execute_script(
            "return Array.from(document.querySelectorAll('table.grid td a')).filter(a => !a.getAttribute('href')).length")
        assert broken == 0
        browser.save_screenshot(str(artifacts() / f"grid-{width}.png"))
        first = site.data.targets[0].label.lower()
        browser.execute_script(f"const f = document.getElementById('grid-filter-target'); f.value = {first[:12]!r};"
                               "f.dispatchEvent(new Event('input'))")
        hidden = browser.execute_script("return document.querySelectorAll('table.grid td.hidden').length")
        shown = browser.execute_script("return document.querySelectorAll('table.grid td:not(.hidden)').length")
        assert shown > 0 and (hidden > 0 or len({t.label for t in site.data.targets}) == 1)
    finally:
        browser.set_window_size(1400, 1000)

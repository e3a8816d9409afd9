"""`bench/operation_latency.py` against two embedded reference brokers: its table, its JSON line of
ratios (the shape only: timings are never asserted), nothing left behind, and its exit statuses."""

from __future__ import annotations

import base64
import io
import json
import urllib.request
from contextlib import redirect_stderr, redirect_stdout

from bench import operation_latency
from reference_broker.server import EmbeddedBroker


def listed(broker: EmbeddedBroker, kind: str) -> list[str]:
    """The names the broker's management API lists (`queues` or `exchanges`)."""
    url = str(broker.management_url).replace("guest:guest@", "")
    request = urllib.request.Request(f"{url}/api/{kind}",
                                     headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return [item["name"] for item in json.load(reply)]


def test_two_brokers_give_every_operation_and_its_ratio_and_leave_nothing() -> None:
    with EmbeddedBroker(management_port=0) as first, EmbeddedBroker() as second, \
            redirect_stdout(io.StringIO()) as out:
        exchanges = listed(first, "exchanges")
        assert operation_latency.main([first.url, second.url, "--calls", "2"]) == 0
        assert listed(first, "queues") == [] and listed(first, "exchanges") == exchanges  # nothing left
    lines = out.getvalue().strip().splitlines()
    ratios = json.loads(lines[-1])
    assert len(ratios) == 10 and all(key.endswith(": broker 1 / broker 0") for key in ratios)
    assert all(isinstance(v, float | int) and v > 0 for v in ratios.values())
    assert any(line.startswith("declare quorum") for line in lines)


def test_bad_options_are_exit_4_and_an_unreachable_broker_exit_3() -> None:
    with redirect_stderr(io.StringIO()):
        assert operation_latency.main(["--calls", "0"]) == 4
        assert operation_latency.main(["--bogus"]) == 4
        assert operation_latency.main(["amqp://guest:guest@127.0.0.1:1/"]) == 3

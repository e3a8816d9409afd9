"""The socket fuzzer (tests/reliability/fuzz.py) against the reference broker: a few hundred
cases in the default run, 100,000 with a broker subprocess and the memory check when `slow`
tests run, the atheris harness over the sans-IO engine, and one regression test per bug the
fuzzer found."""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys

import pytest

from codec import (
    PROTOCOL_HEADER,
    BasicAck,
    ChannelOpen,
    ConnectionOpen,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTuneOk,
    FrameReader,
    MethodFrame,
    encode_frame,
    encode_method,
)
from reference_broker.config import BrokerConfig
from reference_broker.core import BrokerCore, Send
from reference_broker.protocol.connection import ServerConnection, Write
from tests.conftest import require
from tests.reliability.conftest import StartBroker
from tests.reliability.fuzz import ROOT, fuzz, run_case, run_with_subprocess
from tests.reliability.fuzz_cases import strategies
from tests.reliability.fuzz_frames import Case

pytestmark = pytest.mark.end_to_end  # whole commands as subprocesses: `make test-end-to-end`

SEED = int(os.environ.get("AMQPC_FUZZ_SEED", "20251122"))  # fixed: the default run is repeatable
OPENED = (PROTOCOL_HEADER + encode_method(0, ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest", "en_US"))
          + encode_method(0, ConnectionTuneOk(2047, 131072, 0)) + encode_method(0, ConnectionOpen(virtual_host="/"))
          + encode_method(1, ChannelOpen()))


def test_fuzz_fast_run_gets_the_rules_outcomes(start_broker: StartBroker, caplog: pytest.LogCaptureFixture) -> None:
    """A few hundred cases over real sockets: every outcome is the one the rules give, the
    bystander's round trips all work, nothing is logged as an error, and nothing is left over."""
    caplog.set_level(logging.WARNING)
    broker = start_broker()
    report = fuzz((broker.host, broker.port), 500, SEED, health_every=25, timeout=10.0)
    assert report.ok, "\n".join(report.lines())
    assert report.count == 500 and report.round_trips == 21
    assert set(report.kinds) == set(strategies()), "\n".join(report.lines())  # every kind ran
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors  # asyncio logs an exception in a protocol callback as an ERROR
    server = broker.server
    left = broker.call(lambda: (len(server.clients), len(server.core.connections),
                                sum(len(v.queues) for v in server.core.vhosts.values())))
    assert all(n <= 1 for n in left), left  # at most the bystander, whose close may be in flight


def test_fuzz_fails_a_broker_that_breaks_the_rules(start_broker: StartBroker) -> None:
    """The oracle has teeth: with three of the broker's named faults on (ERR-02, FRM-03,
    QOS-01), each kind of case they concern fails, shrunk to a short case."""
    broker = start_broker(faults=["soft_errors_close_connection", "frame_max_not_enforced",
                                  "prefetch_size_accepted"])
    kinds = ("after_channel_close", "oversized", "hard_method")
    report = fuzz((broker.host, broker.port), 90, SEED, kinds=kinds, timeout=3.0)
    failed = {kind for kind in kinds for failure in report.failures if failure.startswith(f"<{kind} at")}
    assert failed == set(kinds), "\n".join(report.lines())


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_fuzz_100k_cases_with_flat_memory() -> None:
    """100,000 cases against `python -m reference_broker`: VmRSS at the end at most 16 MiB above
    VmRSS after the first 25,000 (the allocator's high water is reached by then; a leak of
    ~220 B per connection fails), and no ERROR line or traceback in the broker's log."""
    report = run_with_subprocess(100_000, SEED, warmup=25_000, rss_bound_mib=16.0)
    print("\n".join(report.lines()))
    assert report.ok, "\n".join(report.lines())
    assert report.count == 100_000


def test_fuzz_atheris_engine_harness_runs_clean() -> None:
    """The atheris harness over the sans-IO engine, briefly (CI installs atheris: dev extra)."""
    require(importlib.util.find_spec("atheris") is not None, "atheris is not installed (pip install -e '.[dev]')")
    run = subprocess.run([sys.executable, "-m", "tests.reliability.fuzz_engine", "-runs=3000", "-seed=1",
                          "-max_len=512", "-len_control=0"], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Done 3000 runs" in run.stderr, run.stderr[-3000:]


# -- regressions: each bug the fuzzer found ------------------------------------------------
def engine_replies(data: bytes) -> list[tuple[str, int]]:
    """Feed one batch to a fresh sans-IO engine; the methods it writes, with reply codes."""
    engine, reader = ServerConnection(1, BrokerCore(BrokerConfig())), FrameReader(frame_max=0)
    for out in engine.receive_data(data, 1):
        reader.receive_data(out.data if isinstance(out, Write) else engine.encode(out) if isinstance(out, Send)
                            else b"")
    return [(f.method.NAME, getattr(f.method, "reply_code", 0)) for f in reader.frames()
            if isinstance(f, MethodFrame) and not isinstance(f.method, ConnectionStart)]


def test_regression_connection_method_on_an_unopened_channel_is_504(start_broker: StartBroker) -> None:
    """ERR-04 "any method before channel.open" is 504, connection.* included (the engine said
    503 before the core could); on an open channel it stays 503 and a closing one drops it."""
    broker = start_broker()
    address = (broker.host, broker.port)
    unopened = Case("unopened_channel", "opened", (encode_method(2, ConnectionStart()),), ("close 504",))
    assert run_case(address, unopened) == "close 504"
    opened = Case("connection_on_channel", "opened", (encode_method(1, ConnectionStart()),), ("close 503",))
    assert run_case(address, opened) == "close 503"
    closing = Case("after_channel_close", "opened", (encode_method(1, BasicAck(delivery_tag=7)),
                   encode_method(1, ConnectionStart()), encode_frame(9, 1, b"")), ("ch-close 406 > close 501",))
    assert run_case(address, closing) == "ch-close 406 > close 501"  # ERR-03: dropped while closing


def test_regression_replies_before_a_hard_error_in_one_batch_are_sent() -> None:
    """A reply the core made earlier in the same input batch (pipelined channel.open, then a
    connection error) was dropped: `encode` ran after the engine had become CLOSING."""
    assert engine_replies(OPENED + encode_method(1, ChannelOpen())) == [
        ("connection.tune", 0), ("connection.open-ok", 0), ("channel.open-ok", 0), ("connection.close", 504)]


def test_regression_input_after_the_broker_close_gets_no_second_close(start_broker: StartBroker) -> None:
    """After its connection.close the broker answers only close/close-ok; a malformed frame
    then made it send a second connection.close (501 after 504)."""
    data = encode_method(1, ChannelOpen()) + encode_frame(9, 1, b"")
    assert engine_replies(OPENED + data)[-2:] == [("channel.open-ok", 0), ("connection.close", 504)]
    broker = start_broker()
    case = Case("after_close", "opened", (data,), ("close 504",), pipelined=True)
    assert run_case((broker.host, broker.port), case) == "close 504"

"""The suite through client libraries (conformance/plugin/through_clients.py).

The recording relay copies bytes unchanged and records both directions through the codec; a run
with `--client X` drives the client-capable tests through library X and reports every other
test as not-applicable, with the reason; the broker sees the library's own client-properties.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from codec import ConnectionStartOk, MethodFrame
from conformance.drivers.adapter import load_driver
from conformance.drivers.interface import Recorder
from conformance.drivers.relay import recording_relay
from conformance.plugin.through_clients import relayed
from conformance.results.parts import read_table
from conformance.suite.steps.machine_support import ENV_SHRINK
from conformance.suite.through_clients.machine_clients import run_client_ack_machine
from reference_broker.server import EmbeddedBroker
from tests.conftest import cli_env

pytestmark = pytest.mark.end_to_end  # whole commands as subprocesses: `make test-end-to-end`

# what each library calls itself in connection.start-ok (its own client-properties)
PRODUCTS = {"pika": "Pika Python Client Library", "amqp": "py-amqp", "aio-pika": "aiormq"}


@pytest.fixture(scope="module")
def broker() -> EmbeddedBroker:
    with EmbeddedBroker() as running:
        yield running


@pytest.mark.parametrize("library", sorted(PRODUCTS))
def test_the_broker_sees_the_library_s_client_properties(broker: EmbeddedBroker, library: str) -> None:
    recorder = Recorder()
    with recording_relay(broker.host, broker.port, recorder) as relay:
        driver = load_driver(library, 5.0)
        driver.connect(relayed(broker.url, relay.port))
        ch = driver.open_channel()
        queue = driver.declare_queue(ch, "")
        driver.publish(ch, "", queue, b"through the relay")
        got = driver.get(ch, queue, no_ack=True)
        driver.close()
    assert got is not None and got.body == b"through the relay"
    start_oks = [r.frame.method for r in recorder.frames
                 if r.direction == "out" and isinstance(r.frame, MethodFrame) and isinstance(r.frame.method, ConnectionStartOk)]
    assert len(start_oks) == 1
    assert PRODUCTS[library] in str(start_oks[0].client_properties.get("product")), start_oks[0].client_properties
    directions = {r.direction for r in recorder.frames}
    assert directions == {"in", "out"} and len({r.connection for r in recorder.frames}) == 1


def test_relayed_keeps_credentials_and_vhost() -> None:
    assert relayed("amqp://u:p@broker.example:5672/v%2fh", 1234) == "amqp://u:p@127.0.0.1:1234/v%2fh"
    assert relayed("amqp://broker:5672/", 9) == "amqp://127.0.0.1:9/"


def _run(tmp: Path, *args: str) -> tuple[int, str, dict[str, tuple[str, str]]]:
    out = tmp / "out"
    done = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--out", str(out), *args], cwd=tmp,
                          capture_output=True, text=True, timeout=600, env=cli_env())
    tests = {t["test_id"].split("::")[-1]: (t["verdict"], t.get("message") or "")
             for t in read_table(out / "results", "tests").to_pylist()}
    return done.returncode, done.stdout + done.stderr, tests


@pytest.mark.parametrize("library", ["pika", "amqp"])
def test_client_runs_the_tests_it_can_express_and_says_why_not_for_the_rest(tmp_path: Path, library: str) -> None:
    status, output, tests = _run(tmp_path, "--client", library, "--select", "ACK-05", "ACK-03", "PC-05")
    assert status == 0, output
    through = {name: v for name, v in tests.items() if name.startswith(("test_ack_multiple_settles",
                                                                          "test_an_unknown_tag_closes",
                                                                          "test_every_publish_is_confirmed",
                                                                          "test_acknowledgements_through_the_client",
                                                                          "test_confirms_through_the_client"))}
    assert len(through) == 5 and {v for v, _ in through.values()} == {"passed"}, through
    others = {name: v for name, v in tests.items() if name not in through}
    assert others and all(v == "not-applicable" and library in why for v, why in others.values()), others
    frames = read_table(tmp_path / "out" / "results", "frames").to_pylist()
    assert {f["test_id"].split("::")[-1] for f in frames} >= set(through), "a verdict through a client has no frames"
    (run,) = read_table(tmp_path / "out" / "results", "runs").to_pylist()
    assert (run["client"], run["client_version"]) == (library, version(library))  # the report's column header


def test_a_library_the_broker_will_not_let_in_judges_nothing_and_says_why(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """py-amqp logs in with AMQPLAIN when it is offered; a broker that offers it and refuses its
    logins (`amqplain_refused`; GarageMQ offers PLAIN alone and php-amqplib sends AMQPLAIN all the
    same) lets the library judge nothing: `broken` with the broker's close, never a failure of the
    rule the test was about (the raw suite's ACC-06 is where the login is judged)."""
    monkeypatch.setenv("AMQPC_BROKER_FAULTS", "amqplain_refused")
    status, output, tests = _run(tmp_path, "--client", "amqp", "--select", "ACK-05")
    assert status == 2, output
    judged = {name: v for name, v in tests.items() if v[0] != "not-applicable"}
    assert judged and all(v == "broken" for v, _ in judged.values()), judged
    assert all("amqp could not open a connection: the broker closed it during the handshake (connection closed 403"
               in why and "AMQPLAIN" in why for _, why in judged.values()), judged


def test_the_raw_run_does_not_collect_the_library_tests(tmp_path: Path) -> None:
    status, output, tests = _run(tmp_path, "--select", "ACK-05")
    assert status == 0, output
    assert tests and not any(name.startswith("test_ack_multiple_settles") for name in tests)
    (run,) = read_table(tmp_path / "out" / "results", "runs").to_pylist()
    assert (run["client"], run["client_version"]) == ("raw", None)


# each fault breaks one rule the client-driven acks machine checks (reference_broker/faults.py);
# every library meets at least one, and every library passes the conforming broker
MACHINE_CASES = [(library, ()) for library in sorted(PRODUCTS)] + [
    ("pika", ("double_ack_accepted",)), ("amqp", ("requeue_to_tail",)), ("aio-pika", ("redelivered_not_set",)),
    ("amqp", ("no_requeue_on_channel_close",))]


@pytest.mark.parametrize(("library", "faults"), MACHINE_CASES, ids=lambda v: "+".join(v) if isinstance(v, tuple) else v)
def test_the_acks_machine_through_a_client_passes_only_a_conforming_broker(library: str, faults: tuple[str, ...],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_SHRINK, "0")  # a failure matters here, not its minimal form
    recorder = Recorder()
    with EmbeddedBroker(faults=list(faults)) as running, \
            recording_relay(running.host, running.port, recorder) as relay:
        drivers = []

        def make() -> object:
            driver = load_driver(library, 5.0)
            driver.connect(relayed(running.url, relay.port))
            drivers.append(driver)
            return driver

        try:
            if not faults:
                run_client_ack_machine(make, "rabbitmq-3.10", recorder=recorder, examples=40, steps=10)  # type: ignore[arg-type]
            else:
                with pytest.raises(AssertionError, match=r"rules (say|allow)"):
                    run_client_ack_machine(make, "rabbitmq-3.10", recorder=recorder, examples=40, steps=10)  # type: ignore[arg-type]
        finally:
            for driver in drivers:
                driver.close()

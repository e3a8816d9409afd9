"""End-to-end tests of the pytest plugin (conformance/plugin/hooks.py) on tiny synthetic suites.

Each test writes a suite into pytester's directory and runs pytest in-process against the
embedded reference broker (one for the module), or against `WedgeProxy`, the relay in front
of it that stops answering once its trigger file exists. Every wait is scaled down
(`--timeout-scale 0.1`), so a wedged broker costs about a second.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import allure  # noqa: F401 - imported once here rather than by every in-process run
import hypothesis  # noqa: F401
import pytest

from conformance.interpose.relay import Interposer, Link, Plumbing, Relay, RelayThread, Transform
from conformance.plugin.health import NameRegistry, find_leaks
from conformance.results.parts import read_table
from conformance.run.admin import NoAdmin
from conformance.suite import SUITE_DIR
from reference_broker.server import EmbeddedBroker

pytestmark = pytest.mark.end_to_end  # whole commands as subprocesses: `make test-end-to-end`

pytest_plugins = ["pytester"]

VERDICT_SUITE = '''
import pytest
from hypothesis import given, settings, strategies as st

from codec import BasicAck, BasicGet, BasicGetEmpty, BasicGetOk, QueueDeclare, QueueDeclareOk
from conformance.drivers.raw import ChannelClosed
from conformance.plugin.verdicts import HarnessError, non_strict


@pytest.mark.rules("ACK-03")
@pytest.mark.clauses("ACK-03.a")
def test_passes(connect, names):
    client = connect()
    ch = client.channel()
    client.rpc(ch, QueueDeclare(queue=names.queue()), QueueDeclareOk)
    client.send(ch, BasicAck(delivery_tag=77))
    with pytest.raises(ChannelClosed):
        client.rpc(ch, BasicGet(queue="whatever"), BasicGetOk, BasicGetEmpty)


@pytest.mark.rules("ACK-04")
def test_fails_with_a_close(connect):
    client = connect()
    ch = client.channel()
    client.send(ch, BasicAck(delivery_tag=5))
    client.rpc(ch, BasicGet(queue="whatever"), BasicGetOk, BasicGetEmpty)


@pytest.mark.rules("ACK-05")
def test_fails_an_assertion(target):
    assert target.profile.name == "no such profile"


@pytest.mark.rules("QOS-01")
def test_non_strict(target):
    non_strict("allowed by the spec")


@pytest.mark.rules("PC-01")
def test_needs_admin(admin):
    admin.put_policy(admin.vhost, "amqpc.p", "^x$", {"max-length": 1})


@pytest.fixture
def short_consumer_timeout(admin):
    admin.set_global("consumer_timeout", 1000)


@pytest.mark.rules("TMO-01")
def test_fixture_needs_admin(short_consumer_timeout):
    pass


@pytest.mark.rules("TMO-3x-1")
def test_not_applicable(target):
    raise AssertionError("never runs on rabbitmq-4.3")


@pytest.mark.rules("CCN-01")
def test_harness_error(target):
    raise HarnessError("the harness broke")


@pytest.mark.rules("CCN-02")
def test_bug_in_the_test(target):
    {}["missing"]


@pytest.mark.rules("CCN-03")
def test_plain_skip(target):
    pytest.skip("no reason given")


@pytest.mark.rules("NOPE-01")
def test_unknown_rule(target):
    pass


@pytest.mark.rules("ACK-03")
@pytest.mark.clauses("ACK-04.a")
def test_clause_of_another_rule(target):
    pass


@pytest.mark.rules("QOS-02")
@settings(database=None, max_examples=50, deadline=None)
@given(st.integers(0, 100))
def test_hypothesis(n):
    assert n < 10


def test_without_rules():
    pass
'''

EXPECTED = {
    "test_passes": "passed",
    "test_fails_with_a_close": "failed",
    "test_fails_an_assertion": "failed",
    "test_non_strict": "non-strict",
    "test_needs_admin": "needs-admin",
    "test_fixture_needs_admin": "needs-admin",
    "test_not_applicable": "not-applicable",
    "test_harness_error": "broken",
    "test_bug_in_the_test": "broken",
    "test_plain_skip": "broken",
    "test_unknown_rule": "broken",
    "test_clause_of_another_rule": "broken",
    "test_hypothesis": "failed",
}


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as embedded:
        yield embedded


def _tests_by_name(results: Path) -> dict[str, dict[str, Any]]:
    return {str(r["test_id"]).split("::")[-1]: r for r in read_table(results, "tests").to_pylist()}


def test_verdicts_summary_and_results(pytester: pytest.Pytester, broker: EmbeddedBroker) -> None:
    pytester.makepyfile(test_suite=VERDICT_SUITE)
    results = pytester.path / "results"
    run = pytester.runpytest("test_suite.py", "--broker-url", broker.url, "--results-dir", str(results), "--run-id", "run-1",
                             "--hypothesis-seed", "42")
    assert run.ret == 2  # broken verdicts, no broker trouble
    run.stdout.fnmatch_lines(["*amqp-conformance verdicts*", "ack * 1 * 2 *", "broken: *test_harness_error*",
                              "not run: 2 tests need --broker-admin; rerun with --broker-admin http*",
                              "amqp-conformance: 13 tests (1 passed, 3 failed, 1 non-strict, 2 not run: needs admin, "
                              "1 not-applicable, 5 broken), profile rabbitmq-4.3; exit status 2: harness or environment "
                              "error"])
    tests = _tests_by_name(results)
    assert {name: r["verdict"] for name, r in tests.items()} == EXPECTED
    close = tests["test_fails_with_a_close"]
    assert (close["reply_scope"], close["reply_code"], close["reply_class_id"], close["reply_method_id"]) == (
        "channel", 406, 60, 80)
    assert tests["test_passes"]["reply_code"] == 406  # the close it expected, from its frames
    assert tests["test_needs_admin"]["message"].startswith("needs --broker-admin")
    assert "unknown rule id 'NOPE-01'" in str(tests["test_unknown_rule"]["message"])
    assert "clause ACK-04.a belongs to rule ACK-04" in str(tests["test_clause_of_another_rule"]["message"])
    assert tests["test_passes"]["clause_ids"] == ["ACK-03.a"] and tests["test_unknown_rule"]["clause_ids"] is None
    assert tests["test_harness_error"]["message"] == "HarnessError: the harness broke"
    shrunk = tests["test_hypothesis"]
    assert "n=10" in str(shrunk["minimal_example"]) and shrunk["hypothesis_seed"] == "42"
    assert tests["test_passes"]["rule_ids"] == ["ACK-03"] and tests["test_passes"]["area"] == "ack"
    frames = read_table(results, "frames", "run-1").to_pylist()
    mine = [f for f in frames if str(f["test_id"]).endswith("test_passes")]
    assert [f["seq"] for f in mine] == list(range(len(mine))) == list(range(tests["test_passes"]["frames"]))
    ack = next(f for f in mine if f["method"] == "basic.ack")
    assert (ack["direction"], ack["delivery_tag"], ack["class_id"], ack["method_id"]) == ("out", 77, 60, 80)
    (record,) = read_table(results, "runs").to_pylist()
    assert (record["run_id"], record["profile"], record["exit_status"], record["tests"]) == (
        "run-1", "rabbitmq-4.3", 2, len(EXPECTED))
    assert "guest:guest" not in record["broker_url"] and record["finished"] >= record["started"]


def test_all_passing_run_exits_0_and_cleans_up(pytester: pytest.Pytester, broker: EmbeddedBroker) -> None:
    pytester.makepyfile(test_ok='''
        import pytest
        from codec import QueueDeclare, QueueDeclareOk

        @pytest.mark.rules("ACK-01")
        def test_declares(connect, names):
            client = connect()
            client.rpc(client.channel(), QueueDeclare(queue=names.queue()), QueueDeclareOk)

        @pytest.mark.rules("ACK-02")
        def test_forgets_its_queue(connect, names):
            client = connect()
            client.rpc(client.channel(), QueueDeclare(queue=names.queue("leak")), QueueDeclareOk)
            names.queues.clear()  # the fixture will not delete it
    ''')
    run = pytester.runpytest("test_ok.py", "--broker-url", broker.url)
    assert run.ret == 0
    run.stdout.fnmatch_lines(["ack * 2 * . *", "leftover (this run, found by passive declare): queue amqpc.test_forgets_its_queue.leak.*",
                              "amqp-conformance: 2 tests (2 passed), profile rabbitmq-4.3; exit status 0: no unexpected result"])
    assert "test_declares" not in run.stdout.str().split("verdicts")[-1]


def test_allure_labels_and_frame_log(pytester: pytest.Pytester, broker: EmbeddedBroker) -> None:
    pytester.makepyfile(test_allure='''
        import pytest

        @pytest.mark.rules("ACK-03", "QOS-01")
        def test_opens(connect):
            connect().channel()
    ''')
    allure_dir = pytester.path / "allure"
    assert pytester.runpytest("test_allure.py", "--broker-url", broker.url, "--alluredir", str(allure_dir)).ret == 0
    (result,) = [json.loads(p.read_text()) for p in allure_dir.glob("*-result.json")]
    labels = {(label["name"], label["value"]) for label in result["labels"]}
    assert {("epic", "ack"), ("feature", "ACK"), ("feature", "QOS"), ("story", "ACK-03"), ("story", "QOS-01"),
            ("verdict", "passed")} <= labels
    (attachment,) = [a for a in result["attachments"] if a["name"] == "frames"]
    log = (allure_dir / attachment["source"]).read_text()
    assert "connection.start" in log and "channel.open-ok" in log


class _UntilTriggered(Transform):
    """Forwards until `trigger` exists, then nothing; a wedged link passes no end on either."""

    def __init__(self, trigger: Path) -> None:
        super().__init__(half_close=False)
        self.trigger = trigger

    def received(self, link: Link, direction: str, data: bytes) -> None:
        if not self.trigger.exists():
            link.send(direction, data)

    def ended(self, link: Link, direction: str) -> None:
        if not self.trigger.exists():
            link.abort()


class WedgeProxy(Interposer, RelayThread):
    """The relay to `upstream`, started at once, that stops forwarding anything once `trigger` exists."""

    def __init__(self, upstream: tuple[str, int], trigger: Path) -> None:
        self.trigger = trigger
        RelayThread.__init__(self, Relay(upstream, self, close_timeout=2), name="wedge-proxy")
        self.start()

    def plumb(self, link: Link) -> Plumbing:
        transform = _UntilTriggered(self.trigger)
        return Plumbing(transform, transform)


@pytest.fixture
def trigger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "wedge-now"
    monkeypatch.setenv("WEDGE_FILE", str(path))
    return path


@pytest.fixture
def proxy(broker: EmbeddedBroker, trigger: Path) -> Iterator[WedgeProxy]:
    wedge = WedgeProxy((broker.host, broker.port), trigger)
    yield wedge
    wedge.close()


WEDGE_SUITE = '''
import os
from pathlib import Path
from typing import Any

import pytest
from codec import QueueDeclare, QueueDeclareOk


@pytest.mark.rules("ACK-01")
def test_before(connect):
    connect().channel()


@pytest.mark.rules("ACK-02")
def test_wedges_the_broker(connect):
    client = connect()
    ch = client.channel()
    Path(os.environ["WEDGE_FILE"]).touch()
    client.rpc(ch, QueueDeclare(queue="amqpc.wedge"), QueueDeclareOk)


@pytest.mark.rules("ACK-03")
def test_after(connect):
    connect().channel()


def test_unrelated():
    pass
'''


def test_wedged_broker_makes_the_rest_broken_and_exits_3(pytester: pytest.Pytester, proxy: WedgeProxy) -> None:
    pytester.makepyfile(test_wedge=WEDGE_SUITE)
    results = pytester.path / "results"
    run = pytester.runpytest("test_wedge.py", "--broker-url", f"amqp://guest:guest@127.0.0.1:{proxy.port}/", "--timeout-scale", "0.1",
                             "--results-dir", str(results))
    assert run.ret == 3
    run.stdout.fnmatch_lines(["*BROKER DOWN: broker wedged: no reply within 0.5 s*", "*1 failed, 2 passed, 1 skipped*"])
    tests = _tests_by_name(results)
    assert {name: r["verdict"] for name, r in tests.items()} == {
        "test_before": "passed", "test_wedges_the_broker": "broken", "test_after": "broken"}
    assert str(tests["test_wedges_the_broker"]["message"]).startswith("broker wedged: no reply within 0.5 s")
    assert str(tests["test_after"]["message"]).startswith("broker wedged")
    assert read_table(results, "runs").to_pylist()[0]["exit_status"] == 3
    assert run.duration < 10


def test_broker_not_answering_at_start_exits_3(pytester: pytest.Pytester, proxy: WedgeProxy, trigger: Path) -> None:
    trigger.touch()
    pytester.makepyfile(test_wedge=WEDGE_SUITE)
    run = pytester.runpytest("test_wedge.py", "--broker-url", f"amqp://guest:guest@127.0.0.1:{proxy.port}/", "--timeout-scale", "0.1")
    assert run.ret == 3
    run.stdout.fnmatch_lines(["*broker unreachable at amqp://guest@127.0.0.1:*no reply within 0.5 s*"])


WORKER_AFTER_THE_WEDGE = '''
import os
import time
from pathlib import Path

import pytest


def test_waits_for_the_wedge():
    """Not a broker test: this worker reaches the broker only once the other one wedged it."""
    deadline = time.monotonic() + 30
    while not Path(os.environ["WEDGE_FILE"]).exists():
        if time.monotonic() > deadline:
            pytest.fail("the other worker never wedged the broker")
        time.sleep(0.01)


@pytest.mark.rules("ACK-03")
def test_first_connection_after_the_wedge(connect):
    connect().channel()


@pytest.mark.rules("ACK-04")
def test_then(connect):
    connect().channel()
'''


def test_a_worker_first_reaching_a_wedged_broker_records_broken_verdicts(pytester: pytest.Pytester, proxy: WedgeProxy) -> None:
    """under pytest-xdist a worker's first connection (the `target` fixture) may come
    after another worker wedged the broker. That is not the start of the run: the worker's tests
    end `broken` and reach the records, where pytest.exit lost them (xdist's INTERNALERROR)."""
    pytester.makepyfile(test_wedge=WEDGE_SUITE, test_later=WORKER_AFTER_THE_WEDGE)
    results = pytester.path / "results"
    run = pytester.runpytest_subprocess("test_wedge.py", "test_later.py", "-p", "xdist", "-n", "2",
                                        "--dist", "loadfile",  # one file per worker
                                        "--broker-url", f"amqp://guest:guest@127.0.0.1:{proxy.port}/",
                                        "--timeout-scale", "0.1", "--results-dir", str(results), timeout=120)
    assert run.ret == 3, run.stdout.str()
    assert "INTERNALERROR" not in run.stdout.str() + run.stderr.str()
    tests = _tests_by_name(results)
    assert {name: r["verdict"] for name, r in tests.items()} == {
        "test_before": "passed", "test_wedges_the_broker": "broken", "test_after": "broken",
        "test_first_connection_after_the_wedge": "broken", "test_then": "broken"}
    for name in ("test_first_connection_after_the_wedge", "test_then"):  # the controller probed once, before the
        # wedge: the worker's first connection is its first test's, and the health probe then finds the broker down
        assert str(tests[name]["message"]).startswith("broker wedged: no reply within 0.5 s"), tests[name]
    assert read_table(results, "runs").to_pylist()[0]["tests"] == 5

def test_refused_connection_exits_3(pytester: pytest.Pytester) -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    pytester.makepyfile(test_wedge=WEDGE_SUITE)
    run = pytester.runpytest("test_wedge.py", "--broker-url", f"amqp://guest:guest@127.0.0.1:{port}/")
    assert run.ret == 3
    run.stdout.fnmatch_lines(["*broker unreachable*refused*"])


@pytest.mark.parametrize(("option", "message"), [
    (["--profile", "rabbitmq-9.9"], "*--profile 'rabbitmq-9.9': unknown profile*"),
    (["--broker-url", "http://localhost:5672/"], "*not an amqp:// URL*"),
    (["--broker-admin", "ftp://host"], "*--broker-admin must be*"),
    (["--client", "nope"], "*--client 'nope': one of raw*"),
])
def test_bad_options_are_usage_errors(pytester: pytest.Pytester, option: list[str], message: str) -> None:
    pytester.makepyfile(test_nothing="def test_nothing(): pass")
    run = pytester.runpytest(*option)
    assert run.ret == 4
    run.stderr.fnmatch_lines([message])


class ListingAdmin(NoAdmin):
    def list_queues(self, vhost: str) -> list[Any]:
        from conformance.run.admin import QueueInfo

        return [QueueInfo("amqpc.t.q.1", vhost), QueueInfo("amqpc.old.q.2", vhost), QueueInfo("app.q", vhost)]

    def list_exchanges(self, vhost: str) -> list[str]:
        return ["amq.direct", "amqpc.t.x.3"]


def test_leak_check_with_an_admin_separates_this_runs_leftovers(broker: EmbeddedBroker) -> None:
    registry = NameRegistry()
    for kind, name in (("queue", "amqpc.t.q.1"), ("exchange", "amqpc.t.x.3"), ("queue", "amqpc.t.q.deleted")):
        registry.add(kind, name)
    report = find_leaks(broker.url, "/", registry, ListingAdmin(), 1.0)
    assert (report.method, report.ours, report.others) == (
        "admin", ("exchange amqpc.t.x.3", "queue amqpc.t.q.1"), ("queue amqpc.old.q.2",))
    assert find_leaks(broker.url, "/", registry, NoAdmin(), 1.0).method == "passive declare"


def test_pytest_route_from_the_repository_root_collects_what_the_cli_runs() -> None:
    """pyproject's addopts must not deselect suite tests: `pytest --pyargs conformance.suite` from
    the repository root collects exactly what `amqp-conformance run` collects (`-o addopts=`)."""
    root = Path(__file__).resolve().parents[2]

    def collected(*args: str) -> set[str]:  # one -q in all: pyproject's addopts has it, the CLI adds its own
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", *args],
                              cwd=root, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return {line for line in done.stdout.splitlines() if "::" in line}

    pyargs = collected("--pyargs", "conformance.suite")
    cli = collected("-o", "addopts=", "-q", str(SUITE_DIR))
    assert pyargs == cli and len(cli) > 250
    assert any("test_a_silent_client_is_dropped" in name for name in cli)  # a `slow` suite test is in

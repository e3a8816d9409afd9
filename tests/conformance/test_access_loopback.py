"""ACC-08's refused side, which the live brokers (listening on 127.0.0.1 only) cannot show: the
suite's test against a reference broker listening on every address judges guest over this host's
outside address, passes when guest is refused there and fails when `loopback_users` is empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.results.parts import read_table
from conformance.suite.access.test_access_sasl import non_loopback_address
from reference_broker.server import EmbeddedBroker
from tests.conformance.test_cli_run import cli
from tests.conftest import require

pytestmark = pytest.mark.end_to_end  # whole commands as subprocesses: `make test-end-to-end`


@pytest.mark.parametrize("loopback_users", [["guest"], []], ids=["guest-loopback-only", "no-loopback-users"])
def test_acc_08_judges_the_refused_side_where_the_broker_answers_outside(tmp_path: Path,
                                                                        loopback_users: list[str]) -> None:
    require(non_loopback_address() is not None, "this host has no non-loopback address")
    with EmbeddedBroker(host="0.0.0.0", loopback_users=loopback_users) as broker:
        run = cli(tmp_path, "--broker-url", f"amqp://guest:guest@127.0.0.1:{broker.port}/", "--select", "ACC-08",
                  "--run-id", "acc-08")
    (test,) = read_table(run.dir / "results", "tests").to_pylist()
    if loopback_users:
        assert (run.status, test["verdict"]) == (0, "passed"), run.out + run.err
    else:  # guest logs in from outside: the deviation is caught
        assert (run.status, test["verdict"]) == (1, "failed"), run.out + run.err
        assert "ACC-08" in (test["message"] or "") and "connection.close 403" in test["message"], test["message"]

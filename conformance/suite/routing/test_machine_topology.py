"""The topology machine (conformance/suite/steps/machine_topology.py) against the broker: declares,
bindings, deletions, a consumer's cancel, a reconnect and publishes, each publish's queues and each
removal checked against the topology oracle (conformance/model/topology.py)."""

from __future__ import annotations

import pytest

from conformance.plugin.session import Target
from conformance.suite.steps.machine_consuming import machine_target
from conformance.suite.steps.machine_topology import run_topology_machine

TOPOLOGY_RULES = ("ROUTE-01", "ROUTE-03", "ROUTE-04", "ROUTE-05", "ROUTE-06", "ROUTE-07", "ROUTE-09", "ROUTE-10",
                  "ROUTE-11", "ROUTE-12", "ROUTE-13", "EXCH-06", "EXCH-07", "EXCH-08", "EXCH-09", "EXCH-10",
                  "QUEUE-05", "QUEUE-06", "QUEUE-10", "QUEUE-11")


SHARDS = 3  # the 300 examples in three tests that run side by side, each seeded by its number
EXAMPLES = 300 // SHARDS


@pytest.mark.takes(10)  # measured: 7.5-10.8 s a shard on RabbitMQ 4.3.6 alone, 4 s embedded
@pytest.mark.rules(*TOPOLOGY_RULES)
@pytest.mark.parametrize("shard", range(1, SHARDS + 1), ids=lambda n: f"shard-{n}-of-{SHARDS}")
def test_topology_matches_the_model(target: Target, shard: int) -> None:
    run_topology_machine(machine_target(target), examples=EXAMPLES, steps=10, shard=shard)

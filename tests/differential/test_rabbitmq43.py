"""The differential test: every scenario of tests/differential/scenarios.py against RabbitMQ 4.3.6
and against the reference broker, normalised transcripts compared (issue 13).

It pins the reference broker's 4.3 behaviour (consumer timeouts above all) to the real 4.3.6.
Marked `rabbitmq43`: it needs the 4.3.6 node of `scripts/rabbitmq4.sh up 4.3` (URLs from
AMQPC_RMQ43_URL / AMQPC_RMQ43_ADMIN, defaults as the script's); skipped when it does not answer,
a failure under AMQPC_STRICT=1. The global consumer_timeout on 4.3.6 is changed through
`scripts/rabbitmq4.sh ctl 4.3` (rabbitmqctl in the chroot) and restored after each use.
AMQPC_DIFF_SCALE (default 1) stretches every timeout and checkpoint on a loaded machine.
"""

from __future__ import annotations

import difflib
import os
import pprint
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conformance.drivers.raw import DriverError, RawClient
from conformance.plugin.admin import ManagementApi, Rabbitmqctl
from reference_broker.server import EmbeddedBroker
from tests.conftest import require
from tests.differential.scenarios import SCENARIOS
from tests.differential.script import Entry, Script, Side, run

ROOT = Path(__file__).resolve().parents[2]
RMQ43_URL = os.environ.get("AMQPC_RMQ43_URL", "amqp://guest:guest@127.0.0.1:5743/")
RMQ43_ADMIN = os.environ.get("AMQPC_RMQ43_ADMIN", "http://guest:guest@127.0.0.1:15743")
SCALE = float(os.environ.get("AMQPC_DIFF_SCALE", "1"))
GLOBAL = "consumer_timeout"


def side(name: str, url: str, api: ManagementApi, set_global: Callable[[int | None], None]) -> Side:
    return Side(name, url,
                put_policy=lambda n, pattern, definition: api.put_policy("/", n, pattern, definition),
                delete_policy=lambda n: api.delete_policy("/", n),
                set_global_timeout=set_global)


@pytest.fixture(scope="module")
def rabbitmq43() -> Iterator[Side]:
    try:
        with RawClient(RMQ43_URL, timeout=5.0) as client:
            version = str(client.server_properties.get("version"))
    except (OSError, DriverError) as exc:
        require(False, f"RabbitMQ 4.3.6 at {RMQ43_URL} (scripts/rabbitmq4.sh up 4.3): {exc}")
    require(version == "4.3.6", f"RabbitMQ 4.3.6 at {RMQ43_URL} (found {version})")
    ctl = Rabbitmqctl(f"{ROOT / 'scripts' / 'rabbitmq4.sh'} ctl 4.3", timeout=60.0)
    default = ctl.get_global(GLOBAL)

    def set_global(value: int | None) -> None:
        ctl.set_global(GLOBAL, default if value is None else value)

    api = ManagementApi(RMQ43_ADMIN)
    try:
        yield side("rabbitmq-4.3.6", RMQ43_URL, api, set_global)
    finally:
        api.close()


@pytest.fixture(scope="module")
def reference() -> Iterator[Side]:
    with EmbeddedBroker(management_port=0) as broker:
        assert broker.management_url is not None
        api = ManagementApi(broker.management_url)
        default = api.get_global(GLOBAL)

        def set_global(value: int | None) -> None:
            api.set_global(GLOBAL, default if value is None else value)

        try:
            yield side("reference", broker.url, api, set_global)
        finally:
            api.close()


def render(transcript: list[Entry]) -> list[str]:
    return [pprint.pformat(entry, width=150) for entry in transcript]


@pytest.mark.rabbitmq43
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_reference_broker_matches_rabbitmq_4_3_6(name: str, rabbitmq43: Side, reference: Side) -> None:
    scenario: Callable[[Script], None] = SCENARIOS[name]
    with ThreadPoolExecutor(2) as pool:  # both at once: the same wall-clock windows, half the time
        real, ours = pool.map(lambda s: run(scenario, s, SCALE), (rabbitmq43, reference))
    diff = list(difflib.unified_diff(render(real), render(ours), "rabbitmq-4.3.6", "reference", lineterm=""))
    assert not diff, f"{name}: the transcripts differ\n" + "\n".join(diff)
    assert real, f"{name}: an empty transcript proves nothing"

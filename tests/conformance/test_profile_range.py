"""A RabbitMQ version outside the profiles' range: judged by the nearest profile, and said so.

A version older than the oldest profile, between two, or newer than the newest is judged by the
newest profile not newer than it (the oldest for an older one); the console, the run record
(`profile_detail`) and the report's target row say so, and a queue type the version does not
have (streams before 3.9) is `not-applicable` with that reason, not failed. Pure tests pin
`version_fit` and the `Profile` on fake server-properties; the end-to-end test runs the CLI
against the reference broker announcing itself as RabbitMQ 3.8.9 (product and version are
`BrokerConfig` keys).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.catalogue.profiles import (
    AUTO,
    QUEUE_TYPE_SINCE,
    Profile,
    resolve,
    version_fit,
)
from conformance.catalogue.rules import PROFILES
from conformance.results.parts import read_table
from reference_broker.server import EmbeddedBroker
from reports.render import render_site
from tests.conftest import cli_env
from tests.reports.test_render import sample

pytestmark = pytest.mark.end_to_end  # whole commands as subprocesses: `make test-end-to-end`

OLD = "judged by rabbitmq-3.10, the oldest profile; RabbitMQ 3.8.9 predates it"
NO_STREAMS = "RabbitMQ 3.8.9 has no stream queues: they came in 3.9"


def rabbitmq(version: str) -> dict[str, object]:
    return {"product": "RabbitMQ", "version": version, "capabilities": {"publisher_confirms": True}}


@pytest.mark.parametrize(("version", "profile", "note"), [
    ("3.8.9", "rabbitmq-3.10", OLD),
    ("3.10.8", "rabbitmq-3.10", None),
    ("3.11.20", "rabbitmq-3.10", "judged by rabbitmq-3.10, the nearest older profile; "
                                 "RabbitMQ 3.11.20 has no profile of its own"),
    ("3.12.0", "rabbitmq-3.12", None),
    ("3.13.7", "rabbitmq-3.12", "judged by rabbitmq-3.12, the nearest older profile; "
                                "RabbitMQ 3.13.7 has no profile of its own"),
    ("4.0.5", "rabbitmq-4.0", None),
    ("4.2.1", "rabbitmq-4.0", "judged by rabbitmq-4.0, the nearest older profile; RabbitMQ 4.2.1 has no profile of its own"),
    ("4.3.6", "rabbitmq-4.3", None),
    ("4.4.0", "rabbitmq-4.3", "judged by rabbitmq-4.3, the newest profile; RabbitMQ 4.4.0 is newer"),
])
def test_a_version_is_judged_by_the_nearest_profile_and_told_when_it_has_none(
        version: str, profile: str, note: str | None) -> None:
    assert version_fit(version) == (profile, note)
    detected = resolve(AUTO, rabbitmq(version))
    assert (detected.base, detected.range_note) == (profile, note)
    assert (note in detected.explain()) if note else not any(line.startswith("judged by") for line in detected.explain())


def test_every_profile_version_is_its_own() -> None:
    for profile in PROFILES[:-1]:
        assert version_fit(profile.removeprefix("rabbitmq-")) == (profile, None)


def test_a_queue_type_younger_than_the_version_is_lacking_with_its_reason() -> None:
    old = resolve(AUTO, rabbitmq("3.8.9"))
    assert (old.lacks("stream"), old.lacks("quorum"), old.lacks("classic")) == (NO_STREAMS, None, None)
    assert "RabbitMQ 3.8.9 predates stream queues (they came in 3.9): their tests are not-applicable" in old.explain()
    assert resolve(AUTO, rabbitmq("3.7.28")).lacks("quorum") == "RabbitMQ 3.7.28 has no quorum queues: they came in 3.8"
    assert all(resolve(AUTO, rabbitmq("3.9.0")).lacks(kind) is None for kind in QUEUE_TYPE_SINCE)


def test_a_compatible_version_is_judged_and_lacks_the_same_way() -> None:
    compatible = resolve("rabbitmq-compatible:3.8", {"product": "ExampleMQ", "version": "2.1"})
    assert compatible.base == "rabbitmq-3.10"
    assert compatible.range_note == "judged by rabbitmq-3.10, the oldest profile; RabbitMQ 3.8 predates it"
    assert compatible.lacks("stream") == "RabbitMQ 3.8 has no stream queues: they came in 3.9"


def test_no_note_where_nothing_was_picked_from_a_version() -> None:
    chosen = resolve("rabbitmq-3.10", rabbitmq("3.8.9"))  # the user named the profile: no note on the choice
    assert chosen.range_note is None and chosen.lacks("stream") == NO_STREAMS  # but 3.8.9 still has no streams
    other = resolve(AUTO, {"product": "garagemq", "version": "0.1"})
    assert (other.version, other.range_note, other.lacks("stream")) == (None, None, None)
    emulating = resolve(AUTO, {"product": "amqp-conformance reference broker", "emulates": "RabbitMQ 3.12"})
    assert (emulating.base, emulating.version, emulating.range_note) == ("rabbitmq-3.12", "3.12", None)
    assert Profile("rabbitmq-3.10", rabbitmq("3.8.9")).range_note is None  # no label: built by hand


def test_the_report_shows_the_note_on_the_target_row(tmp_path: Path) -> None:
    data, pages = sample()
    data.targets[0].profile_detail = "\n".join(["judged as rabbitmq-3.10", *resolve(AUTO, rabbitmq("3.8.9")).explain()])
    render_site(data, tmp_path, pages)
    overview = (tmp_path / "index.html").read_text()
    assert f'<div class="sub profile-range"><b>{OLD}</b></div>' in overview
    plain = sample()[0]
    render_site(plain, tmp_path / "plain", pages)
    assert "profile-range" not in (tmp_path / "plain" / "index.html").read_text()


def test_rabbitmq_3_8_9_end_to_end_streams_not_applicable_and_the_note_everywhere(tmp_path: Path) -> None:
    """The reference broker announcing RabbitMQ 3.8.9: QOS-06's stream case is not-applicable with
    the reason, its quorum case is judged; console and run record carry the note."""
    with EmbeddedBroker(product="RabbitMQ", version="3.8.9", announce_emulation=False) as broker:
        done = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--broker-url", broker.url,
                               "--out", str(tmp_path / "out"), "--select", "QOS-06"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300, env=cli_env())
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr
    assert "profile rabbitmq-3.10" in done.stdout and f"profile: {OLD}" in done.stdout, done.stdout[:3000]
    (record,) = read_table(tmp_path / "out" / "results", "runs").to_pylist()
    assert (record["version"], record["profile"]) == ("3.8.9", "rabbitmq-3.10") and OLD in record["profile_detail"]
    tests = {t["test_id"].rsplit("::", 1)[1]: t for t in read_table(tmp_path / "out" / "results", "tests").to_pylist()}
    stream = tests["test_quorum_and_stream_consumers_refused_under_a_global_limit[stream]"]
    assert (stream["verdict"], stream["message"]) == ("not-applicable", NO_STREAMS)
    quorum = tests["test_quorum_and_stream_consumers_refused_under_a_global_limit[quorum]"]
    assert quorum["verdict"] in ("passed", "failed")  # judged by rabbitmq-3.10's QOS-06, whatever the outcome


def test_the_pytest_route_says_it_before_its_closing_line(tmp_path: Path) -> None:
    with EmbeddedBroker(product="RabbitMQ", version="3.8.9", announce_emulation=False) as broker:
        done = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "conformance.suite", "--broker-url",
                               broker.url, "-p", "no:cacheprovider", "-k", "refused_under_a_global_limit and stream"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300, env=cli_env())
    lines = done.stdout.splitlines()
    closing = next(i for i, line in enumerate(lines) if line.startswith("amqp-conformance: 2 tests"))
    assert lines[closing - 1] == f"profile: {OLD}", done.stdout[-3000:]
    assert "1 not-applicable), profile rabbitmq-3.10;" in lines[closing]  # the stream case; quorum is judged

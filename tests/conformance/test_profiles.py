"""Capability-aware profiles (conformance/catalogue/profiles.py, docs/design.md decision 11).

A profile is a base (the spec or a RabbitMQ version) plus what the broker claims. Pure tests
pin detection on real brokers' server-properties and every combination of claims; live tests
configure the reference broker as another product with its own capability table and run the
suite through the CLI, so no third-party broker is needed for the combinations.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.catalogue.profiles import (
    NOT_CLAIMED,
    SPEC,
    Profile,
    ProfileError,
    advertised,
    check_choice,
    detect,
    resolve,
)
from conformance.catalogue.rules import CAPABILITIES, NOT_APPLICABLE, PROFILES, all_rules
from conformance.results.baseline import load_baseline
from conformance.results.parts import read_table
from conformance.suite.confirms import test_confirms
from reference_broker.server import EmbeddedBroker
from tests.conftest import cli_env

RABBIT_CAPS = {"publisher_confirms": True, "exchange_exchange_bindings": True, "basic.nack": True,
               "consumer_cancel_notify": True, "connection.blocked": True, "consumer_priorities": True,
               "authentication_failure_close": True, "per_consumer_qos": True, "direct_reply_to": True}
# server-properties as the brokers send them (product, version, capabilities); LavinMQ's from the
# issue, GarageMQ's from docs/garagemq.md, RabbitMQ's from the live nodes.
SEEN = {
    "rabbitmq-3.10.8": ({"product": "RabbitMQ", "version": "3.10.8", "capabilities": RABBIT_CAPS}, "rabbitmq-3.10"),
    "rabbitmq-4.0.5": ({"product": "RabbitMQ", "version": "4.0.5", "capabilities": RABBIT_CAPS}, "rabbitmq-4.0"),
    "rabbitmq-4.3.6": ({"product": "RabbitMQ", "version": "4.3.6", "capabilities": RABBIT_CAPS}, "rabbitmq-4.3"),
    "lavinmq-1.0.1": ({"product": "LavinMQ", "version": "1.0.1", "capabilities": {
        "publisher_confirms": True, "basic.nack": True, "consumer_cancel_notify": True, "per_consumer_qos": True,
        "connection.blocked": True, "consumer_priorities": True, "direct_reply_to": True,
        "exchange_exchange_bindings": True, "authentication_failure_close": True}}, SPEC),
    "garagemq-0.1": ({"product": "garagemq", "version": "0.1", "capabilities": {
        "publisher_confirms": True, "basic.nack": True, "consumer_cancel_notify": True, "per_consumer_qos": True,
        "authentication_failure_close": True, "exchange_exchange_bindings": False}}, SPEC),
}
RULED = sorted({r.capability for r in all_rules() if r.capability})


@pytest.mark.parametrize("name", sorted(SEEN))
def test_detect_reads_the_base_from_product_and_version(name: str) -> None:
    props, base = SEEN[name]
    assert detect(props) == base
    profile = resolve("auto", props)
    assert profile.base == base and profile.name == base


def test_a_non_rabbitmq_broker_is_judged_on_every_confirms_rule_it_advertises() -> None:
    props, _ = SEEN["lavinmq-1.0.1"]
    profile = resolve("auto", props)
    confirms = [r for r in all_rules() if r.capability == "publisher_confirms"]
    assert confirms and all(profile.expect(r.id) == r.expect["rabbitmq-4.3"] for r in confirms)
    assert profile.expect("TMO-4.3-1") == NOT_CLAIMED  # consumer timeouts: not advertised, not declared
    assert profile.expect("FRM-02") == all_rules()[[r.id for r in all_rules()].index("FRM-02")].expect[SPEC]
    assert profile.display == f"{SPEC}+{len(profile.claims)} capabilities"


def test_garagemq_claims_confirms_nack_and_cancel_but_not_what_it_sets_false() -> None:
    profile = resolve("auto", SEEN["garagemq-0.1"][0])
    assert {"publisher_confirms", "basic.nack", "consumer_cancel_notify"} <= profile.claims
    assert "exchange_exchange_bindings" not in profile.claims  # advertised as false
    assert profile.expect("PC-01") == "required" and profile.expect("CCN-02") == "required"
    assert profile.expect("ACK-07") == "required"  # basic.nack claimed: the RabbitMQ rule, not the spec variant


@pytest.mark.parametrize("claims", [frozenset(c) for n in range(len(RULED) + 1)
                                    for c in itertools.combinations(RULED, n)], ids=lambda c: "+".join(sorted(c)) or "none")
def test_every_combination_of_claims_judges_each_rule_by_its_capability(claims: frozenset[str]) -> None:
    profile = Profile(SPEC, {"product": "ExampleMQ"}, declared=claims)
    for r in all_rules():
        got = profile.expect(r.id)
        if r.capability is None:
            assert got == r.expect[SPEC], r.id
        elif r.capability in claims:
            assert got == r.expect["rabbitmq-4.3"], r.id
        else:
            assert got == (NOT_CLAIMED if r.expect[SPEC] == NOT_APPLICABLE else r.expect[SPEC]), r.id
        view = profile.for_rules([r.id])
        assert view.name == ("rabbitmq-4.3" if r.capability in claims else SPEC), r.id
        assert view.base == SPEC and not view.rabbitmq


def test_a_rabbitmq_base_keeps_its_version_profile_whatever_it_advertises() -> None:
    for base in PROFILES[:-1]:
        profile = Profile(base, {"product": "RabbitMQ", "capabilities": {}})
        assert all(profile.expect(r.id) == r.expect[base] for r in all_rules())
        assert profile.supports("publisher_confirms") and profile.for_rules(["PC-01"]).name == base


def test_the_user_names_the_version_that_judges_extensions() -> None:
    profile = resolve("amqp-0-9-1", {"capabilities": {"per_consumer_qos": True}}, extension_profile="rabbitmq-4.0")
    rules = {r.id: r for r in all_rules()}
    assert profile.expect("QOS-03") == rules["QOS-03"].expect["rabbitmq-4.0"] != rules["QOS-03"].expect["rabbitmq-4.3"]
    assert profile.for_rules(["QOS-03"]).name == "rabbitmq-4.0"


def test_rabbitmq_compatible_is_a_rabbitmq_base() -> None:
    assert resolve("rabbitmq-compatible", {"product": "LavinMQ"}).base == "rabbitmq-4.3"
    assert resolve("rabbitmq-compatible:4.0", {}).base == "rabbitmq-4.0"
    assert resolve("rabbitmq-compatible:3.13.7", {}).base == "rabbitmq-3.12"
    assert resolve("rabbitmq-compatible:4.0", {}).display == "rabbitmq-compatible:4.0"


@pytest.mark.parametrize(("choice", "declared", "extensions", "words"), [
    ("lavinmq", (), "rabbitmq-4.3", "--profile 'lavinmq': unknown profile"),
    ("rabbitmq-compatible:x", (), "rabbitmq-4.3", "rabbitmq-compatible:VERSION"),
    ("auto", ("teleport",), "rabbitmq-4.3", "--capability teleport: unknown capability"),
    ("auto", (), "amqp-0-9-1", "--extension-profile 'amqp-0-9-1': not a RabbitMQ profile"),
])
def test_bad_choices_are_one_clear_line(choice: str, declared: tuple[str, ...], extensions: str, words: str) -> None:
    with pytest.raises(ProfileError, match=words):
        check_choice(choice, declared, extensions)


def test_explain_names_the_base_the_claims_and_the_rules_each_adds() -> None:
    lines = resolve("auto", SEEN["garagemq-0.1"][0], ["quorum_queues"]).explain()
    assert lines[0].startswith(f"base {SPEC}: detected from server-properties (garagemq 0.1)")
    assert any(line.startswith("+ publisher_confirms: PC-01") for line in lines)
    assert any(line.startswith("+ quorum_queues: RQ-02") for line in lines)  # declared
    assert any(line.startswith("- consumer_timeout not claimed: TMO-01") for line in lines)
    assert advertised({"capabilities": {"a": True, "b": False, "c": 1}}) == {"a"}
    assert set(CAPABILITIES) >= set(RULED)


# -- live: the reference broker as another product ------------------------------------------------
def _run(tmp: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--broker-url", url,
                           "--out", str(tmp / "out"), *args], cwd=tmp, capture_output=True, text=True, timeout=300,
                          env=cli_env())


def _verdicts(tmp: Path) -> dict[str, set[str]]:
    per_rule: dict[str, set[str]] = {}
    for test in read_table(tmp / "out" / "results", "tests").to_pylist():
        for rule_id in test["rule_ids"]:
            per_rule.setdefault(rule_id, set()).add(test["verdict"])
    return per_rule


def _example_broker(capabilities: dict[str, bool], **overrides: Any) -> EmbeddedBroker:
    return EmbeddedBroker(product="ExampleMQ", version="2.1", announce_emulation=False,
                          capabilities=capabilities, **overrides)


@pytest.mark.end_to_end  # a whole run as a subprocess: `make test-end-to-end`
def test_advertised_confirms_bring_the_confirms_rules_into_play(tmp_path: Path) -> None:
    with _example_broker({"publisher_confirms": True}) as broker:
        run = _run(tmp_path, broker.url, "--select", "PC-01", "PC-02", "CCN-01", "RQ-02")
    assert run.returncode == 0, run.stdout + run.stderr
    verdicts = _verdicts(tmp_path)
    assert verdicts["PC-01"] == {"passed"}, verdicts
    assert "not-claimed" in verdicts["RQ-02"] and "passed" not in verdicts["RQ-02"]
    # CCN-01 alone is not claimed; a test of CCN-01 with CCN-02 is judged by CCN-02's spec variant
    assert verdicts["CCN-01"] == {"not-claimed", "passed"} and verdicts["CCN-02"] == {"passed"}
    assert "profile amqp-0-9-1+1 capabilities" in run.stdout
    assert "profile: + publisher_confirms: PC-01" in run.stdout
    (record,) = read_table(tmp_path / "out" / "results", "runs").to_pylist()
    assert record["profile"] == "amqp-0-9-1" and record["profile_detail"].startswith("judged as amqp-0-9-1+1 capabilities")
    assert "- consumer_cancel_notify not claimed" in record["profile_detail"]


@pytest.mark.end_to_end  # a whole run as a subprocess: `make test-end-to-end`
def test_without_the_capability_the_confirms_rules_are_not_claimed(tmp_path: Path) -> None:
    with _example_broker({}) as broker:
        run = _run(tmp_path, broker.url, "--select", "PC-01", "ACK-03")
    assert run.returncode == 0, run.stdout + run.stderr
    verdicts = _verdicts(tmp_path)
    assert verdicts["PC-01"] == {"not-claimed"} and "passed" in verdicts["ACK-03"]


@pytest.mark.end_to_end  # a whole run as a subprocess: `make test-end-to-end`
def test_a_claimed_extension_that_deviates_fails_as_its_rule(tmp_path: Path) -> None:
    suite = tmp_path / "suite"  # the example tests only: the machines are judged in their own tests
    suite.mkdir()
    shutil.copy(Path(test_confirms.__file__), suite / "test_confirms.py")
    with _example_broker({"publisher_confirms": True}, faults=["confirms_start_at_zero"]) as broker:
        run = _run(tmp_path, broker.url, "--select", "PC-02", "--suite", str(suite))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "failed" in _verdicts(tmp_path)["PC-02"]


@pytest.mark.end_to_end  # a whole run as a subprocess: `make test-end-to-end`
def test_a_declared_capability_is_judged_too(tmp_path: Path) -> None:
    with _example_broker({}) as broker:
        run = _run(tmp_path, broker.url, "--select", "RQ-02", "--capability", "quorum_queues")
    assert run.returncode == 0, run.stdout + run.stderr
    # the quorum-queue tests of RQ-02 are judged (passed); the TMO-4.3-2 test, which also judges
    # RQ-02, needs the consumer_timeout capability, neither advertised nor declared: not-claimed
    verdicts = _verdicts(tmp_path)["RQ-02"]
    assert "passed" in verdicts and verdicts <= {"passed", "not-claimed"}, verdicts
    assert "declared: quorum_queues" in run.stdout


def test_a_bad_capability_is_a_usage_error(tmp_path: Path) -> None:
    run = _run(tmp_path, "amqp://guest:guest@127.0.0.1:1/", "--capability", "teleport")
    assert run.returncode == 4 and run.stderr.count("\n") == 1 and "--capability teleport: unknown capability" in run.stderr


def test_the_garagemq_baseline_cites_its_evidence() -> None:
    root = Path(__file__).resolve().parents[2]
    baseline = load_baseline(root / "baselines" / "garagemq.toml")
    doc = (root / "docs" / "garagemq.md").read_text()
    sections = set(re.findall(r"^## (.+)$", doc, re.M)) | {"Broker-level faults 1", "Broker-level faults 2",
                                                          "Broker-level faults 3", "Broker-level faults 4"}
    assert baseline.deviations
    for deviation in baseline.deviations:
        assert deviation.reason.endswith("see docs/garagemq.md"), deviation.rule
        cited = re.findall(r"§ ([^;:)]+)", deviation.reason)
        assert cited and all(c.strip() in sections for c in cited), (deviation.rule, cited)
        assert deviation.profiles == (SPEC,)

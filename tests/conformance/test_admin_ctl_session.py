"""Tests of the kept `rabbitmqctl eval` (conformance/run/admin_ctl_session.py).

A scripted stand-in for rabbitmqctl (a Python program that answers the loop's protocol, or
does not) shows when the adapter uses the session and when it falls back to a command per call;
marked `rabbitmq`, the local RabbitMQ shows that a policy set, read and cleared through the
session is the one rabbitmqctl's own commands see, and that a bad definition is refused.
"""

from __future__ import annotations

import shlex
import sys
import time
import uuid
from pathlib import Path

import pytest

from conformance.run import admin_ctl_session
from conformance.run.admin import AdminError, Policy, Rabbitmqctl
from conformance.run.admin_ctl_session import erl_binary
from tests.conftest import require

# A stand-in: as `rabbitmqctl eval LOOP` it answers each line from the canned replies (MODE
# "answer"), only the first (MODE "once"), none (MODE "mute"), or exits at once (MODE "exit"); any other command
# (a per-call fallback) prints "per-call <args>".
STAND_IN = '''
import sys
mode, args = sys.argv[1], sys.argv[2:]
if args[:1] != ["eval"] or not args[1].startswith("Loop = "):
    print("per-call " + " ".join(args)); sys.exit(0)
if mode == "exit":
    sys.exit(70)
answered = 0
for line in sys.stdin:
    if mode == "mute" or (mode == "once" and answered):
        continue
    answered += 1
    line = line.strip()
    if line == "ok.":
        print("amqpc-reply {ok,ok}", flush=True)
    elif line.startswith("application:get_env"):
        print("some CLI noise", flush=True)
        print("amqpc-reply {ok,{ok,1234}}", flush=True)
    elif line.startswith("boom"):
        print("amqpc-reply {error,undef}", flush=True)
    else:
        print("amqpc-reply {ok,ok}", flush=True)
'''


def stand_in(tmp_path: Path, mode: str) -> str:
    script = tmp_path / "rabbitmqctl.py"
    script.write_text(STAND_IN)
    return shlex.join([sys.executable, str(script), mode])


def test_the_session_answers_each_line(tmp_path: Path) -> None:
    ctl = Rabbitmqctl(stand_in(tmp_path, "answer"), timeout=5.0)
    try:
        assert ctl.session() is not None
        assert ctl.get_global("consumer_timeout") == 1234  # the noise line before the reply is skipped
        ctl.set_global("consumer_timeout", 5)
        with pytest.raises(AdminError, match="rabbitmqctl eval: \\{error,undef\\}"):
            ctl.eval("boom().")
        assert ctl.session() is not None  # an error reply keeps the session
    finally:
        ctl.close()


@pytest.mark.parametrize("mode", ["exit", "mute"])
def test_without_a_session_each_call_is_a_command(tmp_path: Path, mode: str) -> None:
    ctl = Rabbitmqctl(stand_in(tmp_path, mode), timeout=1.0)
    started = time.monotonic()
    assert ctl.session() is None
    assert time.monotonic() - started < 10.0  # bounded by the timeout, not a hang
    assert ctl.eval("node().") == "per-call eval node().\n"
    assert ctl.session() is None  # tried once per adapter


def test_a_call_without_an_answer_ends_the_session(tmp_path: Path) -> None:
    ctl = Rabbitmqctl(stand_in(tmp_path, "once"), timeout=1.0)
    session = ctl.session()
    assert session is not None
    with pytest.raises(AdminError, match="no answer within 1 s"):
        ctl.eval("node().")
    assert not session.alive  # a late reply cannot be taken for the next call's
    with pytest.raises(AdminError, match="ended"):
        session.call("node().")
    assert ctl.eval("node().") == "per-call eval node().\n"  # the adapter goes on a command per call


def test_erlang_binaries_are_escaped_and_one_line() -> None:
    assert erl_binary('a"b\\c') == '<<"a\\"b\\\\c"/utf8>>'
    with pytest.raises(ValueError, match="control character"):
        erl_binary("a\nb")


@pytest.mark.rabbitmq
def test_policies_through_the_session_are_rabbitmqctls() -> None:
    ctl, per_call = Rabbitmqctl(), Rabbitmqctl(session=False)
    require(ctl.session() is not None, "rabbitmqctl, reading its standard input, and the local RabbitMQ")
    name = f"amqpc.session.{uuid.uuid4().hex[:8]}"
    try:
        for operator in (False, True):
            ctl.put_policy("/", name, f"^{name}$", {"max-length": 3}, "queues", 4, operator=operator)
            expected = Policy("/", name, f"^{name}$", {"max-length": 3}, "queues", 4)
            assert ctl.get_policy("/", name, operator=operator) == expected
            assert per_call.get_policy("/", name, operator=operator) == expected  # rabbitmqctl list_policies
            ctl.delete_policy("/", name, operator=operator)
            ctl.delete_policy("/", name, operator=operator)  # a missing policy is not an error
            assert per_call.get_policy("/", name, operator=operator) is None
        with pytest.raises(AdminError, match="not a valid maximum length"):
            ctl.put_policy("/", name, f"^{name}$", {"max-length": "three"})
        assert ctl.get_global("consumer_timeout") == per_call.get_global("consumer_timeout")
    finally:
        for operator in (False, True):
            per_call.delete_policy("/", name, operator=operator)
        ctl.close()


def test_at_most_slots_sessions_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rabbitmqctl's eleven distribution ports: kept sessions leave most of them to plain commands."""
    monkeypatch.setattr(admin_ctl_session, "SLOT_DIR", tmp_path / "slots")
    held = [Rabbitmqctl(stand_in(tmp_path, "answer"), timeout=5.0) for _ in range(admin_ctl_session.SLOTS + 1)]
    try:
        assert [ctl.session() is not None for ctl in held] == [True] * admin_ctl_session.SLOTS + [False]
        held[0].close()  # its slot is free again: the one that found none tries again at its next call
        assert held[-1].session() is not None
    finally:
        for ctl in held:
            ctl.close()


def test_an_idle_session_ends_and_frees_its_slot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin_ctl_session, "SLOT_DIR", tmp_path / "slots")
    monkeypatch.setattr(admin_ctl_session, "IDLE_SECONDS", 0.2)
    ctl = Rabbitmqctl(stand_in(tmp_path, "answer"), timeout=5.0)
    try:
        first = ctl.session()
        assert first is not None and ctl.eval("node().") == "ok"
        deadline = time.monotonic() + 10.0
        while first.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not first.alive and first.idle_ended
        assert admin_ctl_session.take_slot() is not None  # freed (this one is closed with the test)
        second = ctl.session()  # the next call starts another session, not a command per call
        assert second is not None and second is not first and ctl.eval("node().") == "ok"
    finally:
        ctl.close()

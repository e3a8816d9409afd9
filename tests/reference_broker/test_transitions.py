"""Transition-table property (h2's test_state_machines shape): every (channel state, method)
either is valid or ends in the defined error with the defined scope (ERR-02)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from codec import METHOD_CLASSES, AmqpError, BasicGet, ChannelClose, ReplyCode
from reference_broker.core import CloseConnection, Send
from tests.codec.strategies import method_of
from tests.reference_broker.sim import Sim

CLIENT_METHODS = sorted(i for i, cls in METHOD_CLASSES.items() if cls.CLASS_ID != 10)


def in_state(state: str) -> Sim:
    """absent: channel 1 never opened; open; closing: the broker sent channel.close (404)."""
    sim = Sim()
    sim.connect()
    if state in ("open", "closing"):
        sim.open()
    if state == "closing":
        sim.do(1, 1, BasicGet(queue="no-such-queue"))
    return sim


@settings(max_examples=400, deadline=None)
@given(state=st.sampled_from(["absent", "open", "closing"]), data=st.data())
def test_every_state_and_method_is_valid_or_a_defined_error(state: str, data: st.DataObject) -> None:
    sim = in_state(state)
    method = data.draw(st.sampled_from(CLIENT_METHODS).flatmap(method_of))
    body = b"x" if method.HAS_CONTENT else b""
    effects = sim.do(1, 1, method, None, body)  # never raises
    hard = [e for e in effects if isinstance(e, CloseConnection)]
    soft = [e for e in effects if isinstance(e, Send) and isinstance(e.method, ChannelClose) and e.conn == 1]
    for close in hard:
        assert ReplyCode(close.code).is_hard_error, close
        assert close.text.startswith(ReplyCode(close.code).name + " - ") or close.code == 312
    for send in soft:
        assert ReplyCode(send.method.reply_code).is_soft_error, send
    if state == "closing":
        assert not hard and not soft  # ERR-03: ignored, or close/close-ok
    if state == "absent" and type(method).__name__ != "ChannelOpen":
        assert [c.code for c in hard] == [ReplyCode.CHANNEL_ERROR]
    assert not isinstance(effects, AmqpError)

"""Shared steps of the error tests: triggers that provoke a close, and the reply texts they carry.

Rules:
- A trigger is built for the test's channel and queue and run by `provoke`, which adds the
  round trip that surfaces the close it causes (a channel.close, or a connection.close that may
  arrive after the round trip's answer).
- Reply texts are asserted only where the profile checks them (`texts_checked`: ERR-04's variant
  on the plain 0-9-1 profile leaves them free), as ERR-01 limits them (`assert_limited`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from codec import (
    BasicProperties,
    BasicPublish,
    Method,
    encode_method,
)
from codec.constants import METHOD_IDS, ReplyCode
from conformance.drivers.raw import (
    ChannelClosed,
    Closed,
    ConnectionClosed,
    RawClient,
)
from conformance.plugin.session import Target
from conformance.suite.steps.wire import (
    pump,
    sync,
)

Trigger = Callable[[RawClient, int], None]


def send(method: Method, body: bytes | None = None) -> Trigger:
    """A trigger sending one method (with content when `body` is given)."""
    def trigger(client: RawClient, ch: int) -> None:
        client.send(ch, method, BasicProperties() if body is not None else None, body or b"")
    return trigger


def raw(make: Callable[[int], bytes]) -> Trigger:
    """A trigger writing raw bytes built for the channel number."""
    def trigger(client: RawClient, ch: int) -> None:
        client.send_raw(make(ch), channel=ch)
    return trigger


def provoke(client: RawClient, ch: int, trigger: Trigger, timeout: float) -> Closed:
    """Run `trigger` on `ch`, then a round trip that surfaces the close it causes."""
    trigger(client, ch)
    with pytest.raises((ChannelClosed, ConnectionClosed)) as closed:
        sync(client, ch)
        pump(client, timeout)  # the round trip may answer before a connection.close arrives
        sync(client, ch)
    assert isinstance(closed.value, Closed)
    return closed.value


def texts_checked(target: Target) -> bool:
    """ERR-04's variant on the plain 0-9-1 profile: reply texts are not checked."""
    return target.profile.expect("ERR-04") == "required"


def publish_then(*frames: Callable[[int], bytes]) -> Trigger:
    return raw(lambda ch: encode_method(ch, BasicPublish(routing_key="x")) + b"".join(f(ch) for f in frames))


def assert_text(target: Target, closed: Closed, text: str) -> None:
    """The exact text, as ERR-01 limits it when it is longer than 255 octets."""
    if texts_checked(target):
        assert_limited(target, closed.text, text)


def assert_limited(target: Target, got: str, full: str) -> None:
    if len(full.encode()) <= 255:
        assert got == full
    elif target.profile.expect("ERR-01").startswith("variant:a reply text over 255 bytes is cut to 252"):
        assert got == full.encode()[:252].decode(errors="ignore") + "...", got
    else:  # limited to 255 characters (io_lib chars_limit); how it marks the cut is not pinned
        assert len(got) <= 255 and full.startswith(got.removesuffix("...")), got


def refused(client: RawClient, ch: int, method: Any, ok: type, target: Target) -> ChannelClosed | ConnectionClosed:
    """The close `method` gets (AssertionError if it succeeds)."""
    try:
        client.rpc(ch, method, ok, timeout=target.timeout(5))
    except (ChannelClosed, ConnectionClosed) as closed:
        return closed
    raise AssertionError(f"{method.NAME} succeeded; an error was expected")


UNKNOWN_TAG = "PRECONDITION_FAILED - unknown delivery tag {}"  # ACK-03
SETTLE_METHOD_IDS = {kind: METHOD_IDS[f"basic.{kind}"] for kind in ("ack", "reject", "nack")}


def assert_unknown_tag(closed: ChannelClosed, tag: int, kind: str, target: Target, rule_id: str) -> None:
    """ACK-03: channel.close 406, class 60, the settling method's id; the text on RabbitMQ."""
    assert (closed.scope, closed.code, closed.class_id, closed.method_id) == (
        "channel", ReplyCode.PRECONDITION_FAILED, *SETTLE_METHOD_IDS[kind]), closed
    if target.profile.expect(rule_id) == "required":
        assert closed.text == UNKNOWN_TAG.format(tag)

"""ACK-03 over the wire: the first suite test, and the pattern the others follow."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codec import BasicAck, BasicGet, BasicGetEmpty, BasicGetOk, QueueDeclare, QueueDeclareOk
from codec.constants import METHOD_IDS, ReplyCode
from conformance.drivers.raw import ChannelClosed, RawClient
from conformance.plugin.session import Names
from conformance.suite.steps.queues import prompt


@pytest.mark.rules("ACK-03")
@pytest.mark.clauses("ACK-03.a", "ACK-03.e")
def test_unknown_tag_closes_the_channel_with_406(connect: Callable[..., RawClient], names: Names) -> None:
    client = connect()
    ch = client.channel()
    client.rpc(ch, QueueDeclare(queue=names.queue()), QueueDeclareOk)
    client.send(ch, BasicAck(delivery_tag=77))
    with pytest.raises(ChannelClosed) as closed:  # the channel raises it while handling the ack: owed at once
        client.rpc(ch, BasicGet(queue="whatever"), BasicGetOk, BasicGetEmpty, timeout=prompt(client))
    assert (closed.value.code, closed.value.class_id, closed.value.method_id) == (ReplyCode.PRECONDITION_FAILED, *METHOD_IDS["basic.ack"])

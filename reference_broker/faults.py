"""The fault switchboard: named, realistic deviations the reference broker can be told to make.

Rules:
- A fault is switched on only by configuration (`faults = [...]`) or the environment
  variable AMQPC_BROKER_FAULTS (comma-separated) read when the config loads; never by
  default, never from AMQP. An unknown name is a configuration error.
- Each fault names the area whose tests must kill it (issue 6's mutation score) and the
  rule it breaks. The core asks `core.fault("name")` at the one place the fault acts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV = "AMQPC_BROKER_FAULTS"


@dataclass(frozen=True)
class Fault:
    name: str
    area: str
    rule: str
    description: str


FAULTS: tuple[Fault, ...] = (
    Fault("multi_ack_only_named", "ack", "ACK-05", "basic.ack multiple=true settles only the named tag"),
    Fault("multi_unknown_tag_silent", "ack", "ACK-05", "multiple=true with an unknown tag settles nothing, no 406"),
    Fault("double_ack_accepted", "ack", "ACK-04", "an already settled tag is accepted silently"),
    Fault("unknown_tag_closes_connection", "ack", "ACK-03", "an unknown tag closes the connection, not the channel"),
    Fault("tag_zero_multiple_ignored", "ack", "ACK-06", "tag 0 with multiple=true settles nothing"),
    Fault("nack_requeue_false_requeues", "ack", "ACK-07", "basic.nack requeue=false requeues the message"),
    Fault("recover_no_redelivered", "ack", "ACK-09", "basic.recover redeliveries are not flagged redelivered"),
    Fault("cancel_requeues", "ack", "ACK-10", "basic.cancel requeues the consumer's unacked deliveries"),
    Fault("requeue_to_tail", "requeue", "RQ-01", "classic queues requeue at the tail, not the original position"),
    Fault("quorum_returns_not_first", "requeue", "RQ-02", "quorum returns go behind never-delivered messages"),
    Fault("redelivered_not_set", "requeue", "RQ-04", "redeliveries carry redelivered=false"),
    Fault("tags_restart_per_consumer", "ack", "ACK-01", "each new consumer restarts the channel's delivery tags at 1"),
    Fault("no_requeue_on_channel_close", "requeue", "RQ-03", "unacked deliveries are dropped when the channel closes"),
    Fault("prefetch_off_by_one", "qos", "QOS-02", "a consumer gets prefetch_count + 1 unacked deliveries"),
    Fault("global_qos_channel_wide", "qos", "QOS-03", "4.3: global=true is honoured as a channel-wide limit"),
    Fault("prefetch_size_accepted", "qos", "QOS-01", "basic.qos prefetch_size != 0 is accepted"),
    Fault("no_ack_obeys_prefetch", "qos", "QOS-08", "no-ack consumers are limited by the prefetch count"),
    Fault("get_obeys_prefetch", "qos", "QOS-07", "basic.get returns get-empty while the prefetch window is full"),
    Fault("confirms_start_at_zero", "confirms", "PC-02", "confirm sequence numbers start at 0"),
    Fault("confirm_lost", "confirms", "PC-05", "the confirm of the third publish is never sent"),
    Fault("confirm_duplicated", "confirms", "PC-05", "every ack confirm is sent twice"),
    Fault("multiple_ack_covers_nacked", "confirms", "PC-04", "a multiple=true ack also covers nacked seqnos"),
    Fault("return_after_ack", "confirms", "PC-06", "basic.return follows the ack of an unroutable mandatory publish"),
    Fault("unroutable_never_confirmed", "confirms", "PC-06", "unroutable publishes are never confirmed"),
    Fault("tx_select_on_confirm_accepted", "confirms", "PC-03", "tx.select on a confirm channel is accepted"),
    Fault("cancel_without_capability", "cancel", "CCN-02", "basic.cancel is sent to clients without the capability"),
    Fault("no_cancel_on_queue_delete", "cancel", "CCN-02", "consumers of a deleted queue are dropped silently"),
    Fault("cancel_unknown_tag_error", "cancel", "CCN-03", "cancelling an unknown tag is a 404 channel error"),
    Fault("timeout_max_of_queue_and_policy", "timeout", "TMO-03", "max(queue argument, policy) instead of min"),
    Fault("consumer_timeout_argument_ignored", "timeout", "TMO-03", "the consumer's x-consumer-timeout is ignored"),
    Fault("global_before_policy", "timeout", "TMO-03", "the global consumer_timeout wins over queue argument and policy"),
    Fault("timeout_closes_channel_with_capability", "timeout", "TMO-4.3-3", "a timeout closes the channel even with the capability"),
    Fault("partial_timeout_returns_all", "timeout", "TMO-4.3-2", "a timeout returns all the consumer's deliveries"),
    Fault("timed_out_consumer_not_paused", "timeout", "TMO-4.3-2", "a timed-out consumer keeps getting messages"),
    Fault("late_ack_removes_message", "timeout", "TMO-4.3-5", "a late ack removes the already returned message"),
    Fault("soft_errors_close_connection", "errors", "ERR-02", "channel errors close the whole connection"),
    Fault("frame_max_not_enforced", "framing", "FRM-03", "frames over the negotiated frame_max are accepted"),
    Fault("socket_closed_after_close_ok", "framing", "NET-02", "the socket is closed right after close-ok to a client's close"),
    Fault("properties_reencoded", "messages", "MSG-01", "delivered properties are re-encoded from decoded values"),
)
BY_NAME = {f.name: f for f in FAULTS}


def from_environment() -> list[str]:
    raw = os.environ.get(ENV, "")
    return [name.strip() for name in raw.split(",") if name.strip()]


def check(names: list[str]) -> frozenset[str]:
    unknown = sorted(set(names) - set(BY_NAME))
    if unknown:
        raise ValueError(f"unknown fault(s): {', '.join(unknown)} (see reference_broker/faults.py)")
    return frozenset(names)

"""Named faults of brokers judged as clusters: a cluster's nodes (`reference-broker --nodes N`,
docs/findings-cluster.md) and a crashed node's consumers (core/disconnected.py, the timeout area's
TMO-4.3-6, judged on a cluster). Part of the table of reference_broker/faults.py, which says what a
fault is and how it is switched on."""

from __future__ import annotations

from reference_broker.fault_type import Fault
from reference_broker.fault_type import const as _const

CLUSTER_FAULTS: tuple[Fault, ...] = (
    # a cluster's nodes (reference-broker --nodes N; docs/findings-cluster.md)
    Fault("cluster_no_cancel_on_node_down", "cluster", "CLU-01",
          "consumers of a stopped node's classic queues are dropped silently, even with the capability",
          {"cancel_on_node_down": _const(False)}),
    Fault("cluster_ack_for_stopped_queue", "cluster", "CLU-03",
          "a publish routed to a stopped node's classic queue is confirmed (and lost), not nacked",
          {"nack_for_stopped_queue": _const(False)}),
    Fault("cluster_failover_drops_unacked", "cluster", "CLU-05",
          "a quorum queue's leader change loses the unacked deliveries: settling them does nothing",
          {"lost_at_failover": lambda held: held}),
    Fault("cluster_delivers_without_majority", "cluster", "CLU-07", "a quorum queue without a majority still delivers",
          {"delivers_without_majority": _const(True)}),
    Fault("cluster_restart_drops_bindings", "cluster", "CLU-09",
          "a durable classic queue comes back from its node's restart without its bindings",
          {"bindings_kept_at_restart": _const(False)}),
    Fault("cluster_confirms_without_majority", "cluster", "CLU-07",
          "publishes to a quorum queue without a majority are confirmed at once",
          {"confirm_waits_for_majority": _const(False)}),
    # a crashed node's consumers (core/disconnected.py): the timeout area's rule, judged on a cluster
    Fault("disconnected_returned_at_once", "timeout", "TMO-4.3-6",
          "an unreachable consumer's quorum deliveries go back at once (as up to 4.2), not after "
          "consumer_disconnected_timeout", {"disconnected_wait": lambda _set, _default: 0}, needs_cluster=True),
    Fault("disconnected_argument_ignored", "timeout", "TMO-4.3-6",
          "x-consumer-disconnected-timeout is accepted but the 60 s default is waited",
          {"disconnected_wait": lambda _set, default: default}, needs_cluster=True),
)

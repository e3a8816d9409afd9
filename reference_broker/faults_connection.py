"""Named faults of connections and access: permissions, SASL and user-id (the access area)
and resource alarms with publisher blocking (the alarms area). Part of the table of
reference_broker/faults.py, which says what a fault is and how it is switched on."""

from __future__ import annotations

from reference_broker.fault_type import Fault
from reference_broker.fault_type import const as _const

ALARM_FAULTS: tuple[Fault, ...] = (
    Fault("alarm_ignored", "alarms", "ALM-01", "a resource alarm blocks nobody: publishes go through, no connection.blocked",
          {"publish_blocked": _const(False)}),
    Fault("blocked_never_sent", "alarms", "ALM-01", "a publisher is blocked silently: connection.blocked is never sent",
          {"blocked_notice": _const(None)}),
    Fault("blocked_reason_memory_always", "alarms", "ALM-01", "connection.blocked always says 'low on memory'",
          {"blocked_notice": _const("low on memory")}),
    Fault("alarm_publish_not_held", "alarms", "ALM-02",
          "the publish that meets an alarm is routed before its connection blocks",
          {"held_from_header": _const(False)}),
    Fault("unblocked_at_first_clear", "alarms", "ALM-03",
          "connections are unblocked when any alarm clears, though another is still in force",
          {"unblocks": _const(True)}),
    Fault("alarm_blocks_every_connection", "alarms", "ALM-04",
          "an alarm blocks every connection at once, consumers included (reads paused)",
          {"blocks_every_connection": _const(True)}),
    Fault("blocked_dropped_by_heartbeat", "alarms", "ALM-05",
          "a blocked connection's heartbeat monitor runs on: it is dropped for the heartbeats it cannot send",
          {"blocked_heartbeat_paused": _const(False)}),
)

CONNECTION_FAULTS: tuple[Fault, ...] = (
    Fault("vhost_access_unchecked", "access", "ACC-01", "a user may open a vhost it has no permissions in",
          {"vhost_access_checked": _const(False)}),
    Fault("configure_permission_unchecked", "access", "ACC-02",
          "declarations and deletions need no configure permission",
          {"permission_checked": lambda kind, _method: kind != "configure"}),
    Fault("write_permission_unchecked_on_publish", "access", "ACC-03",
          "basic.publish needs no write permission on the exchange",
          {"permission_checked": lambda kind, method: (kind, method) != ("write", "basic.publish")}),
    Fault("read_permission_unchecked_on_get", "access", "ACC-04", "basic.get needs no read permission on the queue",
          {"permission_checked": lambda kind, method: (kind, method) != ("read", "basic.get")}),
    Fault("topic_permission_ignored", "access", "ACC-05", "topic permissions are ignored: every routing key is allowed",
          {"topic_permission_checked": _const(False)}),
    Fault("topic_permission_cc_unchecked", "access", "ACC-05",
          "a CC or BCC key is not checked against the topic permission (3.x's check on 4.x)",
          {"topic_checks_sender_keys": _const(False)}),
    Fault("auth_failure_close_ignored", "access", "ACC-06",
          "a refused login ends the socket without connection.close even with authentication_failure_close",
          {"auth_failure_close": _const(False)}),
    Fault("amqplain_refused", "access", "ACC-06",
          "AMQPLAIN is offered but refuses every login (403): a broker that implements PLAIN alone",
          {"mechanism_logs_in": lambda mechanism: mechanism != "AMQPLAIN"}),
    Fault("impersonator_ignored", "access", "ACC-07",
          "the impersonator tag is ignored: a user_id other than the user's is refused",
          {"impersonation_allowed": _const(False)}),
    *ALARM_FAULTS,
)

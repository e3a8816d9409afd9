"""Why a test may run beside the broker-wide ones: the reasons of `beside_broker_wide(reason)`.

A broker-wide test raises a resource alarm or sets the global consumer timeout (on RabbitMQ up to
4.2 also the channel tick) while the tests marked with one of these reasons run beside it
(conformance/plugin/schedule.py). Each reason is argued from RabbitMQ's source, for every profiled
version, in docs/probes.md ("Running side by side"), and shown on brokers by
tests/conformance/test_beside_broker_wide.py (every marked test passes while an alarm and a 1 ms
global consumer timeout are in force).
"""

from __future__ import annotations

NEVER_PUBLISHES = (
    "no publish, no consumer, no basic.get: an alarm blocks a running connection only once it publishes "
    "(rabbit_reader maybe_block on a content frame; only then is its heartbeat monitor paused) and a "
    "handshake not at all (control_throttle acts in running or blocked); the consumer timeout and the "
    "channel tick act only on deliveries awaiting an ack")
CLOSED_BY_CLIENT = (
    "a connection closed by the client: no channel, no publish, and its reader past every alarm "
    "(rabbit_reader control_throttle)")

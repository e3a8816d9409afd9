"""A deliberately faulty client: py-amqp with named faults, served over the adapter protocol.

Usage: ``python -m tests.client_judge.faulty_adapter FAULT[,FAULT...]``. Each fault makes the
client deviate from one client rule, the way a buggy library would; `FAULTS` names the scenario
that must then fail (the check is shown failing against a client that disagrees, as the broker
checks are against faulty brokers).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Any

from conformance.drivers import interface as di
from conformance.drivers.adapter import JsonLinesOutput, serve
from conformance.drivers.amqp_client import AmqpDriver

FAULTS = {  # fault -> the scenario it must fail
    "no-capabilities": "capabilities-advertised",
    "no-cancel-notice": "server-cancel",
    "acks-as-nacks": "confirm-acks",
    "confirm-before-return": "return-then-confirm",
    "no-redelivered": "redelivered",
    "refuse-tag-zero": "ack-tag-zero-multiple",
    "drop-headers": "properties-intact",
    "empty-as-message": "get-ok-and-empty",
    "capabilities-crash": "unknown-capabilities",
    "passive-swallows-404": "channel-close-404",
    "hold-acks-while-blocked": "slow-consumer-blocked",
    "no-heartbeats": "heartbeat-client-sends",
    "small-body-frames": "publish-fragmentation",
    "truncate-bodies": "deliver-fragmented",
    "refused-login-as-lost": "login-refused",
    "refused-login-ignored": "login-refused",
}


class FaultyDriver(AmqpDriver):
    client = "faulty"

    def __init__(self, faults: set[str], timeout: float = 5.0) -> None:
        super().__init__(timeout)
        self.faults = faults
        self.blocked = False
        self.held: list[tuple[int, int, bool]] = []
        self.returns: list[di.Event] = []

    def info(self) -> di.ClientInfo:
        return replace(super().info(), client="faulty", version=",".join(sorted(self.faults)))

    def make_connection(self, url: str, options: di.ConnectOptions) -> Any:
        conn = super().make_connection(url, options)
        if "no-capabilities" in self.faults:
            conn.negotiate_capabilities = {}  # start-ok advertises no capability at all
        return conn

    def connect(self, url: str, options: di.ConnectOptions = di.DEFAULT_CONNECT) -> None:
        try:
            super().connect(url, options)
        except di.DriverError:
            if "refused-login-ignored" in self.faults:
                return  # the application is never told the login was refused
            if "refused-login-as-lost" in self.faults:
                raise di.ConnectionLost("connection lost") from None  # the 403 reduced to a bare loss
            raise
        caps = self.conn.server_capabilities
        if "capabilities-crash" in self.faults and any(k.startswith("x-") for k in caps):
            raise KeyError("unknown capability")
        if "small-body-frames" in self.faults:
            self.conn.frame_max = 4096

    def emit(self, event: di.Event) -> None:
        if isinstance(event, di.Blocked | di.Unblocked):
            self.blocked = isinstance(event, di.Blocked)
            if not self.blocked:
                for channel, tag, multiple in self.held:
                    super().ack(channel, tag, multiple=multiple)
        if "no-cancel-notice" in self.faults and isinstance(event, di.BrokerCancelled):
            return
        if "confirm-before-return" in self.faults and isinstance(event, di.Returned):
            self.returns.append(event)
            return
        super().emit(event)
        if isinstance(event, di.Confirmed) and self.returns:
            super().emit(self.returns.pop())

    def confirmed(self, channel: int, tag: int, multiple: bool, ack: bool, shows_multiple: bool = True) -> None:
        super().confirmed(channel, tag, multiple, ack != ("acks-as-nacks" in self.faults), shows_multiple)

    def _delivery(self, channel: int, msg: Any) -> di.Delivery:
        found = super()._delivery(channel, msg)
        if "no-redelivered" in self.faults:
            found = replace(found, redelivered=False)
        if "drop-headers" in self.faults:
            found = replace(found, properties=found.properties._replace(headers=None))
        if "truncate-bodies" in self.faults and len(found.body) > 4096:
            found = replace(found, body=found.body[:-1])
        return found

    def declare_queue(self, channel: int, queue: str, **kwargs: Any) -> str:
        try:
            return super().declare_queue(channel, queue, **kwargs)
        except di.ChannelClosed:
            if "passive-swallows-404" in self.faults and kwargs.get("passive"):
                return queue
            raise

    def get(self, channel: int, queue: str, *, no_ack: bool = False) -> di.Delivery | None:
        found = super().get(channel, queue, no_ack=no_ack)
        if found is None and "empty-as-message" in self.faults:
            return di.Delivery(channel, 0, False, "", queue, b"")
        return found

    def ack(self, channel: int, delivery_tag: int, *, multiple: bool = False) -> None:
        if delivery_tag == 0 and "refuse-tag-zero" in self.faults:
            raise ValueError("delivery tag 0 is not a delivery")
        if self.blocked and "hold-acks-while-blocked" in self.faults:
            self.held.append((channel, delivery_tag, multiple))
            return
        super().ack(channel, delivery_tag, multiple=multiple)

    def pump(self, timeout: float) -> None:
        if "no-heartbeats" in self.faults and self.conn is not None:
            self.conn.heartbeat = 0  # never sends (nor checks) heartbeats
        super().pump(timeout)


def main() -> int:
    faults = {f for f in sys.argv[1].split(",") if f} if len(sys.argv) > 1 else set()
    unknown = faults - set(FAULTS)
    if unknown:
        print(f"unknown fault(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 4
    timeout = float(os.environ.get("AMQPC_ADAPTER_TIMEOUT", "5"))

    serve(lambda: FaultyDriver(faults, timeout), sys.stdin.fileno(), JsonLinesOutput(sys.stdout))
    return 0


if __name__ == "__main__":
    sys.exit(main())

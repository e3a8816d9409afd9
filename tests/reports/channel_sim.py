"""A correct broker, one channel: abstract steps in, the frame trace a recorder would keep out.

Used by the audit's property tests: every trace built here must audit clean, and a single
mutation of it must produce the finding the mutation stands for. The broker follows RULES.md:
tags 1, 2, ... (ACK-01), per-consumer prefetch for new consumers (QOS-02), requeued messages
first and with redelivered=true (RQ-02, RQ-04), confirms with seqnos from 1 (PC-02), coalesced
multiple acks (PC-04), deferred acks in transactions (ACK-08).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from hypothesis import strategies as st

from reports.audit.channel import ChannelFrame

STEPS = ("qos", "consume", "deliver", "get", "ack", "nack", "reject", "ack_all", "recover", "select",
         "publish", "confirm", "tx_select", "tx_commit", "tx_rollback")


@dataclass
class Delivery:
    tag: int
    consumer: str | None
    message: str


@dataclass
class ChannelSim:
    frames: list[ChannelFrame] = field(default_factory=list)
    next_tag: int = 1
    prefetch: int = 0
    consumers: dict[str, tuple[int, bool]] = field(default_factory=dict)  # ctag -> (limit, no_ack)
    unacked: dict[int, Delivery] = field(default_factory=dict)
    queue: deque[str] = field(default_factory=deque)
    returned: deque[str] = field(default_factory=deque)
    delivered_before: set[str] = field(default_factory=set)
    messages: int = 0
    confirming: bool = False
    published: int = 0
    pending_confirms: list[int] = field(default_factory=list)
    tx: bool = False
    tx_acks: list[tuple[Delivery, bool]] = field(default_factory=list)  # (delivery, requeue)

    def emit(self, direction: str, method: str | None, **fields: object) -> None:
        self.frames.append(ChannelFrame(seq=len(self.frames), direction=direction, method=method, **fields))  # type: ignore[arg-type]

    def run(self, steps: list[tuple[str, int, bool]], close: bool) -> list[ChannelFrame]:
        self.emit("out", "channel.open")
        self.emit("in", "channel.open-ok")
        for name, number, flag in steps:
            getattr(self, f"step_{name}")(number, flag)
        if close:
            while self.pending_confirms:
                self.step_confirm(0, False)
            self.emit("out", "channel.close", reply_code=200)
            self.emit("in", "channel.close-ok")
        return self.frames

    # --- consumers and deliveries ----------------------------------------------------------

    def step_qos(self, number: int, flag: bool) -> None:
        self.prefetch = number % 4
        self.emit("out", "basic.qos", prefetch_count=self.prefetch, global_qos=False)
        self.emit("in", "basic.qos-ok")

    def step_consume(self, number: int, flag: bool) -> None:
        ctag = f"c{len(self.consumers) + 1}"
        self.consumers[ctag] = (self.prefetch, flag)
        self.emit("out", "basic.consume", consumer_tag=ctag, no_ack=flag)
        self.emit("in", "basic.consume-ok", consumer_tag=ctag)

    def _next_message(self) -> str:
        if self.returned:
            return self.returned.popleft()
        if not self.queue:
            self.messages += 1
            self.queue.append(f"m{self.messages}")
        return self.queue.popleft()

    def _deliver_frames(self, method: str, tag: int, message: str, ctag: str | None) -> None:
        redelivered = message in self.delivered_before
        self.delivered_before.add(message)
        fields: dict[str, object] = {"delivery_tag": tag, "redelivered": redelivered}
        if ctag is not None:
            fields["consumer_tag"] = ctag
        self.emit("in", method, **fields)
        self.emit("in", None, frame_type="header")
        self.emit("in", None, frame_type="body", body_digest=message)

    def step_deliver(self, number: int, flag: bool) -> None:
        ready = [c for c, (limit, no_ack) in self.consumers.items() if no_ack or not limit or self._held(c) < limit]
        if not ready:
            return
        ctag = ready[number % len(ready)]
        tag, self.next_tag = self.next_tag, self.next_tag + 1
        message = self._next_message()
        self._deliver_frames("basic.deliver", tag, message, ctag)
        if not self.consumers[ctag][1]:
            self.unacked[tag] = Delivery(tag, ctag, message)

    def _held(self, ctag: str) -> int:
        """Deliveries counting against a consumer's prefetch: unacked, or acked in an open tx (ACK-08)."""
        return sum(d.consumer == ctag for d in self.unacked.values()) + sum(d.consumer == ctag for d, _ in self.tx_acks)

    def step_get(self, number: int, flag: bool) -> None:
        self.emit("out", "basic.get", no_ack=flag)
        tag, self.next_tag = self.next_tag, self.next_tag + 1
        message = self._next_message()
        self._deliver_frames("basic.get-ok", tag, message, None)
        if not flag:
            self.unacked[tag] = Delivery(tag, None, message)

    # --- acknowledgements ------------------------------------------------------------------

    def _settle(self, deliveries: list[Delivery], requeue: bool) -> None:
        for d in deliveries:
            del self.unacked[d.tag]
            if self.tx:
                self.tx_acks.append((d, requeue))
            elif requeue:
                self.returned.append(d.message)

    def _pick(self, number: int) -> Delivery | None:
        tags = sorted(self.unacked)
        return self.unacked[tags[number % len(tags)]] if tags else None

    def step_ack(self, number: int, flag: bool) -> None:
        self._ack("basic.ack", number, flag, requeue=False)

    def step_nack(self, number: int, flag: bool) -> None:
        self._ack("basic.nack", number, flag, requeue=number % 3 != 0)

    def step_reject(self, number: int, flag: bool) -> None:
        self._ack("basic.reject", number, False, requeue=flag)

    def _ack(self, method: str, number: int, multiple: bool, requeue: bool) -> None:
        d = self._pick(number)
        if d is None:
            return
        fields: dict[str, object] = {"delivery_tag": d.tag}
        if method != "basic.reject":
            fields["multiple"] = multiple
        if method != "basic.ack":
            fields["requeue"] = requeue
        self.emit("out", method, **fields)
        covered = [x for t, x in sorted(self.unacked.items()) if t <= d.tag] if multiple else [d]
        self._settle(covered, requeue)

    def step_ack_all(self, number: int, flag: bool) -> None:
        self.emit("out", "basic.ack", delivery_tag=0, multiple=True)
        self._settle(sorted(self.unacked.values(), key=lambda d: d.tag), False)

    def step_recover(self, number: int, flag: bool) -> None:
        if self.tx:
            return
        self.emit("out", "basic.recover", requeue=True)
        self._settle(sorted(self.unacked.values(), key=lambda d: d.tag), True)
        self.emit("in", "basic.recover-ok")

    def step_tx_select(self, number: int, flag: bool) -> None:
        if self.confirming or self.tx:
            return
        self.tx = True
        self.emit("out", "tx.select")
        self.emit("in", "tx.select-ok")

    def step_tx_commit(self, number: int, flag: bool) -> None:
        if not self.tx:
            return
        self.emit("out", "tx.commit")
        for d, requeue in self.tx_acks:
            if requeue:
                self.returned.append(d.message)
        self.tx_acks.clear()
        self.emit("in", "tx.commit-ok")

    def step_tx_rollback(self, number: int, flag: bool) -> None:
        if not self.tx:
            return
        self.emit("out", "tx.rollback")
        for d, _ in self.tx_acks:
            self.unacked[d.tag] = d
        self.tx_acks.clear()
        self.emit("in", "tx.rollback-ok")

    # --- publisher confirms ----------------------------------------------------------------

    def step_select(self, number: int, flag: bool) -> None:
        if self.tx:
            return
        self.confirming = True
        self.emit("out", "confirm.select")
        self.emit("in", "confirm.select-ok")

    def step_publish(self, number: int, flag: bool) -> None:
        self.emit("out", "basic.publish")
        self.emit("out", None, frame_type="header")
        self.emit("out", None, frame_type="body")
        if self.confirming:
            self.published += 1
            self.pending_confirms.append(self.published)

    def step_confirm(self, number: int, flag: bool) -> None:
        if not self.pending_confirms:
            return
        method = "basic.nack" if number % 7 == 6 else "basic.ack"
        if flag and len(self.pending_confirms) > 1:  # PC-04: coalesce the lowest ones
            count = 1 + number % len(self.pending_confirms)
            done, self.pending_confirms = self.pending_confirms[:count], self.pending_confirms[count:]
            self.emit("in", method, delivery_tag=done[-1], multiple=True)
        else:  # PC-10: any pending seqno, not necessarily the lowest
            seqno = self.pending_confirms.pop(number % len(self.pending_confirms))
            self.emit("in", method, delivery_tag=seqno, multiple=False)


def steps() -> st.SearchStrategy[list[tuple[str, int, bool]]]:
    step = st.tuples(st.sampled_from(STEPS), st.integers(0, 20), st.booleans())
    return st.lists(step, max_size=60)


# Scenarios that make sure a trace has what a mutation needs, followed by random steps.
REQUEUE = [("consume", 0, False), ("deliver", 0, False), ("nack", 1, False), ("deliver", 0, False)]
CONFIRMS = [("select", 0, False), ("publish", 0, False), ("confirm", 0, False)]


@st.composite
def valid_traces(draw: st.DrawFn, prefix: tuple[tuple[str, int, bool], ...] = ()) -> list[ChannelFrame]:
    return ChannelSim().run([*prefix, *draw(steps())], close=draw(st.booleans()))

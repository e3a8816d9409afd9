"""A recording reduced to shapes: what the workload asked the broker, and what it did over time.

Responsibility: read one recording's frames (one run, rows ordered by test, connection, seq; plain
Python columns) and emit three kinds of rows, all plain dicts with the columns of `SHAPE_COLUMNS`:
- `request`: one per declaration-like request (queue.declare, exchange.declare, basic.consume,
  basic.qos, queue.bind, basic.get) with its shape (method, the queue's type, the argument names
  and the values that matter, exchange type, flags, global qos) and the reply the recorded broker
  gave (`ok`, `channel.close`, `connection.close`, `nowait`, `none`), plus where it was;
- `returns`: one per message (queue, body digest) returned to its queue at least once, with how
  many times by basic.reject, basic.nack and otherwise (recover, channel or connection closed
  holding it);
- `held`: one per queue that had manual-ack deliveries: the longest time (ms) a delivery was
  held before it was settled or its channel ended.
A Spark job (`reports.preflight_spark`) aggregates the rows of all runs; `judging` reads the aggregate.

Rules:
- Only client requests are shapes; their reply is the broker's next answer on the channel (or the
  connection.close on channel 0). A request sent with nowait=true owes no reply (`nowait`).
- The queue's type is the x-queue-type declared in the same recording ("classic" when declared
  without one); a queue never declared there is "unknown". Server-named queues take the name in
  their declare-ok.
- Argument values are kept only where the value decides behaviour (`VALUES_THAT_MATTER`); for the
  others the shape keeps the value's JSON type, so a million distinct TTLs are one shape.
- A message is its queue and its body digest (`body_digest`, RQ-04's identity); deliveries of
  no-ack consumers and no-ack gets are never outstanding, so never returned nor held.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

REPLIES: dict[str, frozenset[str]] = {
    "queue.declare": frozenset({"queue.declare-ok"}),
    "exchange.declare": frozenset({"exchange.declare-ok"}),
    "basic.consume": frozenset({"basic.consume-ok"}),
    "basic.qos": frozenset({"basic.qos-ok"}),
    "queue.bind": frozenset({"queue.bind-ok"}),
    "basic.get": frozenset({"basic.get-ok", "basic.get-empty"}),
}
VALUES_THAT_MATTER = frozenset({"x-queue-version", "x-queue-mode", "x-queue-type", "x-overflow", "x-delivery-limit",
                                "x-single-active-consumer", "x-dead-letter-strategy", "x-max-priority"})
INPUT_COLUMNS = ("test_id", "connection", "channel", "seq", "ts", "direction", "frame_type", "method",
                 "delivery_tag", "multiple", "requeue", "consumer_tag", "reply_code", "reply_text", "queue",
                 "queue_type", "global_qos", "prefetch_count", "no_ack", "nowait", "body_digest", "arguments",
                 "exchange_type", "flags")
SHAPE_COLUMNS = ("row_kind", "method", "queue_type", "arguments", "exchange_type", "flags", "global_qos",
                 "reply", "reply_code", "reply_text", "raw_arguments", "queue", "delivery_limit", "consumer_timeout",
                 "digest", "by_reject", "by_nack", "by_other", "held_ms", "run_id", "test_id", "connection",
                 "channel", "seq")
CLASSIC, UNKNOWN = "classic", "unknown"
_CLOSES = frozenset({"channel.close", "channel.close-ok"})


def shape_arguments(raw: str | None) -> str:
    """The shape's view of an arguments table (canonical JSON in, canonical JSON out)."""
    table = parse_arguments(raw)
    kept = {name: value if name in VALUES_THAT_MATTER else type(value).__name__ for name, value in table.items()}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"))


def parse_arguments(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:  # cut by the recorder (results.ARGUMENTS_MAX): the names are lost
        return {}
    return value if isinstance(value, dict) else {}


@dataclass
class _Queue:
    kind: str = UNKNOWN
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Channel:
    pending: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)  # (row, method, shape row)
    consumers: dict[str, tuple[str | None, bool]] = field(default_factory=dict)  # ctag -> (queue, no_ack)
    waiting_consume: list[tuple[str | None, bool]] = field(default_factory=list)
    waiting_get: list[tuple[str | None, bool]] = field(default_factory=list)
    outstanding: dict[int, list[Any]] = field(default_factory=dict)  # tag -> [queue, digest, ts, row]
    last_delivery: int | None = None  # its body frame gives the digest


class RecordingShapes:
    """Shapes of one run: feed it the run's rows in order (`extract`), then read the rows."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.queues: dict[str, _Queue] = {}
        self.requests: list[dict[str, Any]] = []
        self.returns: Counter[tuple[str | None, str | None, str]] = Counter()
        self.first_return: dict[tuple[str | None, str | None], tuple[Any, ...]] = {}
        self.held: dict[str | None, tuple[int, tuple[Any, ...]]] = {}
        self._channels: dict[tuple[Any, int, int], _Channel] = {}

    def extract(self, c: Mapping[str, Sequence[Any]]) -> None:
        """Read rows 0..n of the columns `c` (INPUT_COLUMNS; rows by test, connection, seq)."""
        methods, directions, frame_types = c["method"], c["direction"], c["frame_type"]
        for i in range(len(methods)):
            method = methods[i]
            if method is None:
                if frame_types[i] == "body" and directions[i] == "in":
                    self._body(c, i)
                continue
            key = (c["test_id"][i], c["connection"][i], c["channel"][i])
            if directions[i] == "out":
                self._out(c, i, key, method)
            else:
                self._in(c, i, key, method)
        for key in list(self._channels):
            self._end_channel(key, None)

    def rows(self) -> Iterator[dict[str, Any]]:
        yield from self.requests
        for (queue, digest), where in self.first_return.items():
            q = self.queues.get(queue or "", _Queue())
            yield self._row("returns", where, queue=queue, queue_type=q.kind, digest=digest,
                            delivery_limit=_int_or_none(q.arguments.get("x-delivery-limit")),
                            by_reject=self.returns[queue, digest, "reject"], by_nack=self.returns[queue, digest, "nack"],
                            by_other=self.returns[queue, digest, "other"])
        for queue, (held, where) in self.held.items():
            q = self.queues.get(queue or "", _Queue())
            yield self._row("held", where, queue=queue, queue_type=q.kind, held_ms=held,
                            consumer_timeout=_int_or_none(q.arguments.get("x-consumer-timeout")))

    def _row(self, kind: str, where: tuple[Any, ...], **values: Any) -> dict[str, Any]:
        test_id, connection, channel, seq = where
        row = dict.fromkeys(SHAPE_COLUMNS)
        row.update(row_kind=kind, run_id=self.run_id, test_id=test_id, connection=connection, channel=channel,
                   seq=seq, **values)
        return row

    def _channel(self, key: tuple[Any, int, int]) -> _Channel:
        state = self._channels.get(key)
        if state is None:
            state = self._channels[key] = _Channel()
        return state

    # -- client frames ---------------------------------------------------------------------
    def _out(self, c: Mapping[str, Sequence[Any]], i: int, key: tuple[Any, int, int], method: str) -> None:
        if method in REPLIES:
            self._request(c, i, key, method)
        elif method in ("basic.ack", "basic.reject", "basic.nack"):
            multiple = bool(c["multiple"][i]) and method != "basic.reject"
            requeue = bool(c["requeue"][i]) and method != "basic.ack"
            how = "reject" if method == "basic.reject" else "nack"
            self._settle(key, c["delivery_tag"][i] or 0, multiple, how if requeue else None, c["ts"][i])
        elif method in ("basic.recover", "basic.recover-async"):
            self._return_all(key, c["ts"][i])
        elif method == "channel.open":
            self._end_channel(key, c["ts"][i])
        elif method == "connection.close":
            self._end_connection(key, c["ts"][i])

    def _request(self, c: Mapping[str, Sequence[Any]], i: int, key: tuple[Any, int, int], method: str) -> None:
        state = self._channel(key)
        queue = c["queue"][i]
        raw = c["arguments"][i]
        arguments = parse_arguments(raw)
        flags = sorted(c["flags"][i] or ())
        if method == "queue.declare" and "passive" not in flags:
            self._declared(queue, arguments)
        kind: str | None = self.queues[queue].kind if queue in self.queues else UNKNOWN
        if method in ("exchange.declare", "basic.qos"):
            kind = None
        if method == "basic.consume":
            no_ack = bool(c["no_ack"][i])
            if c["nowait"][i]:
                state.consumers[c["consumer_tag"][i] or ""] = (queue, no_ack)
            else:
                state.waiting_consume.append((queue, no_ack))
        elif method == "basic.get":
            state.waiting_get.append((queue, bool(c["no_ack"][i])))
        row = self._row("request", (key[0], key[1], key[2], c["seq"][i]), method=method, queue_type=kind,
                        arguments=shape_arguments(raw) if raw is not None else None, raw_arguments=raw,
                        exchange_type=c["exchange_type"][i], flags=",".join(flags), queue=queue,
                        global_qos=bool(c["global_qos"][i]) and (c["prefetch_count"][i] or 0) > 0
                        if method == "basic.qos" else None)
        if c["nowait"][i]:
            row["reply"] = "nowait"
            self.requests.append(row)
        else:
            state.pending.append((i, method, row))

    def _declared(self, queue: str | None, arguments: dict[str, Any]) -> None:
        kind = arguments.get("x-queue-type")
        self.queues[queue or ""] = _Queue(str(kind) if kind else CLASSIC, arguments)

    # -- broker frames ---------------------------------------------------------------------
    def _in(self, c: Mapping[str, Sequence[Any]], i: int, key: tuple[Any, int, int], method: str) -> None:
        state = self._channel(key)
        if method in ("basic.deliver", "basic.get-ok"):
            self._delivery(c, i, key, state, method)
            return
        if method == "connection.close":
            self._answer_all(key, c, i, "connection.close")
            self._end_connection(key, c["ts"][i])
            return
        if method in _CLOSES:
            if method == "channel.close":
                self._answer_all(key, c, i, "channel.close")
            self._end_channel(key, c["ts"][i])
            return
        if state.pending and method in REPLIES[state.pending[0][1]]:
            _, asked, row = state.pending.pop(0)
            row["reply"] = "ok"
            self.requests.append(row)
            if asked == "queue.declare" and c["queue"][i] and row["queue"] == "":
                self.queues[c["queue"][i]] = self.queues.get("", _Queue(CLASSIC))
            if asked == "basic.consume" and state.waiting_consume:
                state.consumers[c["consumer_tag"][i] or ""] = state.waiting_consume.pop(0)
            if asked == "basic.get" and method == "basic.get-empty" and state.waiting_get:
                state.waiting_get.pop(0)

    def _answer_all(self, key: tuple[Any, int, int], c: Mapping[str, Sequence[Any]], i: int, how: str) -> None:
        keys = [k for k in self._channels if k[:2] == key[:2]] if how == "connection.close" else [key]
        for k in keys:
            for _, _, row in self._channels[k].pending:
                row.update(reply=how, reply_code=c["reply_code"][i], reply_text=c["reply_text"][i])
                self.requests.append(row)
            self._channels[k].pending.clear()

    def _delivery(self, c: Mapping[str, Sequence[Any]], i: int, key: tuple[Any, int, int], state: _Channel,
                  method: str) -> None:
        if method == "basic.deliver":
            queue, no_ack = state.consumers.get(c["consumer_tag"][i] or "", (None, False))
        else:
            if state.pending and state.pending[0][1] == "basic.get":
                _, _, row = state.pending.pop(0)
                row["reply"] = "ok"
                self.requests.append(row)
            queue, no_ack = state.waiting_get.pop(0) if state.waiting_get else (None, False)
        tag = c["delivery_tag"][i] or 0
        state.last_delivery = None
        if not no_ack:
            state.outstanding[tag] = [queue, None, c["ts"][i], (key[0], key[1], key[2], c["seq"][i])]
            state.last_delivery = tag

    def _body(self, c: Mapping[str, Sequence[Any]], i: int) -> None:
        key = (c["test_id"][i], c["connection"][i], c["channel"][i])
        state = self._channels.get(key)
        if state is not None and state.last_delivery is not None:
            entry = state.outstanding.get(state.last_delivery)
            if entry is not None and entry[1] is None:
                entry[1] = c["body_digest"][i]
            state.last_delivery = None

    # -- settling, returns, holds ----------------------------------------------------------
    def _settle(self, key: tuple[Any, int, int], tag: int, multiple: bool, returned: str | None, ts: int) -> None:
        state = self._channel(key)
        tags = [t for t in state.outstanding if t <= tag] if multiple else [tag] if tag in state.outstanding else []
        for t in tags:
            self._release(state.outstanding.pop(t), returned, ts)

    def _return_all(self, key: tuple[Any, int, int], ts: int) -> None:
        state = self._channel(key)
        for entry in state.outstanding.values():
            self._release(entry, "other", ts)
        state.outstanding.clear()

    def _release(self, entry: list[Any], returned: str | None, ts: int | None) -> None:
        queue, digest, delivered, where = entry
        if ts is not None and delivered is not None:
            held = (ts - delivered) // 1000
            if held > self.held.get(queue, (-1, None))[0]:
                self.held[queue] = (held, where)
        if returned is not None:
            self.returns[queue, digest, returned] += 1
            self.first_return.setdefault((queue, digest), where)

    def _end_channel(self, key: tuple[Any, int, int], ts: int | None) -> None:
        state = self._channels.pop(key, None)
        if state is None:
            return
        for _, _, row in state.pending:
            row["reply"] = "none"
            self.requests.append(row)
        for entry in state.outstanding.values():  # the broker requeues what a closed channel held
            self._release(entry, "other" if ts is not None else None, ts)

    def _end_connection(self, key: tuple[Any, int, int], ts: int | None) -> None:
        for k in [k for k in self._channels if k[:2] == key[:2]]:
            self._end_channel(k, ts)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None

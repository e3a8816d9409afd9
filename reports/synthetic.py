"""Synthetic results lakes: many runs of plausible records, for tests and the pipeline bench.

Responsibility: write a results directory in exactly the layout and schema of
`conformance.results.records` (``<table>/run=<id>/part-00000.parquet``, `SCHEMAS`) with
- runs spread over a few targets (broker, version, profile, client), one hour apart;
- tests for every catalogue rule, mostly passing, with per-target failures, a few flaky
  (rule, target) pairs that flip between runs and one regression in the last run of a target;
- frames: one connection with one channel per frame-carrying test, a consumer with manual
  acks on a confirm channel (publish → confirm → deliver → ack, repeated), and violations
  injected into a known set of channels, so the audit's expected findings are known exactly.

Rules: everything is vectorised with numpy (the bench writes ~10 M frames); the same seed gives
the same lake; `LakeStats.expected` counts the findings the trace audit must report.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import codec
from codec.constants import ReplyCode
from conformance.catalogue.rules import all_rules
from conformance.catalogue.rules import rule as catalogue_rule
from conformance.results.records import PARTITION_KEY, SCHEMAS

TARGETS: tuple[tuple[str, str, str, str], ...] = (  # product, version, profile, client
    ("reference-broker", "0.1.0", "rabbitmq-4.3", "raw"),
    ("RabbitMQ", "3.10.8", "rabbitmq-3.10", "raw"),
    ("RabbitMQ", "3.10.8", "rabbitmq-3.10", "pika"),
    ("GarageMQ", "0.0.0", "amqp-0-9-1", "raw"),
)
EPOCH = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
INJECTED = ("tag-sequence", "ack-settled-tag", "confirm-duplicate", "confirm-unpublished")


@dataclass(frozen=True)
class LakeShape:
    runs: int = 100
    channels_per_run: int = 500
    frames_per_channel: int = 200
    tests_per_run: int = 10_000
    violation_rate: float = 0.01  # share of channels with one injected violation
    seed: int = 7


@dataclass
class LakeStats:
    runs: int = 0
    tests: int = 0
    channels: int = 0
    frames: int = 0
    expected: Counter[str] = field(default_factory=Counter)  # audit finding kind -> count


# One channel's frames: (direction, frame_type, method). A cycle is publish → confirm →
# deliver → ack; the channel opens with qos, confirm.select and a consumer and closes cleanly.
Row = tuple[str, str, str | None]  # direction, frame type, method
_OPEN: list[Row] = [("out", "method", "channel.open"), ("in", "method", "channel.open-ok"),
         ("out", "method", "basic.qos"), ("in", "method", "basic.qos-ok"),
         ("out", "method", "confirm.select"), ("in", "method", "confirm.select-ok"),
         ("out", "method", "basic.consume"), ("in", "method", "basic.consume-ok")]
_CYCLE: list[Row] = [("out", "method", "basic.publish"), ("out", "header", None), ("out", "body", None),
          ("in", "method", "basic.ack"), ("in", "method", "basic.deliver"), ("in", "header", None),
          ("in", "body", None), ("out", "method", "basic.ack")]
_CLOSE: list[Row] = [("out", "method", "channel.close"), ("in", "method", "channel.close-ok")]
_PUBLISH, _CONFIRM, _DELIVER, _CLIENT_ACK = 0, 3, 4, 7  # offsets inside a cycle
_BODY = 100
_METHOD_IDS = {m.NAME: (m.CLASS_ID, m.METHOD_ID) for m in (
    codec.ChannelOpen, codec.ChannelOpenOk, codec.BasicQos, codec.BasicQosOk, codec.ConfirmSelect,
    codec.ConfirmSelectOk, codec.BasicConsume, codec.BasicConsumeOk, codec.BasicPublish, codec.BasicAck,
    codec.BasicDeliver, codec.ChannelClose, codec.ChannelCloseOk)}


def write_lake(root: Path | str, shape: LakeShape = LakeShape()) -> LakeStats:
    """Write a synthetic results lake under `root`; return what was written."""
    root = Path(root)
    rng = np.random.default_rng(shape.seed)
    rule_ids = [r.id for r in all_rules()]
    areas = {r.id: r.area for r in all_rules()}
    stats = LakeStats()
    base = _base_verdicts(rng, len(rule_ids))
    for index in range(shape.runs):
        run_id = f"run-{index:04d}"
        target = index % len(TARGETS)
        started = EPOCH + timedelta(hours=index)
        tests = _tests_table(rng, shape, run_id, index, target, started, rule_ids, areas, base)
        frames = _frames_table(rng, shape, run_id, tests, started, stats.expected)
        _write(root, "tests", run_id, tests)
        _write(root, "frames", run_id, frames)
        _write(root, "runs", run_id, _run_table(run_id, target, started, tests.num_rows))
        stats.runs += 1
        stats.tests += tests.num_rows
        stats.channels += shape.channels_per_run
        stats.frames += frames.num_rows
    return stats


def _write(root: Path, table: str, run_id: str, data: pa.Table) -> None:
    directory = root / table / f"{PARTITION_KEY}={run_id}"
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, directory / "part-00000.parquet")


def _run_table(run_id: str, target: int, started: datetime, tests: int) -> pa.Table:
    product, version, profile, client = TARGETS[target]
    row = {"run_id": run_id, "broker_url": f"amqp://guest@127.0.0.1:{5672 + target}/", "product": product,
           "version": version, "profile": profile, "client": client, "harness_version": "0.1.0",
           "admin": "none", "timeout_scale": 1.0, "started": started,
           "finished": started + timedelta(minutes=7), "exit_status": 1, "tests": tests}
    return pa.Table.from_pylist([row], schema=SCHEMAS["runs"])


# --- tests ---------------------------------------------------------------------------------

_VERDICTS = np.array(["passed", "failed", "non-strict", "unimplemented", "not-applicable", "broken"])


def _base_verdicts(rng: np.random.Generator, rules: int) -> np.ndarray:
    """Per (target, rule): the usual verdict index, and which pairs are flaky (-1)."""
    base = rng.choice(len(_VERDICTS), size=(len(TARGETS), rules), p=[0.78, 0.08, 0.04, 0.05, 0.04, 0.01])
    base[0] = 0  # the reference broker passes everything ...
    base[0, 6] = 1  # ... but one rule
    flaky = rng.choice(len(TARGETS) * rules, size=max(1, rules // 12), replace=False)
    base.flat[flaky] = -1
    return base


def _tests_table(rng: np.random.Generator, shape: LakeShape, run_id: str, index: int, target: int,
                 started: datetime, rule_ids: list[str], areas: dict[str, str], base: np.ndarray) -> pa.Table:
    n = shape.tests_per_run
    rule = np.arange(n) % len(rule_ids)
    verdict = base[target, rule].copy()
    flaky = verdict == -1
    verdict[flaky] = np.where(rng.random(int(flaky.sum())) < 0.5, 0, 1)
    last_of_target = index + len(TARGETS) >= shape.runs
    if target == 1:  # a regression: ACK-01 passes in the target's earlier runs and fails in its latest
        verdict[rule == rule_ids.index("ACK-01")] = 1 if last_of_target else 0
    names = [f"conformance/suite/test_{areas[r].replace('-', '_')}.py::test_rule[{r}-{{}}]" for r in rule_ids]
    test_ids = [names[r].format(k // len(rule_ids)) for k, r in enumerate(rule.tolist())]
    words = _VERDICTS[verdict]
    failed = words == "failed"
    outcome = np.where(failed, "failed", np.where(np.isin(words, ["passed", "broken"]), "passed", "skipped"))
    duration = rng.gamma(2.0, 0.02, n)
    reply = np.where(failed, int(ReplyCode.PRECONDITION_FAILED), 0)
    frames = np.zeros(n, dtype=np.int32)
    frames[_frame_tests(shape)] = _frames_per_channel(shape)
    columns = {
        "run_id": pa.repeat(pa.scalar(run_id), n), "test_id": pa.array(test_ids),
        "rule_ids": pa.array([[rule_ids[r]] for r in rule.tolist()], pa.list_(pa.string())),
        "area": pa.array([areas[rule_ids[r]] for r in rule.tolist()]), "verdict": pa.array(words),
        "outcome": pa.array(outcome), "phase": pa.repeat(pa.scalar("call"), n),
        "started": pa.array(np.full(n, started), pa.timestamp("us", tz="UTC")),
        "duration": pa.array(duration), "duration_total": pa.array(duration + 0.003),
        "reply_scope": _text_where(failed, "channel"),
        "reply_code": pa.array(reply, pa.int32(), mask=~failed),
        "reply_text": _text_where(failed, "PRECONDITION_FAILED - unknown delivery tag 7"),
        "reply_class_id": pa.array(np.full(n, 60), pa.int32(), mask=~failed),
        "reply_method_id": pa.array(np.full(n, 80), pa.int32(), mask=~failed),
        "hypothesis_seed": _text_where(failed, "301"),
        "minimal_example": _text_where(failed, "state = Machine()\nstate.publish(n=2)\nstate.ack(tag=3)"),
        "message": _text_where(failed, "expected channel.close 406 (ACK-03), got basic.qos-ok"),
        "frames": pa.array(frames),
        "failed_rules": pa.array([[rule_ids[r]] if f else None for r, f in zip(rule.tolist(), failed.tolist(),
                                                                               strict=True)], pa.list_(pa.string())),
        "judged_by": pa.nulls(n, pa.list_(pa.string())), "stopped_nodes": pa.nulls(n, pa.list_(pa.int32())),
        "title": pa.nulls(n, pa.string()),
        "clause_ids": pa.array([_first_clause(rule_ids[r]) for r in rule.tolist()], pa.list_(pa.string())),
    }
    return pa.table(columns, schema=SCHEMAS["tests"])


def _first_clause(rule_id: str) -> list[str] | None:
    """A synthetic test names its rule's first clause (the report's clause tables get rows)."""
    clauses = catalogue_rule(rule_id).clauses
    return [clauses[0].id] if clauses else None


def _text_where(mask: np.ndarray, text: str) -> pa.Array:
    return pa.array(np.full(len(mask), text, dtype=object), pa.string(), mask=~mask)


def _frame_tests(shape: LakeShape) -> np.ndarray:
    """Indices of the tests that own a channel: spread evenly over the run's tests."""
    step = max(1, shape.tests_per_run // shape.channels_per_run)
    return (np.arange(shape.channels_per_run) * step) % shape.tests_per_run


def _cycles(shape: LakeShape) -> int:
    return max(2, round((shape.frames_per_channel - len(_OPEN) - len(_CLOSE)) / len(_CYCLE)))


def _frames_per_channel(shape: LakeShape) -> int:
    return len(_OPEN) + len(_CLOSE) + _cycles(shape) * len(_CYCLE)


# --- frames --------------------------------------------------------------------------------


def _template(cycles: int) -> tuple[list[Row], np.ndarray, np.ndarray]:
    """One channel's (direction, type, method) rows, each row's cycle (1-based, 0 outside) and offset."""
    rows = list(_OPEN)
    cycle = [0] * len(rows)
    offset = [-1] * len(rows)
    for k in range(1, cycles + 1):
        rows += _CYCLE
        cycle += [k] * len(_CYCLE)
        offset += list(range(len(_CYCLE)))
    rows += _CLOSE
    cycle += [0, 0]
    offset += [-1, -1]
    return rows, np.array(cycle), np.array(offset)


def _frames_table(rng: np.random.Generator, shape: LakeShape, run_id: str, tests: pa.Table,
                  started: datetime, expected: Counter[str]) -> pa.Table:
    cycles = _cycles(shape)
    rows, cycle, offset = _template(cycles)
    per, channels = len(rows), shape.channels_per_run
    n = per * channels
    tile = np.tile
    tag = tile(np.where(np.isin(offset, [_CONFIRM, _DELIVER, _CLIENT_ACK]), cycle, 0), channels).astype(np.int64)
    _inject(rng, shape, tag, per, cycles, offset, expected)
    directions, types, methods = zip(*rows, strict=True)
    has_tag = tile(np.isin(offset, [_CONFIRM, _DELIVER, _CLIENT_ACK]), channels)
    is_ack = tile(np.isin(offset, [_CONFIRM, _CLIENT_ACK]), channels)
    is_deliver = tile(offset == _DELIVER, channels)
    has_ctag = tile(np.isin(np.array(methods, dtype=object), ["basic.consume", "basic.consume-ok",
                                                              "basic.deliver"]), channels)
    has_size = tile(np.isin(offset, [_PUBLISH, 1, 2, 5, 6]), channels)
    ids = np.array([_METHOD_IDS.get(m or "", (60 if t == "header" else 0, 0)) for _, t, m in rows])
    owner = tests["test_id"].take(pa.array(_frame_tests(shape)))
    seq = tile(np.arange(per, dtype=np.int32), channels)
    channel_index = np.repeat(np.arange(channels, dtype=np.int32), per)
    micros = channel_index.astype(np.int64) * 2_000_000 + seq.astype(np.int64) * 250
    columns = {
        "run_id": pa.repeat(pa.scalar(run_id), n),
        "test_id": owner.take(pa.array(channel_index)),
        "connection": pa.array(channel_index + 1), "channel": pa.array(np.ones(n, dtype=np.int32)),
        "seq": pa.array(seq),
        "ts": pa.array(np.datetime64(started.replace(tzinfo=None), "us") + micros.astype("timedelta64[us]"),
                       pa.timestamp("us", tz="UTC")),
        "direction": _repeat_strings(directions, channels), "frame_type": _repeat_strings(types, channels),
        "class_id": pa.array(tile(ids[:, 0], channels), pa.int32(), mask=tile(ids[:, 0] == 0, channels)),
        "method_id": pa.array(tile(ids[:, 1], channels), pa.int32(), mask=tile(ids[:, 1] == 0, channels)),
        "method": _repeat_strings(methods, channels),
        "delivery_tag": pa.array(tag, mask=~has_tag),
        "multiple": pa.array(np.zeros(n, dtype=bool), mask=~is_ack),
        "requeue": pa.nulls(n, pa.bool_()),
        "redelivered": pa.array(np.zeros(n, dtype=bool), mask=~is_deliver),
        "consumer_tag": pa.array(np.full(n, "ctag-1", dtype=object), mask=~has_ctag),
        "reply_code": pa.nulls(n, pa.int32()), "reply_text": pa.nulls(n, pa.string()),
        "body_size": pa.array(np.full(n, _BODY, dtype=np.int64), mask=~has_size),
    }
    schema = SCHEMAS["frames"]
    for name in schema.names:  # the audit's newer columns: null here, as in lakes written before them
        columns.setdefault(name, pa.nulls(n, schema.field(name).type))
    return pa.table(columns, schema=schema)


def _repeat_strings(values: tuple[str | None, ...], times: int) -> pa.Array:
    unique = sorted({v for v in values if v is not None})
    index = np.array([unique.index(v) if v is not None else -1 for v in values], dtype=np.int32)
    tiled = np.tile(index, times)
    indices = pa.array(tiled, mask=tiled < 0)
    return pa.DictionaryArray.from_arrays(indices, pa.array(unique, pa.string())).cast(pa.string())


def _inject(rng: np.random.Generator, shape: LakeShape, tag: np.ndarray, per: int, cycles: int,
            offset: np.ndarray, expected: Counter[str]) -> None:
    """Break a known set of channels, one violation each, and count the findings due."""
    count = round(shape.channels_per_run * shape.violation_rate)
    chosen = rng.choice(shape.channels_per_run, size=min(count, shape.channels_per_run), replace=False)
    where = {o: np.flatnonzero(offset == o) for o in (_CONFIRM, _DELIVER, _CLIENT_ACK)}
    for n, channel in enumerate(chosen.tolist()):
        kind = INJECTED[n % len(INJECTED)]
        j = int(rng.integers(2, cycles + 1))  # the cycle that breaks (1-based, never the first)
        base = channel * per
        if kind == "tag-sequence":  # one gap: tags jump by 1 from cycle j on, acks follow
            for o in (_DELIVER, _CLIENT_ACK):
                tag[base + where[o][j - 1:]] += 1
            expected["tag-sequence"] += 1
        elif kind == "ack-settled-tag":  # cycle j acks the previous tag again; the broker carries on
            tag[base + where[_CLIENT_ACK][j - 1]] = j - 1
            expected["ack-settled-tag"] += 1
        elif kind == "confirm-duplicate":  # confirm j repeats j-1, so j is never confirmed
            tag[base + where[_CONFIRM][j - 1]] = j - 1  # j is still pending at the client's close:
            expected["confirm-duplicate"] += 1  # it dies with the channel (PC-13), no confirm-missing
        else:  # a confirm for a seqno never published; j is never confirmed (pending at the close)
            tag[base + where[_CONFIRM][j - 1]] = cycles + 5
            expected["confirm-unpublished"] += 1

"""Results records (docs/design.md decision 7): one schema, written as Parquet during every run.

Responsibility: declare the three record kinds of a run (the run, one record per test, one
per frame) and turn a test's recorded frames into frame records; `conformance.results.parts`
writes them to a results directory that accumulates runs (a "results lake") and reads them back.

Rules:
- The schema is declared once, as plain `Column`s (`COLUMNS["runs" | "tests" | "frames"]`).
  The pyarrow schemas (`SCHEMAS`, `schemas()`, built on first use: importing this module does
  not import Arrow) and the Spark DDL (`spark_ddl`, e.g. for `spark.read.schema(...)` or
  `StructType.fromDDL`) are derived from them; column kinds use Spark's type names.
- Readers get the partition column `run` (`PARTITION_KEY`; read it as a string, `read_table`
  does) in addition to the data column `run_id`.
- Passwords never reach disk: URLs are stored through `redact_url`.
- Timestamps are UTC; frame `ts` is the recorder's monotonic clock mapped to wall-clock time.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    import pyarrow as pa

from codec import BodyFrame, Command, HeaderFrame, HeartbeatFrame, MethodFrame, ProtocolHeader
from conformance.results.observations import FrameRecord

PARTITION_KEY = "run"
CLIENT_PROFILE = "client-side"  # the profile of a run that judged a client library (conformance.client_judge)
RAW_CLIENT = "raw"  # the client of a run through the project's own codec driver (`--client raw`, the default)
TABLES = ("runs", "tests", "frames")


class Column(NamedTuple):
    """One column: its name, its kind (a Spark type name) and whether it may be null."""

    name: str
    kind: str  # string | int | bigint | double | boolean | timestamp | array<string> | array<int>
    nullable: bool = True


COLUMNS: dict[str, tuple[Column, ...]] = {
    "runs": (
        Column("run_id", "string", False),
        Column("broker_url", "string", False),  # without the password
        Column("product", "string"),
        Column("version", "string"),
        Column("profile", "string"),
        Column("profile_detail", "string"),  # why this profile: base, claims, rules each adds (lines)
        Column("client", "string", False),
        Column("client_version", "string"),  # the client library's version (client-side runs, --client LIBRARY)
        Column("harness_version", "string", False),
        Column("admin", "string"),  # none | rabbitmqctl | management URL without the password
        Column("timeout_scale", "double", False),
        Column("started", "timestamp", False),
        Column("finished", "timestamp"),
        Column("exit_status", "int"),
        Column("tests", "int"),
        Column("baseline", "string"),  # `run --baseline`: the entries and what this run matched (JSON), else null
        Column("cluster_nodes", "array<string>"),  # a cluster run: its node URLs without the password (older lakes: null)
    ),
    "tests": (
        Column("run_id", "string", False),
        Column("test_id", "string", False),  # the pytest node id
        Column("rule_ids", "array<string>", False),
        Column("area", "string", False),
        Column("verdict", "string", False),  # conformance.plugin.verdicts.Verdict values
        Column("outcome", "string", False),  # pytest's: passed | failed | skipped
        Column("phase", "string", False),  # setup | call | teardown: where the verdict was decided
        Column("started", "timestamp", False),
        Column("duration", "double", False),  # seconds in the call phase
        Column("duration_total", "double", False),  # seconds in setup + call + teardown
        Column("reply_scope", "string"),  # channel | connection: the broker's last close, if any
        Column("reply_code", "int"),
        Column("reply_text", "string"),
        Column("reply_class_id", "int"),
        Column("reply_method_id", "int"),
        Column("hypothesis_seed", "string"),
        Column("minimal_example", "string"),  # Hypothesis's shrunk example / steps
        Column("message", "string"),  # failure summary, skip reason or broken reason
        Column("frames", "int", False),
        Column("failed_rules", "array<string>"),  # a failed verdict: the rules it saw broken (older lakes: null)
        # per rule of the test: "RULE PROFILE EXPECTATION", the profile that judged it (base or extension)
        Column("judged_by", "array<string>"),
        Column("stopped_nodes", "array<int>"),  # a cluster test: the nodes it stopped, in order (1 = --broker-url)
        Column("title", "string"),  # a client-side scenario: its title (broker-side tests and older lakes: null)
        Column("clause_ids", "array<string>"),  # the rule clauses the test names (`clauses` marker; else null)
    ),
    "frames": (
        Column("run_id", "string", False),
        Column("test_id", "string", False),
        Column("connection", "int", False),
        Column("channel", "int", False),
        Column("seq", "int", False),  # order within the test
        Column("ts", "timestamp", False),
        Column("direction", "string", False),  # in | out
        Column("frame_type", "string", False),  # method | header | body | heartbeat | protocol-header | raw
        Column("class_id", "int"),
        Column("method_id", "int"),
        Column("method", "string"),  # e.g. basic.ack
        Column("delivery_tag", "bigint"),  # two's complement: a tag above 2^63 - 1 is negative (`stored_tag`)
        Column("multiple", "boolean"),
        Column("requeue", "boolean"),
        Column("redelivered", "boolean"),
        Column("consumer_tag", "string"),
        Column("reply_code", "int"),
        Column("reply_text", "string"),
        Column("body_size", "bigint"),  # content header size, body frame or outgoing body length
        # Added for the trace audit of recorded traffic (older lakes lack them: checks go off).
        Column("queue", "string"),  # queue.*, basic.consume, basic.get
        Column("prefetch_count", "int"),  # basic.qos
        Column("global_qos", "boolean"),  # basic.qos global
        Column("no_ack", "boolean"),  # basic.consume, basic.get
        Column("queue_type", "string"),  # queue.declare (not passive): x-queue-type, "" when absent
        Column("priority", "int"),  # content header: the message's priority property (RQ-01 order)
        Column("nowait", "boolean"),  # declare, bind, delete, purge, consume, cancel, confirm.select: no -ok comes
        Column("body_digest", "string"),  # body frame / outgoing body: message identity (RQ-04)
        Column("capabilities", "array<string>"),  # connection.start(-ok): capabilities set to true
        Column("product", "string"),  # connection.start(-ok): the peer's product
        Column("version", "string"),  # connection.start(-ok): the peer's version
        Column("emulates", "string"),  # connection.start: the RabbitMQ version a broker claims to follow
        # Added for the upgrade pre-flight (conformance.preflight): what a declaration asked for.
        Column("arguments", "string"),  # declare, bind, consume: the arguments table as canonical JSON
        Column("exchange_type", "string"),  # exchange.declare
        Column("flags", "array<string>"),  # queue/exchange.declare: the bits set (durable, exclusive, ...)
    ),
}

def arrow_schema(columns: Sequence[Column]) -> pa.Schema:
    import pyarrow as pa  # here: a worker that only stages its rows never imports Arrow (and numpy)

    types = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(), "double": pa.float64(),
             "boolean": pa.bool_(), "timestamp": pa.timestamp("us", tz="UTC"),
             "array<string>": pa.list_(pa.string()), "array<int>": pa.list_(pa.int32())}
    return pa.schema([pa.field(c.name, types[c.kind], nullable=c.nullable) for c in columns])


@functools.cache
def schemas() -> dict[str, pa.Schema]:
    """The pyarrow schema of each table (also `SCHEMAS`), built on first use."""
    return {table: arrow_schema(columns) for table, columns in COLUMNS.items()}


if TYPE_CHECKING:
    SCHEMAS: dict[str, pa.Schema]


def __getattr__(name: str) -> Any:
    if name == "SCHEMAS":  # `from conformance.results.records import SCHEMAS` builds them then
        return schemas()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def spark_ddl(table: str) -> str:
    """The table's schema as a Spark DDL string ("run_id STRING NOT NULL, ...")."""
    return ", ".join(f"{c.name} {c.kind.upper()}{'' if c.nullable else ' NOT NULL'}" for c in COLUMNS[table])


def harness_version() -> str:
    """The installed amqp-conformance version (recorded with every run)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("amqp-conformance")
    except PackageNotFoundError:
        return "0+unknown"


def redact_url(url: str) -> str:
    """The URL without its password (user kept): amqp://guest@host:5672/."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.hostname or ""
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@dataclass
class RunRecord:
    run_id: str
    broker_url: str
    client: str
    harness_version: str
    timeout_scale: float
    started: datetime
    product: str | None = None
    version: str | None = None
    profile: str | None = None
    profile_detail: str | None = None
    admin: str | None = None
    finished: datetime | None = None
    exit_status: int | None = None
    tests: int | None = None
    client_version: str | None = None
    baseline: str | None = None
    cluster_nodes: list[str] | None = None


@dataclass
class TestRecord:
    __test__: ClassVar[bool] = False  # not a pytest test class

    run_id: str
    test_id: str
    rule_ids: list[str]
    area: str
    verdict: str
    outcome: str
    phase: str
    started: datetime
    duration: float = 0.0
    duration_total: float = 0.0
    reply_scope: str | None = None
    reply_code: int | None = None
    reply_text: str | None = None
    reply_class_id: int | None = None
    reply_method_id: int | None = None
    hypothesis_seed: str | None = None
    minimal_example: str | None = None
    message: str | None = None
    frames: int = 0
    failed_rules: list[str] | None = None
    judged_by: list[str] | None = None
    stopped_nodes: list[int] | None = None
    title: str | None = None
    clause_ids: list[str] | None = None


_METHOD_KEYS = ("delivery_tag", "multiple", "requeue", "redelivered", "consumer_tag", "reply_code", "reply_text",
                "queue", "prefetch_count", "no_ack", "nowait")
_PEER_PROPERTIES = ("server_properties", "client_properties")  # connection.start / start-ok
_DECLARES = frozenset({"queue.declare", "exchange.declare"})
_FLAGS = ("passive", "durable", "exclusive", "auto_delete", "internal")
ARGUMENTS_MAX = 2000  # characters of the `arguments` column; longer tables are cut (and marked)


TAG_WRAP = 2**64  # a delivery tag is unsigned 64-bit (0-9-1 §1.4.2.6); the bigint column is signed


def stored_tag(tag: int) -> int:
    """A delivery tag as the frames table's `delivery_tag` (bigint) holds it: in two's complement, so
    a tag above 2^63 - 1 (ACK-03's whole range) is stored as tag - 2^64, losslessly. Real brokers'
    tags stay far below 2^63, so a negative stored tag never matches a delivery in the audit."""
    return tag - TAG_WRAP if tag >= TAG_WRAP // 2 else tag


def tag_from_column(value: int) -> int:
    """The delivery tag a stored `delivery_tag` value stands for (`stored_tag`'s inverse)."""
    return value + TAG_WRAP if value < 0 else value


def body_digest(body: bytes) -> str:
    """A message identity for the audit (RQ-04): 16 hex digits of BLAKE2b over the body octets."""
    return hashlib.blake2b(body, digest_size=8).hexdigest()


def frame_fields(frame: Any) -> dict[str, Any]:
    """The key fields of one recorded frame (codec frame, outgoing Command, or raw bytes)."""
    if isinstance(frame, Command):
        row = _method_fields(frame.method)
        if frame.method.HAS_CONTENT:
            row["body_size"] = len(frame.body)
            row["body_digest"] = body_digest(frame.body)
            row["priority"] = frame.properties.priority if frame.properties is not None else None
        return row
    if isinstance(frame, MethodFrame):
        return _method_fields(frame.method)
    if isinstance(frame, HeaderFrame):
        row = {"frame_type": "header", "class_id": frame.class_id, "body_size": frame.body_size}
        if frame.properties is not None and frame.properties.priority is not None:
            row["priority"] = frame.properties.priority
        return row
    if isinstance(frame, BodyFrame):
        return {"frame_type": "body", "body_size": len(frame.payload), "body_digest": body_digest(frame.payload)}
    if isinstance(frame, HeartbeatFrame):
        return {"frame_type": "heartbeat"}
    if isinstance(frame, ProtocolHeader) or (isinstance(frame, bytes | bytearray) and bytes(frame[:4]) == b"AMQP"
                                              and len(frame) == 8):
        return {"frame_type": "protocol-header"}
    return {"frame_type": "raw", "body_size": len(frame) if isinstance(frame, bytes | bytearray) else None}


def _method_fields(method: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"frame_type": "method", "class_id": method.CLASS_ID, "method_id": method.METHOD_ID,
                           "method": method.NAME}
    for key in _METHOD_KEYS:
        value = getattr(method, key, None)
        if value is not None:
            row[key] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if "delivery_tag" in row:
        row["delivery_tag"] = stored_tag(row["delivery_tag"])
    if method.NAME == "basic.qos":
        row["global_qos"] = method.global_
    elif method.NAME == "queue.declare" and not method.passive:
        kind = (method.arguments or {}).get("x-queue-type")
        row["queue_type"] = kind.decode("utf-8", "replace") if isinstance(kind, bytes) else str(kind or "")
    if isinstance(arguments := getattr(method, "arguments", None), Mapping):
        row["arguments"] = arguments_text(arguments)
    if method.NAME in _DECLARES:
        row["flags"] = [bit for bit in _FLAGS if getattr(method, bit, False)]
        if method.NAME == "exchange.declare":
            row["exchange_type"] = method.exchange_type
    for name in _PEER_PROPERTIES:
        if isinstance(properties := getattr(method, name, None), dict):
            row.update(_peer_fields(properties))
    return row


def arguments_text(arguments: Mapping[str, Any]) -> str:
    """An arguments table as canonical JSON (sorted names; bytes as text, nested tables kept)."""
    def plain(value: Any) -> Any:
        if isinstance(value, bytes | bytearray):
            return bytes(value).decode("utf-8", "replace")
        if isinstance(value, Mapping):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        if isinstance(value, int | float | str | bool) or value is None:
            return value
        return str(value)

    text = json.dumps(plain(arguments), sort_keys=True, separators=(",", ":"))
    return text if len(text) <= ARGUMENTS_MAX else text[: ARGUMENTS_MAX - 1] + "…"


def _peer_fields(properties: dict[str, Any]) -> dict[str, Any]:
    """product, version and the capabilities set to true of a server-/client-properties table."""
    def text(value: Any) -> str | None:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else None if value is None else str(value)

    capabilities = properties.get("capabilities")
    names = sorted(k for k, v in capabilities.items() if v is True) if isinstance(capabilities, dict) else []
    return {"product": text(properties.get("product")), "version": text(properties.get("version")),
            "emulates": text(properties.get("emulates")), "capabilities": names}


def frame_rows(run_id: str, test_id: str, frames: Iterable[FrameRecord], wall_offset: float) -> Iterator[dict[str, Any]]:
    """Frame records for a test; `wall_offset` maps the monotonic clock to epoch seconds."""
    for seq, record in enumerate(frames):
        row = {"run_id": run_id, "test_id": test_id, "connection": record.connection, "channel": record.channel,
               "seq": seq, "ts": datetime.fromtimestamp(record.ts + wall_offset, UTC),
               "direction": record.direction}
        row.update(frame_fields(record.frame))
        yield row


def json_line(row: Mapping[str, Any]) -> bytes:
    """One row as a JSON line: nulls left out, timestamps as ISO 8601 (what
    `parts.table_from_json_lines` reads back under the table's schema)."""
    return json.dumps({k: v for k, v in row.items() if v is not None}, default=_json_value).encode() + b"\n"


def _json_value(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not a results value: {value!r}")

"""Spark schemas of the results lake, derived from `conformance.results.records` (one source of truth).

Responsibility: turn the declared results columns (`conformance.results.records.COLUMNS`) into Spark
`StructType`s, and declare the pipeline's own output (trace-audit violations) once as a
pyarrow schema whose Spark DDL is derived from it.

Rules:
- No results column is declared here: every results StructType comes from `COLUMNS`; a new
  field goes into `conformance/results/records.py` and shows up here unchanged.
- Read schemas carry the hive partition column `run` (`PARTITION_KEY`, a string) after the
  data columns, as `conformance.results.records.read_table` does.
- Only pyspark's *type* classes are imported: no JVM is needed to build a schema.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T

from conformance.results.records import COLUMNS, PARTITION_KEY, TABLES

_SPARK_TYPES: dict[str, T.DataType] = {
    "string": T.StringType(),
    "int": T.IntegerType(),
    "bigint": T.LongType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
    "timestamp": T.TimestampType(),
    "array<string>": T.ArrayType(T.StringType(), containsNull=True),
    "array<int>": T.ArrayType(T.IntegerType(), containsNull=True),
}


def struct_type(table: str, *, with_partition: bool = True) -> T.StructType:
    """The Spark schema of one results table (`runs`, `tests`, `frames`)."""
    if table not in TABLES:
        raise ValueError(f"unknown results table {table!r} (one of: {', '.join(TABLES)})")
    fields = [T.StructField(c.name, _SPARK_TYPES[c.kind], nullable=c.nullable) for c in COLUMNS[table]]
    if with_partition:
        fields.append(T.StructField(PARTITION_KEY, T.StringType(), nullable=False))
    return T.StructType(fields)


def column_names(table: str) -> tuple[str, ...]:
    return tuple(c.name for c in COLUMNS[table])


# The trace audit's output: one row per violation found in the recorded frames.
VIOLATIONS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("test_id", pa.string(), nullable=False),
    pa.field("connection", pa.int32(), nullable=False),
    pa.field("channel", pa.int32(), nullable=False),
    pa.field("seq", pa.int32(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("rule_id", pa.string(), nullable=False),
    pa.field("severity", pa.string(), nullable=False),  # error | warning
    pa.field("detail", pa.string(), nullable=False),
])

_DDL_NAMES = {pa.string(): "STRING", pa.int32(): "INT", pa.int64(): "BIGINT", pa.bool_(): "BOOLEAN"}


def arrow_ddl(schema: pa.Schema) -> str:
    """A flat pyarrow schema as a Spark DDL string (for mapInArrow/applyInArrow)."""
    return ", ".join(f"{f.name} {_DDL_NAMES[f.type]}" for f in schema)


VIOLATIONS_DDL = arrow_ddl(VIOLATIONS)

"""Spark sessions and the results lake as DataFrames.

Responsibility: start (or reuse) the SparkSession the pipeline runs on, and read the three
results tables with their explicit schemas (`reports.schema`).

Rules:
- Default master `local[*]`; `master="spark://..."`/`yarn`/... runs the same jobs on a
  cluster; with no master given, `SPARK_REMOTE` (Spark Connect, `sc://host:15002`) wins.
- Every session: timestamps are UTC, Arrow is on; a small lake (`lake_size`) gets one shuffle
  partition and latency tuning. Classic sessions: PYSPARK_PYTHON is the running interpreter
  (the Python workers must import `reports`), the UI and console progress are off, the JVM
  logs errors only (`log4j2.properties`) and its incubator-module warning is filtered out
  (`reports.jvm`, which also gives it a class-data-sharing archive);
  local ones also bind 127.0.0.1 (SPARK_LOCAL_IP).
- A cluster cannot read the driver's local files: the results directory must be on storage
  every executor sees (HDFS, S3 via `s3a://`, NFS mounted at the same path). On a non-local
  master or Spark Connect the `reports`, `conformance` and `codec` packages are shipped to the
  executors (`ship_packages`).
- Reading a table that has no runs yet gives an empty DataFrame with the schema, not an error.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from reports import jvm
from reports.schema import struct_type

DEFAULT_MASTER = "local[*]"
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")  # errors only, instead of Spark's chatty default
SMALL_LAKE_BYTES = 256 * 2**20  # below this much Parquet, a lake is "small": tuned for latency, not throughput
_PACKAGES = ("reports", "conformance", "codec")
_shipped: set[int] = set()  # sessions (by id) that already have the packages


def spark_session(master: str | None = None, *, app_name: str = "amqp-conformance report",
                  shuffle_partitions: int | None = None, conf: dict[str, str] | None = None,
                  lake_size: int | None = None, record_classes: bool = False) -> SparkSession:
    """A SparkSession for the pipeline (created, or the active one reconfigured where possible).

    `lake_size` (bytes of Parquet, see `lake_bytes`): below SMALL_LAKE_BYTES the session is
    tuned for a small lake — one shuffle partition, no adaptive re-planning, interpreted
    expressions instead of generated code, and a driver JVM that only uses its quick JIT tier:
    on a report of one run, compiling costs more than it saves. A classic session's driver JVM
    starts from the class-data-sharing archive when there is one (`reports.jvm`); with
    `record_classes` it lists the classes it loads, for `reports.jvm.finish` to make the archive.
    """
    remote = os.environ.get("SPARK_REMOTE")
    small = lake_size is not None and lake_size < SMALL_LAKE_BYTES
    sql = sql_settings(master or ("" if remote else DEFAULT_MASTER), shuffle_partitions, small)
    if master is None and remote:
        builder = SparkSession.builder.remote(remote).appName(app_name)
        for key, value in {**sql, **(conf or {})}.items():
            builder = builder.config(key, value)
        session: SparkSession = builder.getOrCreate()
        ship_packages(session)
        return session
    master = master or DEFAULT_MASTER
    local = master.startswith("local")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java = [jvm.log_config_option(LOG_CONFIG)]
    if small:
        java.append("-XX:TieredStopAtLevel=1")
    java += jvm.java_options(record=record_classes)
    settings = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1" if local else "",
        "spark.driver.extraJavaOptions": " ".join(java),
        # Listing a lake of many run partitions as a Spark job costs seconds on a local master.
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000" if local else "",
        **sql,
        **(conf or {}),
    }
    settings = {key: value for key, value in settings.items() if value}
    jvm.launch_quiet_gateway(settings)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if not local:
        ship_packages(session)
    return session


def local_master(master: str | None) -> bool:
    """True when the session `spark_session(master)` makes runs in this process (not a cluster or Connect)."""
    if master is None:
        return not os.environ.get("SPARK_REMOTE")
    return master.startswith("local")


def sql_settings(master: str, shuffle_partitions: int | None, small: bool) -> dict[str, str]:
    """Session SQL settings (valid on Spark Connect too): UTC, Arrow, shuffle partitions, small-lake tuning."""
    partitions = shuffle_partitions or (1 if small else _default_shuffle_partitions(master))
    settings = {"spark.sql.session.timeZone": "UTC", "spark.sql.execution.arrow.pyspark.enabled": "true"}
    if partitions:
        settings["spark.sql.shuffle.partitions"] = str(partitions)
    if small:
        settings.update({"spark.sql.adaptive.enabled": "false", "spark.sql.codegen.wholeStage": "false",
                         "spark.sql.codegen.factoryMode": "NO_CODEGEN"})
    return settings


def _default_shuffle_partitions(master: str) -> int | None:
    """2 per local core; elsewhere the cluster's own setting (None)."""
    if not master.startswith("local"):
        return None
    inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    cores = (os.cpu_count() or 1) if inside in ("*", "") else int(inside.split(",")[0])
    return max(2, 2 * cores)


def lake_bytes(root: str | Path) -> int | None:
    """Bytes of Parquet under a local results directory; None for a URI (remote storage is not sized)."""
    if "://" in str(root):
        return None
    return sum(p.stat().st_size for p in Path(root).glob("*/*=*/*.parquet"))


def ship_packages(session: SparkSession) -> None:
    """Send the pipeline's Python packages to the executors of a cluster or a Spark Connect server.

    Zips of `reports`, `conformance` and `codec`: `addPyFile` on a classic session,
    `addArtifacts(pyfile=True)` on Spark Connect (the server's Python workers import them from
    the session's artifacts). Once per session.
    """
    if id(session) in _shipped:
        return
    root = Path(__file__).resolve().parent.parent
    staging = Path(tempfile.mkdtemp(prefix="amqpc-pyfiles-"))
    archives = [shutil.make_archive(str(staging / package), "zip", root, package) for package in _PACKAGES]
    if is_remote_session(session):
        session.addArtifacts(*archives, pyfile=True)
    else:
        for archive in archives:
            session.sparkContext.addPyFile(archive)
    _shipped.add(id(session))


def is_remote_session(session: SparkSession) -> bool:
    """True for a Spark Connect session (no JVM, no SparkContext on this side)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def read_results(spark: SparkSession, root: str | Path, table: str) -> DataFrame:
    """One results table of a results directory (local path or a URI every executor can read)."""
    schema = struct_type(table)
    location = _location(root, table)
    if not _exists(spark, location):
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).option("basePath", location).parquet(location)


def _location(root: str | Path, table: str) -> str:
    text = str(root)
    if "://" in text:
        return f"{text.rstrip('/')}/{table}"
    return str(Path(text).resolve() / table)


def _exists(spark: SparkSession, location: str) -> bool:
    if "://" not in location:
        return Path(location).is_dir() and any(Path(location).glob("*=*/*.parquet"))
    try:
        jvm: Any = spark.sparkContext._jvm  # Hadoop's FileSystem sees every scheme the cluster does
        path = jvm.org.apache.hadoop.fs.Path(location)
        fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[union-attr]
    except Exception:  # Spark Connect: no JVM here; let the read say whether the table is there
        return True
    return bool(fs.exists(path))

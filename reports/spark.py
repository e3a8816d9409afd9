"""Spark sessions and the results lake as DataFrames.

Responsibility: start (or reuse) the SparkSession the pipeline runs on, and read the three
results tables with their explicit schemas (`reports.schema`).

Rules:
- Default master `local[*]`; `master="spark://..."`/`yarn`/... runs the same jobs on a
  cluster; with no master given, `SPARK_REMOTE` (Spark Connect, `sc://host:15002`) wins.
- Local sessions: PYSPARK_PYTHON is the running interpreter (the Python workers must import
  `reports`), SPARK_LOCAL_IP is 127.0.0.1, the UI is off, timestamps are UTC, Arrow is on.
- A cluster cannot read the driver's local files: the results directory must be on storage
  every executor sees (HDFS, S3 via `s3a://`, NFS mounted at the same path). On a non-local
  master the `reports` and `conformance` packages are shipped to the executors with
  addPyFile.
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

from reports.schema import struct_type

DEFAULT_MASTER = "local[*]"
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")  # errors only, instead of Spark's chatty default
_PACKAGES = ("reports", "conformance", "codec")


def spark_session(master: str | None = None, *, app_name: str = "amqp-conformance report",
                  shuffle_partitions: int | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession for the pipeline (created, or the active one reconfigured where possible)."""
    remote = os.environ.get("SPARK_REMOTE")
    if master is None and remote:
        return SparkSession.builder.remote(remote).appName(app_name).getOrCreate()  # type: ignore[no-any-return]
    master = master or DEFAULT_MASTER
    local = master.startswith("local")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.shuffle.partitions": str(shuffle_partitions or _default_shuffle_partitions(master)),
        "spark.driver.host": "127.0.0.1" if local else "",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}" if local else "",
        # Listing a lake of many run partitions as a Spark job costs seconds on a local master.
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000" if local else "",
        **(conf or {}),
    }
    for key, value in settings.items():
        if value:
            builder = builder.config(key, value)
    session: SparkSession = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if not local:
        ship_packages(session)
    return session


def _default_shuffle_partitions(master: str) -> int:
    """Small results need few partitions: 2 per local core, Spark's default (200) elsewhere."""
    if not master.startswith("local"):
        return 200
    inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    cores = (os.cpu_count() or 1) if inside in ("*", "") else int(inside.split(",")[0])
    return max(2, 2 * cores)


def ship_packages(session: SparkSession) -> None:
    """Send the pipeline's Python packages to the executors of a cluster (zip + addPyFile)."""
    root = Path(__file__).resolve().parent.parent
    staging = Path(tempfile.mkdtemp(prefix="amqpc-pyfiles-"))
    for package in _PACKAGES:
        archive = shutil.make_archive(str(staging / package), "zip", root, package)
        session.sparkContext.addPyFile(archive)


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

"""Fixtures for the report pipeline's tests.

`spark`: the ONE Spark session of the test run (session scope, local[2], shuffle partitions 1,
UI off); tests using it are marked `spark`. It skips (fails under AMQPC_STRICT=1) when Java
is missing. `lake`: a small synthetic results lake (`reports.synthetic`) with known audit
findings; `site`: the report built from it by the real pipeline (shared by the Spark and
browser tests).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance.catalogue.rules import all_rules
from reports.synthetic import LakeShape, LakeStats, write_lake
from tests.conftest import require

# a test per rule of the catalogue in every run (the matrix has a row per rule)
SMALL_LAKE = LakeShape(runs=8, channels_per_run=24, frames_per_channel=42, tests_per_run=len(all_rules()),
                       violation_rate=0.25, seed=11)


@dataclass
class Lake:
    root: Path
    stats: LakeStats


@pytest.fixture(scope="session")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    root = tmp_path_factory.mktemp("lake")
    return Lake(root, write_lake(root, SMALL_LAKE))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    require(shutil.which("java"), "Java (>= 17) for the local Spark session")
    from reports.spark import spark_session

    session = spark_session("local[2]", app_name="amqp-conformance tests", shuffle_partitions=1,
                            conf={"spark.sql.adaptive.enabled": "false", "spark.driver.memory": "1g"})
    yield session
    session.stop()


@dataclass
class Site:
    root: Path
    data: Any  # reports.model.ReportData


@pytest.fixture(scope="session")
def site(spark: Any, lake: Lake, tmp_path_factory: pytest.TempPathFactory) -> Site:
    from reports.build import build_report

    out = tmp_path_factory.mktemp("site")
    return Site(out, build_report(spark, lake.root, out))

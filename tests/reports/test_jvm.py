"""reports.jvm: which class-data-sharing options a driver JVM gets (no JVM started here), and a log
config option Spark's launcher accepts from any path (its launcher runs, no daemon)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pyspark
import pytest

from reports import jvm
from reports.spark import LOG_CONFIG
from tests.conftest import require


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    require(shutil.which("java"), "Java (>= 17)")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(jvm.CDS_ENV, raising=False)
    return tmp_path / "amqp-conformance"


def test_without_an_archive_a_recording_session_lists_its_classes(cache: Path) -> None:
    assert jvm.java_options() == []  # not recording: nothing
    options = jvm.java_options(record=True)
    assert len(options) == 1 and options[0].startswith(f"-XX:DumpLoadedClassList={cache}/spark-")


def test_an_archive_is_used_quietly_and_a_dump_under_way_is_not_repeated(cache: Path) -> None:
    archive = jvm.archive_path()
    assert archive is not None and archive.parent == cache
    cache.mkdir(parents=True)
    (cache / f"{archive.stem}.123.partial").touch()  # another process is dumping
    assert jvm.java_options(record=True) == []
    archive.touch()
    assert jvm.java_options(record=True) == [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", "-Xlog:cds=off",
                                             "-Xlog:cds+dynamic=off"]


def test_off_by_environment(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jvm.CDS_ENV, "0")
    assert jvm.archive_path() is None and jvm.java_options(record=True) == []


def _spark_launcher(daemon_options: str) -> subprocess.CompletedProcess[str]:
    """Spark's own launcher (`org.apache.spark.launcher.Main`, what `bin/spark-class` runs first)
    building a standalone master's command: it checks the options and prints the command, no JVM
    daemon starts."""
    home = Path(pyspark.__file__).resolve().parent
    core = next((home / "jars").glob("spark-core_*.jar"))
    scala = core.name.removeprefix("spark-core_").split("-")[0]
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_SCALA_VERSION=scala, SPARK_DAEMON_JAVA_OPTS=daemon_options)
    return subprocess.run(["java", "-Xmx128m", "-cp", str(home / "jars" / "*"), "org.apache.spark.launcher.Main",
                           "org.apache.spark.deploy.master.Master"], env=env, capture_output=True, text=True, timeout=60)


def test_the_log_config_option_passes_sparks_launcher_from_a_path_containing_xmx(tmp_path: Path) -> None:
    """A CI clone in mktemp's /tmp/tmp.BiBXmxZ61l could not start a Spark master: the launcher
    refuses daemon options with "Xmx" anywhere in them, the log config's path included."""
    require(shutil.which("java"), "Java (>= 17)")
    config = tmp_path / "aXmxb" / "log4j2.properties"
    config.parent.mkdir()
    shutil.copy(LOG_CONFIG, config)
    option = jvm.log_config_option(config)
    assert "Xmx" not in option and unquote(option) == f"-Dlog4j2.configurationFile={config.as_uri()}"
    plain = _spark_launcher(f"-Dlog4j2.configurationFile={config.as_uri()}")
    assert plain.returncode != 0 and "not allowed to specify max heap(Xmx)" in plain.stderr  # the failure seen
    built = _spark_launcher(option)
    assert built.returncode == 0, built.stderr
    assert option in built.stdout.split("\0")  # the daemon gets the option as given

"""reports.jvm: which class-data-sharing options a driver JVM gets (no JVM started here)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reports import jvm
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

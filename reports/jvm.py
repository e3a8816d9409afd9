"""The driver JVM of a local Spark session: a quiet start, and a class-data-sharing archive.

Responsibility: launch pyspark's gateway JVM ourselves (`launch_gateway`) so that
- its stderr passes through a filter that drops the lines the JVM prints whatever log4j says
  (`JVM_NOISE`: Spark 4 loads the Vector API incubator module, and the JVM announces it);
- it starts from a class-data-sharing (CDS) archive of the classes a report loads, when one
  exists: the JVM then maps ~17 000 pre-parsed, pre-verified classes instead of loading them
  from 250 jars, which halves the CPU a one-run report costs the driver.

The archive (`cache_dir()/spark-<key>.jsa`, ~200 MB) is made once per Java + pyspark install
(the key hashes the java binary and the jar directory): a session started with
`record=True` writes the list of classes it loads; `finish(session)` then stops it and starts
`python -m reports.jvm dump ...` in the background, detached and niced, which runs
`java -Xshare:dump` over that list and moves the archive into place only when it succeeded.
A stale or mismatched archive is ignored by the JVM (`-Xshare:auto`, its messages off).
`AMQPC_SPARK_CDS=0` turns all of it off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pyspark

CDS_ENV = "AMQPC_SPARK_CDS"
JVM_NOISE = ("WARNING: Using incubator modules:",)
_QUIET_CDS = ("-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off")
_recording: dict[str, Path] = {}  # "list" -> the class list this process's JVM is writing


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "amqp-conformance"


def _java() -> Path | None:
    """The java binary spark-class runs: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path() -> Path | None:
    """Where this Java + pyspark install's archive lives (None: CDS off, or no java)."""
    java = _java()
    if os.environ.get(CDS_ENV) == "0" or java is None:
        return None
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    digest = hashlib.sha256()
    for path in (java, *sorted(jars.glob("*.jar"))):
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return cache_dir() / f"spark-{digest.hexdigest()[:16]}.jsa"


def log_config_option(path: Path) -> str:
    """The JVM option that points log4j at `path`, safe for Spark's launcher.

    Spark's launcher refuses driver and daemon java options that contain "Xmx" anywhere
    (SparkSubmitCommandBuilder, SparkClassCommandBuilder: "not allowed to specify max
    heap(Xmx) memory settings"), a path included: a clone in mktemp's /tmp/tmp.BiBXmxZ61l
    failed to start a master so. The file URI therefore spells every "X" as %58, which log4j
    decodes (RFC 3986 percent-encoding of an unreserved character: the same URI)."""
    return "-Dlog4j2.configurationFile=" + path.resolve().as_uri().replace("X", "%58")


def java_options(*, record: bool = False) -> list[str]:
    """Driver JVM options: use the archive if it is there; else, with `record`, list the classes loaded."""
    archive = archive_path()
    if archive is None:
        return []
    if archive.is_file():
        return [f"-XX:SharedArchiveFile={archive}", *_QUIET_CDS]
    if not record or _dump_in_progress(archive):
        return []
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
    except OSError:  # no writable cache: no archive, nothing else changes
        return []
    classes = archive.with_name(f"{archive.stem}.{os.getpid()}.classlist")
    _recording["list"] = classes
    return [f"-XX:DumpLoadedClassList={classes}"]


def _dump_in_progress(archive: Path, fresh: float = 1800.0) -> bool:
    try:
        return any(time.time() - p.stat().st_mtime < fresh for p in archive.parent.glob(f"{archive.stem}.*.partial"))
    except OSError:
        return False


def launch_quiet_gateway(settings: dict[str, str]) -> None:
    """Start the driver JVM with its stderr filtered (JVM_NOISE dropped, the rest passed on).

    Only when no JVM runs yet; pyspark then reuses this gateway for the session.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False)
    conf.setAll(list(settings.items()))
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})  # type: ignore[no-untyped-call]
    SparkContext._gateway = gateway
    SparkContext._jvm = gateway.jvm
    stream = gateway.proc.stderr if gateway.proc is not None else None
    if stream is not None:
        threading.Thread(target=_pass_on, args=(stream,), name="spark-jvm-stderr", daemon=True).start()


def _pass_on(stream: IO[bytes]) -> None:
    noise = tuple(n.encode() for n in JVM_NOISE)
    for line in iter(stream.readline, b""):
        if not line.startswith(noise):
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()


def finish(session: Any, timeout: float = 60.0) -> None:
    """Stop the session; if its JVM recorded a class list, let the JVM exit and dump the archive in the background."""
    from pyspark import SparkContext

    classes = _recording.pop("list", None)
    if classes is None:
        session.stop()
        return
    jvm = session.sparkContext._jvm
    classpath = str(jvm.java.lang.System.getProperty("java.class.path"))
    modules = [a for a in jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
               if str(a).startswith("--add-modules")]
    session.stop()
    gateway = SparkContext._gateway
    process = gateway.proc if gateway is not None else None
    if gateway is not None:
        gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
    if process is None or process.stdin is None:
        return
    process.stdin.close()  # the gateway JVM exits when its stdin closes; the class list is complete then
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return
    archive = archive_path()
    if archive is None or process.returncode != 0 or not classes.is_file() or _dump_in_progress(archive):
        classes.unlink(missing_ok=True)
        return
    subprocess.Popen([sys.executable, "-m", "reports.jvm", "dump", str(classes), str(archive), classpath,
                      *map(str, modules)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)


def dump(classes: Path, archive: Path, classpath: str, modules: list[str]) -> int:
    """`java -Xshare:dump` over the class list into a partial file, moved to `archive` on success."""
    os.nice(10)
    java = _java()
    partial = archive.with_name(f"{archive.stem}.{os.getpid()}.partial")
    partial.touch()  # marks the dump as under way (`_dump_in_progress`) until java writes the archive here
    try:
        if java is None:
            return 1
        done = subprocess.run([str(java), "-Xshare:dump", f"-XX:SharedClassListFile={classes}",
                               f"-XX:SharedArchiveFile={partial}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off",
                               *modules, "-cp", classpath], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=3600, check=False)
        if done.returncode == 0 and partial.is_file():
            os.replace(partial, archive)
        return done.returncode
    finally:
        partial.unlink(missing_ok=True)
        classes.unlink(missing_ok=True)


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "dump":
        raise SystemExit(dump(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5:]))
    raise SystemExit("usage: python -m reports.jvm dump CLASSLIST ARCHIVE CLASSPATH [--add-modules=...]")

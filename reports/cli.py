"""`amqp-conformance report RESULTS_DIR --out DIR [--spark-master URL]`: the report command.

Responsibility: parse the arguments, start Spark, build the report (`reports.build`), print
where it is. `report_main(argv) -> int` is what the `amqp-conformance` console script calls.

Exit codes (docs/design.md decision 8): 0 report written; 2 Spark or the environment failed;
4 usage error (bad arguments, no results under RESULTS_DIR), reported as one line on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from conformance.results.records import PARTITION_KEY
from conformance.results.verdicts import EXIT_HARNESS, EXIT_OK, EXIT_USAGE
from conformance.results.wording import plural

if TYPE_CHECKING:
    from reports.model import ReportData

PROG = "amqp-conformance report"


class UsageError(Exception):
    """Bad arguments: one line for stderr, exit status 4."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Build the HTML conformance report from a results directory: the "
                                       "Parquet that `amqp-conformance run --out DIR` writes to DIR/results (or "
                                       "the pytest plugin to its --results-dir).")
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="results directory (runs/, tests/, frames/)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write the static site into")
    p.add_argument("--spark-master", metavar="URL", default=None,
                   help="Spark master (default local[*]; SPARK_REMOTE selects Spark Connect). A cluster must "
                        "read RESULTS_DIR from shared storage (hdfs://, s3a://, or the same NFS path)")
    p.add_argument("--max-failure-pages", type=int, default=5000, metavar="N",
                   help="at most N failing-test pages (default 5000)")
    p.add_argument("--audit-plan", choices=("auto", "by-run", "grouped", "driver"), default="auto",
                   help="trace audit plan: per run partition without shuffle on the executors (by-run), grouped "
                        "per channel (grouped), or in this process (driver); auto (default): driver for a small "
                        "lake on a local master, by-run otherwise")
    return p


def _check_results_dir(text: str) -> None:
    if "://" in text:
        return  # remote storage: Spark will say if it is not there
    root = Path(text)
    if not root.is_dir():
        raise UsageError(f"RESULTS_DIR {text}: not a directory")
    if not any((root / "runs").glob(f"{PARTITION_KEY}=*/*.parquet")):
        raise UsageError(f"RESULTS_DIR {text}: no runs found (expected runs/{PARTITION_KEY}=<id>/*.parquet)")


def audit_plan(requested: str, master: str | None, size: int | None) -> str:
    """`auto`: the audit in this process for a small local lake on a local master (no Python worker
    to start: seconds on a one-run report), on the executors otherwise."""
    from reports.spark import SMALL_LAKE_BYTES, local_master

    if requested != "auto":
        return requested
    small = size is not None and size < SMALL_LAKE_BYTES
    return "driver" if small and local_master(master) else "by-run"


def report_main(argv: Sequence[str] | None = None) -> int:
    """Run the report command; return its exit status."""
    try:
        args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        _check_results_dir(args.results_dir)
        if args.max_failure_pages < 0:
            raise UsageError("--max-failure-pages must be >= 0")
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    started = time.perf_counter()
    try:
        from reports.build import build_report
        from reports.jvm import finish
        from reports.spark import is_remote_session, lake_bytes, spark_session

        size = lake_bytes(args.results_dir)
        spark = spark_session(args.spark_master, lake_size=size, record_classes=True)
        data = build_report(spark, args.results_dir, args.out, max_failure_pages=args.max_failure_pages,
                            audit_plan=audit_plan(args.audit_plan, args.spark_master, size))
        elapsed = time.perf_counter() - started
        if not is_remote_session(spark):
            finish(spark)  # the first report of an install also makes the JVM's class-data-sharing archive
    except Exception as exc:  # Spark, Java or storage trouble: the environment, not the user
        print(f"{PROG}: error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
              file=sys.stderr)
        return EXIT_HARNESS  # Spark or Java missing, unreadable results (docs/design.md decision 8)
    index = Path(args.out) / "index.html"
    print(summary_line(index, data, elapsed, where_spark_ran(args.spark_master)))
    return EXIT_OK


def summary_line(index: Path, data: ReportData, elapsed: float, where: str) -> str:
    """The console's last line: what the report holds. Traffic the audit could not judge is
    counted apart: it is never a finding."""
    unjudged = sum(v.severity == "unjudged" for v in data.violations)
    return (f"report: {index} ({plural(data.runs, 'run')}, {plural(len(data.targets), 'target')}, "
            f"{plural(len(data.failing), 'failing test')}, {plural(len(data.violations) - unjudged, 'audit finding')}"
            f"{f', {unjudged} not judged' if unjudged else ''}; {elapsed:.1f} s on {where})")


def where_spark_ran(master: str | None) -> str:
    """The master the report ran on, as the session factory chose it."""
    from reports.spark import DEFAULT_MASTER

    if master is None and os.environ.get("SPARK_REMOTE"):
        return f"Spark Connect {os.environ['SPARK_REMOTE']}"
    return master or DEFAULT_MASTER


if __name__ == "__main__":
    raise SystemExit(report_main())

"""`amqp-conformance preflight RESULTS --to PROFILE [--from PROFILE] [--replay URL] --out DIR`.

Responsibility: the subcommand. Check the arguments, run the Spark job (`reports.preflight_spark`),
judge the shapes (`conformance.preflight.judging`), replay them live when asked
(`conformance.preflight.replay`), attach each example's frame window, write DIR/preflight.json and
DIR/preflight.html (`reports.preflight_page`) and print one summary line.

Exit codes (docs/design.md decision 8): 0 no `breaks` finding; 1 the workload breaks on the target;
2 Spark or the environment failed; 4 usage error (one line on stderr): a bad path, a lake without
frames, an unknown profile, a bad --replay URL, no --from when the recording does not say.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from conformance.catalogue.rules import PROFILES, rule
from conformance.results.records import PARTITION_KEY
from conformance.results.verdicts import EXIT_FAILED, EXIT_HARNESS, EXIT_OK, EXIT_USAGE

PROG = "amqp-conformance preflight"


class UsageError(Exception):
    """Bad arguments: one line for stderr, exit status 4."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Will this recorded workload behave the same on another RabbitMQ version? "
                                       "Findings: breaks, differs, deprecated.")
    p.add_argument("results", metavar="RESULTS", help="a results lake of recorded traffic (amqp-conformance record)")
    p.add_argument("--to", required=True, metavar="PROFILE", help=f"the target profile ({', '.join(PROFILES)})")
    p.add_argument("--from", dest="source", metavar="PROFILE", help="the source profile (default: the recorded broker's)")
    p.add_argument("--replay", metavar="URL", help="check the shapes live against this broker (amqp://...)")
    p.add_argument("--out", required=True, metavar="DIR", help="where preflight.json and preflight.html go")
    p.add_argument("--spark-master", metavar="URL", default=None, help="Spark master (default local[*])")
    p.add_argument("--replay-timeout", type=float, default=5.0, metavar="S", help="bound of each replayed request")
    p.add_argument("--replay-budget", type=float, default=120.0, metavar="S", help="bound of the whole replay")
    return p


def check(args: argparse.Namespace) -> None:
    root = Path(args.results)
    if "://" not in args.results:
        if not root.is_dir():
            raise UsageError(f"RESULTS {args.results}: not a directory")
        if not any((root / "frames").glob(f"{PARTITION_KEY}=*/*.parquet")):
            raise UsageError(f"RESULTS {args.results}: no recorded frames (expected frames/{PARTITION_KEY}=<id>/*.parquet)")
    for option, value in (("--to", args.to), ("--from", args.source)):
        if value is not None and value not in PROFILES:
            raise UsageError(f"{option} {value!r}: unknown profile (one of: {', '.join(PROFILES)})")
    if args.replay is not None and not args.replay.startswith(("amqp://", "amqps://")):
        raise UsageError(f"--replay {args.replay!r}: expected amqp://USER:PASS@HOST:PORT/VHOST")
    if args.replay_timeout <= 0 or args.replay_budget <= 0:
        raise UsageError("--replay-timeout and --replay-budget must be > 0")


def preflight_main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        check(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    try:
        doc = run(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # Spark, Java or storage trouble: the environment, not the user
        print(f"{PROG}: error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr)
        return EXIT_HARNESS
    kinds = [f["kind"] for f in doc["findings"]]
    print(f"preflight {doc['source']} -> {doc['target']}: {len(kinds)} finding(s) ({kinds.count('breaks')} breaks, "
          f"{kinds.count('differs')} differs, {kinds.count('deprecated')} deprecated); "
          f"{Path(args.out) / 'preflight.html'}")
    return EXIT_FAILED if "breaks" in kinds else EXIT_OK


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole pre-flight; the preflight.json document (also written, with the page)."""
    from conformance.preflight import judging
    from conformance.preflight.replay import replay
    from reports import preflight_page, preflight_spark
    from reports.spark import lake_bytes, spark_session

    started = time.perf_counter()
    spark = spark_session(args.spark_master, app_name="amqp-conformance preflight", lake_size=lake_bytes(args.results))
    source = args.source or preflight_spark.recorded_profile(spark, args.results)
    if source is None:
        raise UsageError("the recording has no connection.start to tell the broker's version: pass --from PROFILE")
    shapes = preflight_spark.aggregate(preflight_spark.shape_rows(spark, args.results))
    findings = judging.judge(shapes["requests"], shapes["returns"], shapes["held"], source, args.to)
    extra: dict[str, Any] = {"results": str(args.results), "generated": datetime.now(UTC).isoformat(timespec="seconds"),
                             "shapes": len(shapes["requests"]), "spark_seconds": round(time.perf_counter() - started, 1)}
    if args.replay:
        replay_started = time.perf_counter()
        live, replayed = replay(args.replay, shapes["requests"], findings, rpc_timeout=args.replay_timeout,
                      budget=args.replay_budget)
        findings += live
        extra["replay"] = {"url": _redacted(args.replay), "shapes": replayed,
                           "seconds": round(time.perf_counter() - replay_started, 1)}
    windows = preflight_spark.frame_windows(spark, args.results, [f.example for f in findings])
    for finding, window in zip(findings, windows, strict=True):
        finding.frames = [preflight_page.frame_line(r) for r in window]
    doc = judging.document(source, args.to, findings, **extra)
    for f in doc["findings"]:
        f["rule_title"] = rule(f["rule"]).plain_title if f["rule"] != "-" else "seen live only"
    preflight_page.write(Path(args.out), doc)
    return doc


def _redacted(url: str) -> str:
    from conformance.results.records import redact_url

    return redact_url(url)


if __name__ == "__main__":
    raise SystemExit(preflight_main())

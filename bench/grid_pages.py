"""Grid pages benchmark: the interop grid (grid.html) of a synthetic lake of many runs, built by
the Spark pipeline on local[1] and local[2] and by a single process, measured in the same run.

What it measures (same lake, same process, the same page written):
- the lake: `reports.synthetic` writes `--runs` runs (default 1,000) of `--tests` tests each
  (default 300, the suite's size) with their frames (`--channels` x `--frames` per run), as the
  harness writes them;
- Spark, once per master (local[1], then local[2]; the JVM's start is excluded, as it is paid once
  per report): the rule verdicts of every run (`reports.jobs.rule_verdicts`), the run and area
  scores, the matrix of each target's latest run, each target's recent history and the flakes,
  collected and laid out by `reports.grid` into grid.html;
- single process: the same aggregations over the lake read with pyarrow, in plain Python, into
  the same report data and the same page (checked equal to Spark's before a time is reported).
Printed: a table, then one JSON line: `local2_x_local1` = local[1] time / local[2] time (goal
>= 1.6 on 1,000 runs), `single_x_local2` = single-process time / local[2] time.
`--quick` runs a tiny lake (a smoke test of the script).
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from collections import defaultdict
from datetime import UTC
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.dataset as ds

from conformance.catalogue.rules import all_rules
from conformance.results.verdicts import SCORED, UNJUDGED
from reports import jobs
from reports.build import _areas, _flake, _matrix, _rule_history, _rules, _targets, read_lake
from reports.grid import grid_data
from reports.model import HISTORY_RUNS, ReportData
from reports.render import environment
from reports.synthetic import LakeShape, write_lake

GOAL = 1.6


def spark_report_data(spark: Any, root: Path) -> ReportData:
    """What grid.html needs, computed by the Spark jobs the report runs."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    lake = read_lake(spark, root)
    verdicts = jobs.rule_verdicts(lake.tests, lake.runs, jobs.catalogue_frame(spark)).cache()
    try:
        runs = [r.asDict() for r in jobs.runs_with_targets(lake.runs).collect()]
        scores = jobs.run_scores(verdicts).collect()
        areas = jobs.area_scores(verdicts).where("latest").collect()
        matrix = jobs.matrix(verdicts).collect()
        flakes = jobs.flakes(verdicts).collect()
        newest = F.max("ordinal").over(Window.partitionBy("target"))
        recent = (verdicts.withColumn("newest", newest).where(F.col("ordinal") > F.col("newest") - HISTORY_RUNS)
                  .select("rule_id", "area", "target", "ordinal", "run_id", "verdict").collect())
    finally:
        verdicts.unpersist()
    return _data(runs, scores, areas, matrix, flakes, recent)


def _data(runs: list[dict[str, Any]], scores: list[Any], areas: list[Any], matrix: list[Any], flakes: list[Any],
          recent: list[Any]) -> ReportData:
    targets = _targets(runs, scores, areas)
    return ReportData(generated=max(r["started"] for r in runs), results_dir="", runs=len(runs), tests=0, areas=_areas(recent),
                      targets=targets, rules=_rules(recent), matrix=_matrix(matrix, []), trend=[], changes=[],
                      regressions=[], flakes=[_flake(f) for f in flakes], violations=[], failing=[],
                      rule_history=_rule_history(recent))


def _rank(verdict: str) -> int:
    order = jobs.VERDICT_ORDER
    return order.index(verdict) if verdict in order else len(order)


def single_report_data(root: Path) -> ReportData:
    """The same data in one process: pyarrow reads, plain Python aggregates."""
    run_rows = ds.dataset(root / "runs", format="parquet", partitioning="hive").to_table().to_pylist()
    for r in run_rows:
        nodes = len(r.get("cluster_nodes") or ())  # every node of a cluster run, its first included
        cluster = f"(cluster of {nodes})" if nodes else None
        product = " ".join(p for p in (r["product"] or "unknown", r["version"], cluster) if p)
        r["target"] = " · ".join(p for p in (product, r["profile"] or "?", r["client"]) if p is not None)
    by_target: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in run_rows:
        by_target[r["target"]].append(r)
    for rows in by_target.values():
        rows.sort(key=lambda r: (r["started"], r["run_id"]))
        for ordinal, r in enumerate(rows, 1):
            r["ordinal"], r["latest"] = ordinal, ordinal == len(rows)
    run_of = {r["run_id"]: r for r in run_rows}
    catalogue = {r.id: (r.area, r.title, i) for i, r in enumerate(all_rules())}
    cells: dict[tuple[str, str], list[Any]] = {}  # (run, rule) -> [rank, tests, failing, test area]
    columns = ["run_id", "rule_ids", "failed_rules", "verdict", "area"]
    for batch in ds.dataset(root / "tests", format="parquet", partitioning="hive").to_batches(columns=columns):
        for t in batch.to_pylist():
            named = t["failed_rules"] or []
            for rule_id in dict.fromkeys([*t["rule_ids"], *named]):
                verdict = t["verdict"]
                if verdict == "failed" and named and rule_id not in named:
                    verdict = UNJUDGED
                cell = cells.setdefault((t["run_id"], rule_id), [len(jobs.VERDICT_ORDER), 0, 0, t["area"]])
                cell[0] = min(cell[0], _rank(verdict))
                cell[1] += 1
                cell[2] += verdict == "failed"
    verdicts = []
    for (run_id, rule_id), (rank, tests, failing, test_area) in cells.items():
        run = run_of[run_id]
        area, title, order = catalogue.get(rule_id, (test_area, None, None))
        verdicts.append(SimpleNamespace(
            run_id=run_id, rule_id=rule_id, target=run["target"], started=run["started"], ordinal=run["ordinal"],
            latest=run["latest"], area=area or test_area, title=title, rule_order=order, tests=tests,
            failing_tests=failing, verdict=jobs.VERDICT_ORDER[rank] if rank < len(jobs.VERDICT_ORDER) else "unknown"))
    scores = _scores(verdicts, ("run_id",))
    areas = [s for s in _scores(verdicts, ("run_id", "area")) if run_of[s.run_id]["latest"]]
    newest = {t: len(rows) for t, rows in by_target.items()}
    recent = [v for v in verdicts if v.ordinal > newest[v.target] - HISTORY_RUNS]
    return _data(run_rows, scores, areas, [v for v in verdicts if v.latest], _flakes(verdicts), recent)


def _scores(verdicts: list[Any], keys: tuple[str, ...]) -> list[Any]:
    groups: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    for v in verdicts:
        groups[tuple(getattr(v, k) for k in keys)].append(v.verdict)
    found = []
    for key, names in groups.items():
        scored = sum(n in SCORED for n in names)
        row = dict(zip(keys, key, strict=True))
        found.append(SimpleNamespace(**row, score=names.count("passed") / scored if scored else None,
                                     **{v: names.count(v) for v in jobs.VERDICT_ORDER}))
    return found


def _flakes(verdicts: list[Any], min_flips: int = 2) -> list[Any]:
    series: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for v in verdicts:
        if v.verdict in ("passed", "failed"):
            series[v.target, v.rule_id].append(v)
    found = []
    for (target, rule_id), items in series.items():
        items.sort(key=lambda v: (v.started, v.run_id))
        letters = "".join("P" if v.verdict == "passed" else "F" for v in items)
        flips = sum(a != b for a, b in itertools.pairwise(letters))
        if flips >= min_flips:
            found.append(SimpleNamespace(target=target, rule_id=rule_id, area=items[0].area, runs=len(items),
                                         flips=flips, failures=letters.count("F"), sequence=letters,
                                         last=items[-1].verdict, flip_rate=flips / max(1, len(items) - 1)))
    return found


def grid_page(data: ReportData) -> str:
    grid = grid_data(data)
    assert grid is not None, "the lake has no broker target"
    data.generated = data.generated.astimezone(UTC)
    return environment().get_template("grid.html.j2").render(data=data, g=grid, root="", has_grid=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--tests", type=int, default=300)
    parser.add_argument("--channels", type=int, default=4)
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--cache", type=Path, default=Path("build/bench-lakes"))
    parser.add_argument("--quick", action="store_true", help="a tiny lake: a smoke test of the script")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.tests, args.channels, args.frames = 12, 40, 2, 12
    shape = LakeShape(runs=args.runs, channels_per_run=args.channels, frames_per_channel=args.frames,
                      tests_per_run=args.tests)
    root = args.cache / f"grid-{args.runs}x{args.tests}x{args.channels}x{args.frames}"
    if not (root / "runs").is_dir():
        root.mkdir(parents=True, exist_ok=True)
        write_lake(root, shape)
    from reports.spark import spark_session

    start = time.perf_counter()
    single = grid_page(single_report_data(root))
    times = {"single process": time.perf_counter() - start}
    for master in ("local[1]", "local[2]"):
        spark = spark_session(master, app_name=f"bench-grid-{master}")
        try:
            spark.range(1).collect()  # the JVM and its first job: paid once per report, not measured
            start = time.perf_counter()
            page = grid_page(spark_report_data(spark, root))
            times[master] = time.perf_counter() - start
        finally:
            spark.stop()
        if page != single:
            with tempfile.NamedTemporaryFile("w", suffix=".html", delete=False) as out:
                out.write(page)
            raise SystemExit(f"the {master} grid page differs from the single-process one ({out.name})")
    ratio, single_x = times["local[1]"] / times["local[2]"], times["single process"] / times["local[2]"]
    print(f"grid pages of {args.runs} runs x {args.tests} tests ({root})")
    for name, seconds in times.items():
        print(f"  {name:<16} {seconds:8.2f} s")
    print(f"  local[1]/local[2] {ratio:.2f} (goal >= {GOAL}: {'met' if ratio >= GOAL else 'not met'}); "
          f"single process/local[2] {single_x:.2f}")
    print(json.dumps({"runs": args.runs, "tests": args.tests, "seconds": times, "local2_x_local1": ratio,
                      "single_x_local2": single_x}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

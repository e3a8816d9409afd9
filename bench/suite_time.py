"""Suite wall time: the whole suite as a user runs it, at default options and at `--jobs 1`.

What it measures: `amqp-conformance run` end to end (broker start or probe, workers, every test,
the run record), as a subprocess, on the embedded reference broker and, with `--broker-url`, on
a broker of yours (its `--broker-admin` and `--baseline` passed through). Each configuration runs
`--repeat` times. Printed per run: target, jobs, seconds, exit status; per configuration: the
median, and its ratio to the last landed figure in docs/benchmarks.md (the JSON line after
"landed:" there, keyed "<target> <jobs>"; a ratio above 1 is slower). Then the verdicts of
every run of a target are compared test by test: a test whose verdict differs between runs
(or between default and one job) is listed with its verdicts, and the exit status is 1.
With `--deviations [NAME ...]` (every deviation when no name follows), it then runs the proxy
deviation matrix's suite runs (`python -m tests.conformance.deviation_matrix --no-machines-alone`:
each deviation's area through the deviation proxy at default options, against a clean run of the
same area) and prints each deviating/clean ratio and how many are within `RATIO_GOAL`; a
deviation not killed as its own rule makes the exit status 1.

    python -m bench.suite_time                                    # embedded, default and --jobs 1
    python -m bench.suite_time --no-embedded --deviations confirm_dropped   # one deviation's ratio alone
    python -m bench.suite_time --broker-url amqp://guest:guest@127.0.0.1:5743/ \\
        --broker-admin http://guest:guest@127.0.0.1:15743 --baseline baselines/rabbitmq-4.3.6.toml \\
        --label rabbitmq-4.3.6 --no-embedded --repeat 3

Timings are the machine's of the moment: compare ratios measured in the same run, never put
them in a pass/fail test. The last line is one JSON object of the medians.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
LANDED = ROOT / "docs" / "benchmarks.md"
CLI = [sys.executable, "-m", "conformance.cli"]
MATRIX = [sys.executable, "-m", "tests.conformance.deviation_matrix", "--no-machines-alone"]
RATIO_GOAL = 1.5  # a deviating broker's run against a clean one's, at default options


@dataclass
class Run:
    target: str
    jobs: str
    seconds: float
    status: int
    verdicts: dict[str, str] = field(default_factory=dict)


def landed() -> dict[str, float]:
    """The figures of the last landed measurement (docs/benchmarks.md, the line after 'landed:')."""
    try:
        text = LANDED.read_text()
    except OSError:
        return {}
    found = re.findall(r"^landed: (\{.*\})$", text, flags=re.MULTILINE)
    return {str(k): float(v) for k, v in json.loads(found[-1]).items()} if found else {}


def verdicts(out: Path) -> dict[str, str]:
    rows: dict[str, str] = {}
    for part in glob.glob(str(out / "results" / "tests" / "**" / "*.parquet"), recursive=True):
        for row in pq.read_table(part, columns=["test_id", "verdict"]).to_pylist():
            rows[str(row["test_id"])] = str(row["verdict"])
    return rows


def run_env() -> dict[str, str]:
    """The environment of a timed run: as a user's shell has it (no AMQPC_JOBS, and Python caching
    compiled modules: with PYTHONDONTWRITEBYTECODE every xdist worker compiles the project and
    rewrites the suite's asserts again, which lengthens the workers' start)."""
    return {k: v for k, v in os.environ.items() if k not in ("AMQPC_JOBS", "PYTHONDONTWRITEBYTECODE")}


def run_once(target: str, jobs: str, extra: list[str]) -> Run:
    env = run_env()
    with tempfile.TemporaryDirectory(prefix="amqpc-suite-time-") as tmp:
        command = [*CLI, "run", "--out", tmp, *extra, *([] if jobs == "default" else ["--jobs", jobs])]
        start = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, check=False, timeout=1800)
        seconds = time.monotonic() - start
        found = Run(target, jobs, seconds, done.returncode, verdicts(Path(tmp)))
    if done.returncode not in (0, 1):
        print(done.stdout[-2000:], file=sys.stderr)
    return found


def differences(runs: list[Run]) -> list[str]:
    """Tests whose verdict is not the same in every run of one target."""
    lines = []
    for target in dict.fromkeys(r.target for r in runs):
        mine = [r for r in runs if r.target == target]
        seen: dict[str, list[str]] = defaultdict(list)
        for index, run in enumerate(mine):
            for test in set().union(*(r.verdicts for r in mine)):
                seen[test].append(f"{run.jobs}#{index + 1}={run.verdicts.get(test, 'absent')}")
        for test, found in sorted(seen.items()):
            if len({v.split("=", 1)[1] for v in found}) > 1:
                lines.append(f"{target}: {test}: {', '.join(found)}")
    return lines


def deviation_ratios(names: list[str]) -> tuple[list[dict[str, object]], int]:
    """The deviation matrix's suite runs (every deviation when `names` is empty): its ratio rows
    (deviations.json) and its exit status (0: every deviation killed as its own rule)."""
    with tempfile.TemporaryDirectory(prefix="amqpc-suite-time-dev-") as tmp:
        command = [*MATRIX, "--out", tmp, *(["--deviations", *names] if names else [])]
        done = subprocess.run(command, cwd=ROOT, env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, check=False, timeout=7200)
        try:
            rows = list(json.loads((Path(tmp) / "deviations.json").read_text()).get("time_ratios", []))
        except (OSError, ValueError):
            rows = []
    if done.returncode != 0 or not rows:
        print(done.stdout[-3000:], file=sys.stderr)
    return rows, done.returncode


def print_deviation_ratios(rows: list[dict[str, object]], status: int) -> None:
    for r in rows:
        print(f"deviation {r['deviation']} ({r['area']}): {r['seconds']} s against a clean {r['clean_seconds']} s, "
              f"{r['ratio']}x")
    within = sum(float(str(r["ratio"])) <= RATIO_GOAL for r in rows)
    print(f"deviations: {within} of {len(rows)} within {RATIO_GOAL}x of the clean run"
          f"{'' if status == 0 else f'; the matrix exited {status} (a deviation not killed as its own rule)'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker-url", help="a broker of yours, besides the embedded one")
    parser.add_argument("--broker-admin", help="passed to `run` with --broker-url")
    parser.add_argument("--baseline", help="passed to `run` with --broker-url")
    parser.add_argument("--label", default="url",
                        help="the --broker-url broker's name in docs/benchmarks.md's landed figures (default url)")
    parser.add_argument("--no-embedded", action="store_true", help="only the --broker-url broker")
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration (default 1)")
    parser.add_argument("--jobs", nargs="+", default=["default", "1"],
                        help="the --jobs values to time ('default': none given; default: default 1)")
    parser.add_argument("--deviations", nargs="*", metavar="NAME",
                        help="then the deviating/clean ratio of these proxy deviations (none named: all of them)")
    args = parser.parse_args(argv)
    if args.repeat < 1 or (args.no_embedded and not args.broker_url and args.deviations is None):
        parser.error("--repeat must be at least 1, and --no-embedded needs --broker-url (or --deviations alone)")
    targets: list[tuple[str, list[str]]] = [] if args.no_embedded else [("embedded", [])]
    if args.broker_url:
        extra = ["--broker-url", args.broker_url]
        extra += ["--broker-admin", args.broker_admin] if args.broker_admin else []
        extra += ["--baseline", args.baseline] if args.baseline else []
        targets.append((args.label, extra))
    runs: list[Run] = []
    for target, extra in targets:
        for _ in range(args.repeat):
            for jobs in args.jobs:
                run = run_once(target, jobs, extra)
                runs.append(run)
                print(f"{target} jobs={jobs}: {run.seconds:.1f} s, exit {run.status}, {len(run.verdicts)} tests",
                      flush=True)
                for test, verdict in sorted(run.verdicts.items()):
                    if verdict in ("failed", "broken"):  # what made the exit status, before the output is gone
                        print(f"  {verdict}: {test}", flush=True)
    before, medians = landed(), {}
    for target, _ in targets:
        for jobs in args.jobs:
            key = f"{target} {jobs}"
            median = statistics.median(r.seconds for r in runs if r.target == target and r.jobs == jobs)
            medians[key] = round(median, 1)
            ratio = f", {median / before[key]:.2f}x the landed {before[key]:.0f} s" if key in before else ""
            print(f"median {target} jobs={jobs}: {median:.1f} s{ratio}")
    differ = differences(runs)
    if runs:
        print(f"verdicts: {'the same in every run' if not differ else f'{len(differ)} tests differ'}")
    for line in differ:
        print("  " + line)
    matrix_status = 0
    if args.deviations is not None:
        rows, matrix_status = deviation_ratios(args.deviations)
        print_deviation_ratios(rows, matrix_status)
    print(json.dumps(medians))
    return 1 if differ or matrix_status or any(r.status not in (0,) for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())

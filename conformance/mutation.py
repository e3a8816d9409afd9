"""Mutation score: can the suite fail? Every named broker fault must be killed by a test.

Rules (issue 6):
- For each fault of `reference_broker.faults`, run the shipped suite (by default only the
  fault's area, for speed) against an embedded reference broker with that fault switched on
  (AMQPC_BROKER_FAULTS), in a subprocess with a hard time limit, writing the normal results
  records under `--out` with run id `mutation-<fault>`.
- A fault is killed when at least one test of the run ends `failed` (or `broken`); it is
  killed by its own area when one of those tests carries that area's marker.
- Output: the kill matrix (fault x killing tests), the score, and the survivors with their
  area; a JSON summary in `--out/mutation.json`. Exit 0 when every fault is killed, 1 when
  some survive, 4 on bad options.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from reference_broker.faults import BY_NAME, FAULTS, Fault

FAST_SUBSET = ("multi_ack_only_named", "requeue_to_tail", "prefetch_off_by_one", "confirm_duplicated",
               "no_cancel_on_queue_delete", "partial_timeout_returns_all", "soft_errors_close_connection",
               "frame_max_not_enforced")


@dataclass
class Outcome:
    fault: str
    area: str
    rule: str
    exit_code: int
    seconds: float
    killers: list[str] = field(default_factory=list)  # test ids that failed or broke
    own_area_killers: list[str] = field(default_factory=list)

    @property
    def killed(self) -> bool:
        return bool(self.killers)


def run_fault(fault: Fault, out: Path, scope: str, time_limit: float, machines: bool = True) -> Outcome:
    run_id = f"mutation-{fault.name}"
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "conformance.suite", "-p", "no:randomly", "-q",
           "--results-dir", str(out), "--run-id", run_id, "-p", "no:cacheprovider"]
    if scope == "area":
        cmd += ["-m", f"area_{fault.area} and not slow"]
    else:
        cmd += ["-m", "not slow"]
    if not machines:
        cmd += ["-k", "not machine"]
    env = {**os.environ, "AMQPC_BROKER_FAULTS": fault.name, "AMQPC_MACHINE_SHRINK": "0",
           "AMQPC_MACHINE_EXAMPLES": os.environ.get("AMQPC_MACHINE_EXAMPLES", "20")}
    env.pop("AMQPC_BROKER_URL", None)
    started = time.monotonic()
    try:
        code = subprocess.run(cmd, env=env, capture_output=True, timeout=time_limit, check=False).returncode
    except subprocess.TimeoutExpired:
        code = -1
    outcome = Outcome(fault.name, fault.area, fault.rule, code, time.monotonic() - started)
    outcome.killers, outcome.own_area_killers = _killers(out, run_id, fault.area)
    if code == -1 and not outcome.killers:
        outcome.killers = ["<run timed out>"]
    return outcome


def _killers(out: Path, run_id: str, area: str) -> tuple[list[str], list[str]]:
    """Tests of the run whose verdict is failed or broken (read from the results records)."""
    import pyarrow.dataset as ds

    path = out / "tests" / f"run={run_id}"
    if not path.exists():
        return [], []
    table = ds.dataset(str(path), format="parquet").to_table(columns=["test_id", "verdict", "area"])
    rows = table.to_pylist()
    killers = sorted({r["test_id"] for r in rows if r["verdict"] in ("failed", "broken")})
    own = sorted({r["test_id"] for r in rows if r["verdict"] in ("failed", "broken") and r["area"] == area})
    return killers, own


def print_report(outcomes: list[Outcome]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="kill matrix (fault x killing tests)")
    for column in ("fault", "area", "rule", "killed", "own area", "killing tests (first 3)", "s"):
        table.add_column(column)
    for o in outcomes:
        shown = ", ".join(t.rsplit("::", 1)[-1] for t in o.killers[:3]) + (" …" if len(o.killers) > 3 else "")
        table.add_row(o.fault, o.area, o.rule, "yes" if o.killed else "[red]SURVIVED[/red]",
                      str(len(o.own_area_killers)), shown, f"{o.seconds:.0f}")
    console = Console()
    console.print(table)
    killed = sum(o.killed for o in outcomes)
    console.print(f"mutation score: {killed}/{len(outcomes)} = {100 * killed / max(len(outcomes), 1):.0f} %")
    for o in outcomes:
        if not o.killed:
            console.print(f"survivor: {o.fault} (area {o.area}, {o.rule}): {BY_NAME[o.fault].description}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="amqp-conformance mutation",
                                     description="run the suite against each named broker fault")
    parser.add_argument("--out", default="results/mutation", help="results directory")
    parser.add_argument("--faults", nargs="*", help="fault names (default: all)")
    parser.add_argument("--fast", action="store_true", help="one fault per area")
    parser.add_argument("--scope", choices=["area", "all"], default="area", help="tests run per fault")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--time-limit", type=float, default=600.0, help="seconds per fault run")
    parser.add_argument("--no-machines", action="store_true", help="example tests only (faster)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 4 if exc.code else 0
    names = list(FAST_SUBSET) if args.fast else (args.faults or [f.name for f in FAULTS])
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        print(f"amqp-conformance mutation: unknown fault(s): {', '.join(unknown)}", file=sys.stderr)
        return 4
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        outcomes = list(pool.map(
            lambda n: run_fault(BY_NAME[n], out, args.scope, args.time_limit, not args.no_machines), names))
    print_report(outcomes)
    summary = {"score": sum(o.killed for o in outcomes) / max(len(outcomes), 1),
               "faults": [{**asdict(o), "killed": o.killed} for o in outcomes]}
    (out / "mutation.json").write_text(json.dumps(summary, indent=2))
    return 0 if all(o.killed for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())

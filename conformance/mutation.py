"""Mutation score: can the suite fail? Every named broker fault must be killed by a test.

Rules (issue 6, made strict by issue 21):
- For each fault of `reference_broker.faults`, run the shipped suite (by default only the
  fault's area, for speed) against an embedded reference broker with that fault switched on
  (AMQPC_BROKER_FAULTS), in a subprocess with a hard time limit, writing the normal results
  records under `--out` with run id `mutation-<fault>`.
- A fault (or a deviation of the proxy matrix, tests/conformance/deviation_matrix.py) is
  killed only when all hold (`Outcome.killed`): the run exits 1 (failures; not 2 = broken,
  not 3 = broker down); a rule of the fault's area failed (a failed test carries a rule of
  that area); no test is `broken`; the run ended within its time limit. A run that only
  breaks tests, or is cut by its time limit, does not kill: it shows a machine or a test that
  cannot report the deviation.
- Per fault the report shows the failed rules (those a failure message names, else all the
  failed test's rules) and tests, which model machine found it and
  the step count of its shrunk example (the `state.` lines of Hypothesis's minimal example),
  and the wall time. JSON summary in `--out/mutation.json`. Exit 0 when every fault is
  killed, 1 when some survive, 4 on bad options.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conformance.catalogue.rules import rule as catalogue_rule
from conformance.embedded import BY_NAME, FAULTS, Fault

FAST_SUBSET = ("multi_ack_only_named", "requeue_to_tail", "prefetch_off_by_one", "confirm_duplicated",
               "no_cancel_on_queue_delete", "partial_timeout_returns_all", "soft_errors_close_connection",
               "frame_max_not_enforced")
_STEP = re.compile(r"^state\.(?!teardown\(\))\w+\(", re.MULTILINE)


@dataclass
class Outcome:
    fault: str
    area: str
    rule: str
    exit_code: int  # -1: the run was cut at its time limit
    seconds: float
    time_limit: float = 0.0
    failed: list[str] = field(default_factory=list)  # test ids that failed
    broken: list[str] = field(default_factory=list)  # test ids that ended broken
    failed_rules: list[str] = field(default_factory=list)  # rules of the failed tests
    own_area_killers: list[str] = field(default_factory=list)  # failed tests with a rule of the area
    machine: str | None = None  # the first failed model-machine test of the area
    shrunk_steps: int | None = None  # steps of its minimal example

    @property
    def killers(self) -> list[str]:
        return sorted({*self.failed, *self.broken})

    @property
    def killed(self) -> bool:
        return not self.why_not

    @property
    def why_not(self) -> str:
        """Empty when killed; otherwise which condition of the strict definition failed."""
        if self.exit_code == -1 or (self.time_limit and self.seconds > self.time_limit):
            return f"over its time limit ({self.time_limit:g} s)"
        if self.broken:
            return f"{len(self.broken)} test(s) broken"
        if self.exit_code != 1:
            return f"exit status {self.exit_code}, not 1"
        if not self.own_area_killers:
            return f"no rule of area {self.area} failed"
        return ""


def judge(outcome: Outcome, out: Path, run_id: str) -> Outcome:
    """Fill `outcome` from the run's results records (see the module rules)."""
    for row in _rows(out, run_id):
        test, verdict = str(row["test_id"]), row["verdict"]
        if verdict == "broken":
            outcome.broken.append(test)
        if verdict != "failed":
            continue
        outcome.failed.append(test)
        rules = [str(r) for r in row["rule_ids"] or ()]
        named = [r for r in rules if re.search(rf"\b{re.escape(r)}\b", str(row["message"] or ""))]
        outcome.failed_rules = sorted({*outcome.failed_rules, *(named or rules)})
        areas = {catalogue_rule(r).area for r in rules if _known(r)}
        if outcome.area in areas | {row["area"]}:
            outcome.own_area_killers.append(test)
            steps = len(_STEP.findall(str(row["minimal_example"] or "")))
            if "machine" in test and outcome.machine is None and steps:
                outcome.machine, outcome.shrunk_steps = test.rsplit("::", 1)[-1], steps
    outcome.failed.sort()
    outcome.broken.sort()
    return outcome


def _known(rule_id: str) -> bool:
    try:
        catalogue_rule(rule_id)
    except KeyError:
        return False
    return True


def _rows(out: Path, run_id: str) -> list[dict[str, Any]]:
    import pyarrow.dataset as ds

    path = out / "tests" / f"run={run_id}"
    if not path.exists():
        return []
    columns = ["test_id", "verdict", "area", "rule_ids", "minimal_example", "message"]
    rows: list[dict[str, Any]] = ds.dataset(str(path), format="parquet").to_table(columns=columns).to_pylist()
    return rows


def run_fault(fault: Fault, out: Path, scope: str, time_limit: float, machines: bool = True,
              machine_budget: float = 20.0) -> Outcome:
    run_id = f"mutation-{fault.name}"
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "conformance.suite", "-p", "no:randomly", "-q",
           "--results-dir", str(out), "--run-id", run_id, "-p", "no:cacheprovider"]
    if scope == "area":
        cmd += ["-m", f"area_{fault.area} and not slow"]
    else:
        cmd += ["-m", "not slow"]
    if not machines:
        cmd += ["-k", "not machine"]
    env = {**os.environ, "AMQPC_BROKER_FAULTS": fault.name, "AMQPC_MACHINE_BUDGET": str(machine_budget)}
    env.pop("AMQPC_BROKER_URL", None)
    started = time.monotonic()
    try:
        code = subprocess.run(cmd, env=env, capture_output=True, timeout=time_limit, check=False).returncode
    except subprocess.TimeoutExpired:
        code = -1
    outcome = Outcome(fault.name, fault.area, fault.rule, code, time.monotonic() - started, time_limit)
    return judge(outcome, out, run_id)


def print_report(outcomes: list[Outcome], title: str = "kill matrix (fault x killing tests)") -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("fault", "area", "killed", "rules failed", "tests failed", "machine", "steps", "s"):
        table.add_column(column)
    for o in outcomes:
        verdict = "yes" if o.killed else f"[red]NO: {o.why_not}[/red]"
        rules = ", ".join(o.failed_rules[:6]) + (" …" if len(o.failed_rules) > 6 else "")
        table.add_row(o.fault, o.area, verdict, rules, str(len(o.failed)), o.machine or "-",
                      str(o.shrunk_steps) if o.shrunk_steps is not None else "-", f"{o.seconds:.0f}")
    console = Console(width=200)
    console.print(table)
    killed = sum(o.killed for o in outcomes)
    console.print(f"mutation score: {killed}/{len(outcomes)} = {100 * killed / max(len(outcomes), 1):.0f} % "
                  "(killed: exit 1, a rule of its area failed, nothing broken, within its time limit)")
    for o in outcomes:
        if not o.killed:
            console.print(f"survivor: {o.fault} (area {o.area}, {o.rule}): {o.why_not}")


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    return {"score": sum(o.killed for o in outcomes) / max(len(outcomes), 1),
            "faults": [{**asdict(o), "killed": o.killed, "why_not": o.why_not} for o in outcomes]}


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
    parser.add_argument("--machine-budget", type=float, default=20.0,
                        help="each machine's budget in seconds, shrinking included (a kill matters here)")
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
            lambda n: run_fault(BY_NAME[n], out, args.scope, args.time_limit, not args.no_machines,
                                args.machine_budget), names))
    print_report(outcomes)
    (out / "mutation.json").write_text(json.dumps(summary(outcomes), indent=2))
    return 0 if all(o.killed for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())

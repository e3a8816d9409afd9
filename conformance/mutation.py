"""Mutation score: can the suite fail? Every named broker fault must be killed by a test of its rule.

Rules (made strict by, kill = own rule by):
- For each fault of `reference_broker.faults`, run the shipped suite (by default only the
  fault's area, for speed) against an embedded reference broker with that fault switched on
  (AMQPC_BROKER_FAULTS), in a subprocess with a hard time limit, writing the normal results
  records under `--out` with run id `mutation-<fault>` (a former run of that id there is removed).
- A fault (or a deviation of the proxy matrix, tests/conformance/deviation_matrix.py) is
  killed only when all hold (`Outcome.killed`): the run exits 1 (failures; not 2 = broken,
  not 3 = broker down); a failure names one of the fault's own rules (`Fault.rule`, a
  deviation's `rules`), read from the results' `failed_rules` (the rules a failure saw broken,
  conformance.plugin.classify); no test is `broken`; the run ended within its time limit. A
  failure of another rule only does not kill: the report says "failed as X, not its own rule
  Y". A run that only breaks tests, or is cut by its time limit, does not kill either: it
  shows a machine or a test that cannot report the deviation.
- Each campaign first runs a control: the same selection and options on the clean broker (no
  fault; the campaign's areas split into at most `--jobs` runs, each allowed the time limit
  times its number of areas). It must exit 0 with no failure and nothing broken
  (`Outcome.why_unclean`); otherwise the campaign stops with exit 2, since a harness that fails
  on a clean broker cannot measure kills.
- Per fault the report shows the rules its failures named and the failed tests, which model
  machine failed naming its rule and the step count of its shrunk example (the `state.` lines
  of the first failing case it reports: a failure reduced by replaying, `shrunk_steps`), and the
  wall time; an exit status other than 0 or 1 comes
  with the run's last output line (a collection error leaves no record). Before them: the
  control's outcome and wall time, the date and the git commit (`git rev-parse --short
  HEAD`, else "unknown").
  JSON summary in `--out/mutation.json`. Exit 0 when every fault is killed, 1 when some
  survive, 2 when the control failed, 4 on bad options.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conformance.catalogue.mentions import named_rules, rule_text
from conformance.embedded import BY_NAME, ENV, FAULTS, Fault
from conformance.model.wording import names_one_of
from conformance.results.records import PARTITION_KEY, TABLES
from conformance.results.verdicts import EXIT_FAILED, EXIT_HARNESS, EXIT_OK, EXIT_USAGE
from conformance.suite.steps.machine_budget import ENV_BUDGET

FAST_SUBSET = ("multi_ack_only_named", "requeue_to_tail", "prefetch_off_by_one", "confirm_duplicated",
               "no_cancel_on_queue_delete", "partial_timeout_returns_all", "soft_errors_close_connection",
               "frame_max_not_enforced")
CONTROL = "control"  # the `fault` of a control run's Outcome
_STEP = re.compile(r"^state\.(?!teardown\(\))\w+\(", re.MULTILINE)
_CASE = re.compile(r"^state = ", re.MULTILINE)  # where each failing case's program starts


@dataclass
class Outcome:
    fault: str
    area: str
    rules: list[str]  # its own rules: a failure must name one to kill it (none for a control)
    exit_code: int  # -1: the run was cut at its time limit
    seconds: float
    time_limit: float = 0.0
    failed: list[str] = field(default_factory=list)  # test ids that failed
    broken: list[str] = field(default_factory=list)  # test ids that ended broken
    failed_rules: list[str] = field(default_factory=list)  # the rules the failures named
    own_rule_killers: list[str] = field(default_factory=list)  # failed tests naming one of `rules`
    ambiguous: list[str] = field(default_factory=list)  # ... only as "one of these" rules (no kill: model.wording)
    last_words: str = ""  # an exit status other than 0 or 1: the run's last output line (why it ended so)
    machine: str | None = None  # the first failed model-machine test naming one of `rules`
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
        if self._over_time():
            return f"over its time limit ({self.time_limit:g} s)"
        if self.broken:
            return f"{len(self.broken)} test(s) broken"
        if self.exit_code != 1:
            return f"exit status {self.exit_code}, not 1{self._said()}"
        if not self.own_rule_killers:
            own = "/".join(self.rules) or "(none)"
            if self.ambiguous:
                return (f"named {own} only among several rules the model could not tell apart "
                        f"({_listed(self.ambiguous, 2)}), not as the rule broken")
            if self.failed_rules:
                return f"failed as {_listed(self.failed_rules)}, not its own rule {own}"
            return f"no failure named a rule, not its own rule {own}"
        return ""

    @property
    def why_unclean(self) -> str:
        """For a control run: empty when it passed cleanly (exit 0, no failure, nothing broken, in time)."""
        if self._over_time():
            return f"over its time limit ({self.time_limit:g} s)"
        if self.broken:
            return f"{len(self.broken)} test(s) broken: {_listed(self.broken, 3)}"
        if self.failed:
            return f"{len(self.failed)} test(s) failed ({_listed(self.failed_rules)}): {_listed(self.failed, 3)}"
        if self.exit_code != 0:
            return f"exit status {self.exit_code}, not 0{self._said()}"
        return ""

    def _over_time(self) -> bool:
        return self.exit_code == -1 or bool(self.time_limit and self.seconds > self.time_limit)

    def _said(self) -> str:
        return f" (it said: {self.last_words})" if self.last_words else ""


def _listed(items: Sequence[str], most: int = 6) -> str:
    return ", ".join(items[:most]) + (" …" if len(items) > most else "")


def judge(outcome: Outcome, out: Path, run_id: str) -> Outcome:
    """Fill `outcome` from the run's results records (see the module rules)."""
    for row in _rows(out, run_id):
        test, verdict = str(row["test_id"]), row["verdict"]
        if verdict == "broken":
            outcome.broken.append(test)
        if verdict != "failed":
            continue
        outcome.failed.append(test)
        named = [str(r) for r in row["failed_rules"] or ()]  # null: a failure that named no rule
        outcome.failed_rules = sorted({*outcome.failed_rules, *named})
        own, said = [r for r in named if r in outcome.rules], str(row.get("message") or "")
        if own and said and all(names_one_of(rule_text(said, r)) or (len(named) > 1 and not named_rules(rule_text(said, r)))
                                for r in own):
            outcome.ambiguous.append(test)  # "one of these", or a failure that named no rule: not a kill
        elif own:
            outcome.own_rule_killers.append(test)
            steps = shrunk_steps(str(row["minimal_example"] or ""))
            if "machine" in test and outcome.machine is None and steps:
                outcome.machine, outcome.shrunk_steps = test.rsplit("::", 1)[-1], steps
    outcome.failed.sort()
    outcome.broken.sort()
    return outcome


def shrunk_steps(example: str) -> int:
    """The steps of the example a machine's failure reports first: the text of a failure reduced by
    replaying also holds, after it, the longer example Hypothesis reported (its cause), each one
    starting at its `state = ...` line."""
    cases = _CASE.split(example)
    return len(_STEP.findall(cases[1] if len(cases) > 1 else example))


def _rows(out: Path, run_id: str) -> list[dict[str, Any]]:
    import pyarrow.dataset as ds

    path = out / "tests" / f"{PARTITION_KEY}={run_id}"
    if not path.exists():
        return []
    dataset = ds.dataset(str(path), format="parquet")
    columns = [c for c in ("test_id", "verdict", "failed_rules", "minimal_example", "message")
               if c in dataset.schema.names]
    rows: list[dict[str, Any]] = dataset.to_table(columns=columns).to_pylist()
    return rows


def forget_run(out: Path, run_id: str) -> None:
    """Remove a former run of `run_id` under `out`: the lake accumulates, a judgement reads one run."""
    for table in TABLES:
        shutil.rmtree(out / table / f"{PARTITION_KEY}={run_id}", ignore_errors=True)


CLUSTER_AREA = "cluster"  # its faults need a cluster: the suite runs them on `--cluster-node embedded`


def area_marker(areas: Sequence[str] | None) -> str:
    """The `-m` of a run: the given areas' tests (all tests when None), never the slow ones."""
    if not areas:
        return "not slow"
    return f"({' or '.join(f'area_{a}' for a in areas)}) and not slow"


def run_suite(outcome: Outcome, fault: str | None, out: Path, run_id: str, marker: str, machines: bool,
              machine_budget: float, cluster: bool = False) -> Outcome:
    """One subprocess run of the suite on an embedded broker with `fault` (None: clean), judged; with
    `cluster`, the embedded broker is a 3-node cluster (`--cluster-node embedded`), as the cluster
    area and its faults need (without one their tests are needs-cluster and nothing is killed)."""
    forget_run(out, run_id)
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "conformance.suite", "-p", "no:randomly", "-q",
           "--results-dir", str(out), "--run-id", run_id, "-p", "no:cacheprovider", "-m", marker]
    if cluster:
        cmd += ["--cluster-node", "embedded"]
    if not machines:
        cmd += ["-k", "not machine"]
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "AMQPC_BROKER_URL")}  # no inherited fault
    env[ENV_BUDGET] = str(machine_budget)
    if fault:
        env[ENV] = fault
    return run_judged(outcome, cmd, env, out, run_id)


def run_judged(outcome: Outcome, cmd: list[str], env: dict[str, str], out: Path, run_id: str) -> Outcome:
    """Run `cmd` within the outcome's time limit, then judge its records into `outcome`."""
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace",
                              timeout=outcome.time_limit or None, check=False)
    except subprocess.TimeoutExpired:
        outcome.exit_code = -1
    else:
        outcome.exit_code = done.returncode
        if done.returncode not in (0, 1):  # broken, broker down, or pytest's own (collection errors, ...)
            lines = [line.strip() for line in f"{done.stdout}\n{done.stderr}".splitlines() if line.strip()]
            outcome.last_words = lines[-1][:300] if lines else ""
    outcome.seconds = time.monotonic() - started
    return judge(outcome, out, run_id)


def run_fault(fault: Fault, out: Path, scope: str, time_limit: float, machines: bool = True,
              machine_budget: float = 20.0) -> Outcome:
    outcome = Outcome(fault.name, fault.area, [fault.rule], 0, 0.0, time_limit)
    marker = area_marker([fault.area] if scope == "area" else None)
    return run_suite(outcome, fault.name, out, f"mutation-{fault.name}", marker, machines, machine_budget,
                     cluster=fault.area == CLUSTER_AREA or fault.needs_cluster)


@dataclass
class Control:
    """A campaign's clean control: its runs (no fault, the campaign's selection) and their wall time."""

    runs: list[Outcome]
    seconds: float

    @property
    def why_not(self) -> str:
        """Empty when every run passed cleanly; otherwise which run did not, and how."""
        return "; ".join(f"{o.area}: {o.why_unclean}" for o in self.runs if o.why_unclean)

    def summary(self) -> dict[str, Any]:
        return {"clean": not self.why_not, "why_not": self.why_not, "seconds": self.seconds,
                "runs": [{**asdict(o), "why_unclean": o.why_unclean} for o in self.runs]}


def control_groups(areas: Sequence[str], jobs: int) -> list[list[str]]:
    """The campaign's areas (first-seen order) dealt round robin into at most `jobs` runs."""
    unique = list(dict.fromkeys(areas))
    count = max(1, min(jobs, len(unique)))
    return [unique[i::count] for i in range(count)]


def timed_control(runs: Callable[[], list[Outcome]]) -> Control:
    started = time.monotonic()
    outcomes = runs()
    return Control(outcomes, time.monotonic() - started)


def run_control(out: Path, areas: Sequence[str] | None, jobs: int, time_limit: float, machines: bool,
                machine_budget: float, cluster: bool = False) -> Control:
    """The control of `run_fault`'s campaign: `areas` (None: scope all) on the clean broker; a group
    holding the cluster area (with scope all: `cluster`) runs on the embedded 3-node cluster."""
    groups = control_groups(areas, jobs) if areas else [[]]

    def one(index: int) -> Outcome:
        group = groups[index]
        outcome = Outcome(CONTROL, ",".join(group) or "all", [], 0, 0.0, time_limit * max(1, len(group)))
        return run_suite(outcome, None, out, f"mutation-{CONTROL}-{index}", area_marker(group), machines,
                         machine_budget, cluster=CLUSTER_AREA in group or (not group and cluster))

    def runs() -> list[Outcome]:
        with ThreadPoolExecutor(max_workers=len(groups)) as pool:
            return list(pool.map(one, range(len(groups))))

    return timed_control(runs)


def campaign_stamp() -> dict[str, str]:
    """When, and at which commit, a campaign measured (`git rev-parse --short HEAD`, else "unknown")."""
    date = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return {"date": date, "commit": "unknown"}
    return {"date": date, "commit": done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"}


def print_control(control: Control, stamp: dict[str, str]) -> None:
    head = f"{stamp['date']}, commit {stamp['commit']}; control ({len(control.runs)} clean run(s) of the same selection"
    if not control.why_not:
        print(f"{head}): passed in {control.seconds:.0f} s")
    else:
        print(f"{head}): FAILED in {control.seconds:.0f} s: {control.why_not}\n"
              "a harness that fails on a clean broker cannot measure kills: the campaign stops (exit 2)")


def print_report(outcomes: list[Outcome], title: str = "kill matrix (fault x killing tests)") -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("fault", "area", "own rule", "killed", "rules failed", "tests failed", "machine", "steps", "s"):
        table.add_column(column)
    for o in outcomes:
        verdict = "yes" if o.killed else f"[red]NO: {o.why_not}[/red]"
        table.add_row(o.fault, o.area, ", ".join(o.rules), verdict, _listed(o.failed_rules), str(len(o.failed)),
                      o.machine or "-", str(o.shrunk_steps) if o.shrunk_steps is not None else "-", f"{o.seconds:.0f}")
    console = Console(width=200)
    console.print(table)
    killed = sum(o.killed for o in outcomes)
    console.print(f"mutation score: {killed}/{len(outcomes)} = {100 * killed / max(len(outcomes), 1):.0f} % "
                  "(killed: exit 1, a failure names its own rule, nothing broken, within its time limit)")
    for o in outcomes:
        if not o.killed:
            console.print(f"survivor: {o.fault} (area {o.area}, {', '.join(o.rules)}): {o.why_not}")


def summary(outcomes: list[Outcome], control: Control, stamp: dict[str, str]) -> dict[str, Any]:
    return {**stamp, "control": control.summary(), "score": sum(o.killed for o in outcomes) / max(len(outcomes), 1),
            "faults": [{**asdict(o), "killed": o.killed, "why_not": o.why_not} for o in outcomes]}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="amqp-conformance mutation",
                                     description="run the suite against each named broker fault, after a clean control")
    parser.add_argument("--out", default="results/mutation", help="results directory")
    parser.add_argument("--faults", nargs="*", help="fault names (default: all)")
    parser.add_argument("--fast", action="store_true", help="one fault per area")
    parser.add_argument("--scope", choices=["area", "all"], default="area", help="tests run per fault")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--time-limit", type=float, default=600.0, help="seconds per fault run")
    parser.add_argument("--no-machines", action="store_true", help="example tests only (faster)")
    parser.add_argument("--machine-budget", type=float, default=20.0,
                        help="each machine's budget in seconds, shrinking included (a kill matters here)")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    names = list(FAST_SUBSET) if args.fast else (args.faults or [f.name for f in FAULTS])
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        print(f"amqp-conformance mutation: unknown fault(s): {', '.join(unknown)}", file=sys.stderr)
        return EXIT_USAGE
    out, machines, stamp = Path(args.out), not args.no_machines, campaign_stamp()
    out.mkdir(parents=True, exist_ok=True)
    areas = [BY_NAME[n].area for n in names] if args.scope == "area" else None
    control = run_control(out, areas, args.jobs, args.time_limit, machines, args.machine_budget,
                          cluster=any(BY_NAME[n].area == CLUSTER_AREA for n in names))
    print_control(control, stamp)
    outcomes: list[Outcome] = []
    if not control.why_not:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            outcomes = list(pool.map(lambda n: run_fault(BY_NAME[n], out, args.scope, args.time_limit, machines,
                                                         args.machine_budget), names))
        print_report(outcomes)
    (out / "mutation.json").write_text(json.dumps(summary(outcomes, control, stamp), indent=2))
    if control.why_not:
        return EXIT_HARNESS
    return EXIT_OK if all(o.killed for o in outcomes) else EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())

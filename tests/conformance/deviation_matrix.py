"""The proxy-deviation matrix: the suite, and the model machines alone, through each deviation.

`python -m tests.conformance.deviation_matrix` (`make mutation-proxy`) first runs a control: the
same selections (the suite of each deviation's area, one run per area, else their machines
alone) through the proxy applying no deviation, which must pass cleanly (`conformance.mutation`'s control rules);
when it does not, the campaign stops with exit 2. Then, for each deviation of `deviations.py`,
an embedded reference broker behind a `DeviantProxy` applying it, and:
1. the shipped suite of the deviation's area through the proxy (`amqp-conformance`'s pytest
   plugin in a subprocess, `--results-dir` records), judged by the strict kill definition of
   `conformance.mutation` (exit 1, a failure names one of the deviation's own `rules`, nothing
   broken, in time); the machines there get `--suite-budget` (a kill matters, not how far it
   shrinks);
2. unless `--no-machines-alone`, the model machine of that area alone (no example test): it
   must fail naming one of those rules, with its shrunk example at most `MAX_STEPS` steps,
   nothing broken.
It prints the control (its outcome and wall time, the date and the git commit), both
tables (rules and tests failed, which machine, shrunk steps, wall time) and each deviation's
suite run timed against the clean run of its area (at most twice), and writes
`--out/deviations.json`. Exit 0 when every deviation is killed and every machine alone found
its area's deviations within `MAX_STEPS`; 1 otherwise; 2 when the control failed; 4 on bad options.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from conformance.gate.options import default_jobs
from conformance.mutation import (
    CONTROL,
    Control,
    Outcome,
    area_marker,
    campaign_stamp,
    forget_run,
    print_control,
    print_report,
    run_judged,
    timed_control,
)
from conformance.suite import SUITE_DIR
from conformance.suite.steps.machine_budget import ENV_BUDGET
from reference_broker.server import EmbeddedBroker
from tests.conformance.deviant import DeviantProxy, Deviation
from tests.conformance.deviations import BY_NAME, DEVIATIONS

MAX_STEPS = 10
MACHINES = {  # area -> its model machine test
    "ack": "ack/test_machine_ack.py::test_acknowledgements_match_the_model",
    "requeue": "requeue/test_machine_requeue.py::test_requeue_order_and_redelivered_match_the_model",
    "qos": "qos/test_machine_prefetch.py::test_prefetch_limits_match_the_model",
    "confirms": "confirms/test_machine_confirms.py::test_publisher_confirms_match_the_model",
    "cancel": "cancel/test_machine_cancel.py::test_cancel_notification_matches_the_model",
    "timeout": "timeout/test_machine_timeout.py::test_timeout_precedence_and_reactions_match_the_model",
}


def run(deviation: type[Deviation], out: Path, selection: list[str], run_id: str, *, scale: float,
        time_limit: float, budget: float | None = None, jobs: int = 1) -> Outcome:
    """One pytest run of `selection` through a fresh broker and a proxy applying `deviation`, judged strictly."""
    outcome = Outcome(deviation.name, deviation.area, list(deviation.rules), 0, 0.0, time_limit)
    return run_through(outcome, deviation, out, selection, run_id, scale=scale, budget=budget, jobs=jobs)


def run_through(outcome: Outcome, deviation: type[Deviation], out: Path, selection: list[str], run_id: str, *,
                scale: float, budget: float | None, jobs: int = 1) -> Outcome:
    """Run `selection` through a proxy applying `deviation` (the base class: none) and judge it into `outcome`."""
    forget_run(out, run_id)
    with EmbeddedBroker(management_port=0) as broker, DeviantProxy((broker.host, broker.port), deviation) as proxy:
        # no anyio plugin in the workers, as `amqp-conformance run` (conformance.gate.runner.pytest_args)
        cmd = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:anyio", "-q",
               "-o", "addopts=", "--broker-url", proxy.url, "--broker-admin", broker.management_url or "none",
               "--timeout-scale", str(scale), "--results-dir", str(out), "--run-id", run_id, *selection]
        if jobs > 1:  # pytest-xdist, as `amqp-conformance run --jobs N` (conformance.plugin.schedule)
            cmd += ["-n", str(jobs)]
        env = {k: v for k, v in os.environ.items() if k not in ("AMQPC_BROKER_URL", "AMQPC_BROKER_FAULTS")}
        if budget:
            env[ENV_BUDGET] = str(budget)
        return run_judged(outcome, cmd, env, out, run_id)


def suite_selection(deviation: type[Deviation], scope: str) -> list[str]:
    return [str(SUITE_DIR), "-m", area_marker([deviation.area] if scope == "area" else None)]


def run_control(deviations: list[type[Deviation]], out: Path, args: argparse.Namespace) -> Control:
    """The campaign's control: its selection through the proxy applying no deviation, which must pass.

    With the suite runs: the suite of each deviation's area, one clean run per area (scope all:
    the whole suite once), each allowed the time limit, with `--suite-budget`, so that every
    deviation's run has a clean run of the same selection to be timed against (`time_ratios`);
    else the machines alone of those areas; nothing when the campaign runs no test."""
    areas = list(dict.fromkeys(d.area for d in deviations))
    if not args.no_suite:
        groups = [[]] if args.scope == "all" else [[a] for a in areas]
        selections = [(g, [str(SUITE_DIR), "-m", area_marker(g)]) for g in groups]
        budget = args.suite_budget
    elif not args.no_machines_alone and any(a in MACHINES for a in areas):
        chosen = [a for a in areas if a in MACHINES]
        selections, budget = [(chosen, [f"{SUITE_DIR}/{MACHINES[a]}" for a in chosen])], None
    else:
        return Control([], 0.0)

    def runs() -> list[Outcome]:
        return [run_through(Outcome(CONTROL, ",".join(group) or "all", [], 0, 0.0, args.time_limit * max(1, len(group))),
                            Deviation, out, selection, f"proxy-{CONTROL}-{index}", scale=args.timeout_scale,
                            budget=budget, jobs=args.jobs)
                for index, (group, selection) in enumerate(selections)]

    return timed_control(runs)


def time_ratios(suite: list[Outcome], control: Control) -> list[dict[str, object]]:
    """Each deviation's suite run against the clean run of the same selection (a deviating
    broker costs no more than twice a clean one), slowest ratio first."""
    clean = {o.area: o.seconds for o in control.runs}
    rows = []
    for o in suite:
        seconds = clean.get(o.area, clean.get("all", 0.0))  # scope all: one control for every deviation
        if seconds > 0:
            rows.append({"deviation": o.fault, "area": o.area, "seconds": round(o.seconds, 1),
                         "clean_seconds": round(seconds, 1), "ratio": round(o.seconds / seconds, 2)})
    return sorted(rows, key=lambda r: -float(str(r["ratio"])))


def print_ratios(rows: list[dict[str, object]]) -> None:
    if not rows:
        return
    print("time against the clean run of the same selection (slowest first):")
    for r in rows:
        print(f"  {r['deviation']:<34} {r['area']:<9} {r['seconds']:>6} s  clean {r['clean_seconds']:>6} s  "
              f"{r['ratio']}x")


def machine_alone(outcome: Outcome) -> str:
    """Empty when the area's machine alone found the deviation within MAX_STEPS; else why not."""
    if outcome.why_not:
        return outcome.why_not
    if outcome.machine is None:
        return "the machine did not fail naming its rule"
    if outcome.shrunk_steps is None or outcome.shrunk_steps > MAX_STEPS:
        return f"shrunk to {outcome.shrunk_steps} steps (> {MAX_STEPS})"
    return ""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.deviation_matrix",
                                     description="the suite and the machines through each proxy deviation, "
                                                 "after a clean control")
    parser.add_argument("--out", default="results/mutation-proxy", help="results directory")
    parser.add_argument("--deviations", nargs="*", help="deviation names (default: all)")
    parser.add_argument("--scope", choices=["area", "all"], default="area", help="suite tests run per deviation")
    parser.add_argument("--time-limit", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="the runs' --timeout-scale")
    parser.add_argument("--suite-budget", type=float, default=20.0,
                        help="machine budget (s) in the suite runs, where a kill matters more than its shrinking; "
                             "the machines alone keep theirs (default 60 s)")
    parser.add_argument("--jobs", type=int, default=embedded_jobs(),
                        help="pytest-xdist workers per suite run and control run, as `amqp-conformance run --jobs` "
                             "(default: as many as `amqp-conformance run` gives a broker by default, "
                             f"{embedded_jobs()} here; 1: one process)")
    parser.add_argument("--no-suite", action="store_true", help="only the machines alone")
    parser.add_argument("--no-machines-alone", action="store_true", help="only the suite runs")
    return parser


def embedded_jobs() -> int:
    """The workers `amqp-conformance run` gives a broker (here the one behind the proxy) when --jobs
    is not given (`conformance.gate.options.default_jobs`)."""
    chosen = default_jobs(None)
    return (os.cpu_count() or 1) if chosen == "auto" else int(chosen)


def run_matrix(deviations: list[type[Deviation]], out: Path, args: argparse.Namespace) -> tuple[list[Outcome], list[Outcome]]:
    """The suite runs and the machines-alone runs of every deviation, one after the other."""
    suite: list[Outcome] = []
    alone: list[Outcome] = []
    for deviation in deviations:
        if not args.no_suite:
            suite.append(run(deviation, out, suite_selection(deviation, args.scope), f"proxy-{deviation.name}",
                             scale=args.timeout_scale, time_limit=args.time_limit, budget=args.suite_budget,
                             jobs=args.jobs))
        if not args.no_machines_alone and deviation.area in MACHINES:
            alone.append(run(deviation, out, [f"{SUITE_DIR}/{MACHINES[deviation.area]}"],
                             f"proxy-machine-{deviation.name}", scale=args.timeout_scale, time_limit=args.time_limit))
    if suite:
        print_report(suite, "proxy deviations: the suite of each deviation's area")
    if alone:
        print_report(alone, "proxy deviations: the area's model machine alone")
        for o in alone:
            if machine_alone(o):
                print(f"machine alone missed: {o.fault}: {machine_alone(o)}")
    return suite, alone


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return 4 if exc.code else 0
    names = args.deviations or [d.name for d in DEVIATIONS]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        print(f"deviation_matrix: unknown deviation(s): {', '.join(unknown)}", file=sys.stderr)
        return 4
    out, stamp, deviations = Path(args.out), campaign_stamp(), [BY_NAME[n] for n in names]
    out.mkdir(parents=True, exist_ok=True)
    control = run_control(deviations, out, args)
    print_control(control, stamp)
    suite, alone = run_matrix(deviations, out, args) if not control.why_not else ([], [])
    ratios = time_ratios(suite, control)
    print_ratios(ratios)
    summary = {**stamp, "control": control.summary(), "time_ratios": ratios,
               "suite": [{**asdict(o), "killed": o.killed, "why_not": o.why_not} for o in suite],
               "machines_alone": [{**asdict(o), "found": not machine_alone(o), "why_not": machine_alone(o)}
                                  for o in alone]}
    (out / "deviations.json").write_text(json.dumps(summary, indent=2))
    if control.why_not:
        return 2
    return 0 if all(o.killed for o in suite) and not any(machine_alone(o) for o in alone) else 1


if __name__ == "__main__":
    raise SystemExit(main())

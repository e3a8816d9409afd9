"""The proxy-deviation matrix: the suite, and the model machines alone, through each deviation (issue 21).

`python -m tests.conformance.deviation_matrix` (`make mutation-proxy`) runs, for each deviation
of `deviations.py`, an embedded reference broker behind a `DeviantProxy` applying it, and:
1. the shipped suite of the deviation's area through the proxy (`amqp-conformance`'s pytest
   plugin in a subprocess, `--results-dir` records), judged by the strict kill definition of
   `conformance.mutation` (exit 1, a rule of the area failed, nothing broken, in time); the
   machines there get `--suite-budget` (a kill matters, not how far it shrinks);
2. unless `--no-machines-alone`, the model machine of that area alone (no example test): it
   must fail, with its shrunk example at most `MAX_STEPS` steps, nothing broken.
It prints both tables (rules and tests failed, which machine, shrunk steps, wall time) and
writes `--out/deviations.json`. Exit 0 when every deviation is killed and every machine alone
found its area's deviations within `MAX_STEPS`; 1 otherwise; 4 on bad options.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from conformance.mutation import Outcome, judge, print_report
from conformance.suite import SUITE_DIR
from conformance.suite.machine_support import ENV_BUDGET
from reference_broker.server import EmbeddedBroker
from tests.conformance.deviant import DeviantProxy, Deviation
from tests.conformance.deviations import BY_NAME, DEVIATIONS

MAX_STEPS = 10
MACHINES = {  # area -> its model machine test
    "ack": "test_machines.py::test_acknowledgements_match_the_model",
    "requeue": "test_machines.py::test_requeue_order_and_redelivered_match_the_model",
    "qos": "test_machine_prefetch.py::test_prefetch_limits_match_the_model",
    "confirms": "test_machine_confirms.py::test_publisher_confirms_match_the_model",
    "cancel": "test_machine_cancel.py::test_cancel_notification_matches_the_model",
    "timeout": "test_machine_timeout.py::test_timeout_precedence_and_reactions_match_the_model",
}


def run(deviation: type[Deviation], out: Path, selection: list[str], run_id: str, *, scale: float,
        time_limit: float, budget: float | None = None) -> Outcome:
    """One pytest run of `selection` through a fresh broker and proxy, judged strictly."""
    with EmbeddedBroker(management_port=0) as broker, DeviantProxy((broker.host, broker.port), deviation) as proxy:
        cmd = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
               "-o", "addopts=", "--broker-url", proxy.url, "--broker-admin", broker.management_url or "none",
               "--timeout-scale", str(scale), "--results-dir", str(out), "--run-id", run_id, *selection]
        env = {k: v for k, v in os.environ.items() if k not in ("AMQPC_BROKER_URL", "AMQPC_BROKER_FAULTS")}
        if budget:
            env[ENV_BUDGET] = str(budget)
        started = time.monotonic()
        try:
            code = subprocess.run(cmd, env=env, capture_output=True, timeout=time_limit, check=False).returncode
        except subprocess.TimeoutExpired:
            code = -1
        seconds = time.monotonic() - started
    outcome = Outcome(deviation.name, deviation.area, ",".join(deviation.rules), code, seconds, time_limit)
    return judge(outcome, out, run_id)


def suite_selection(deviation: type[Deviation], scope: str) -> list[str]:
    marker = f"area_{deviation.area} and not slow" if scope == "area" else "not slow"
    return [str(SUITE_DIR), "-m", marker]


def machine_alone(outcome: Outcome) -> str:
    """Empty when the area's machine alone found the deviation within MAX_STEPS; else why not."""
    if outcome.why_not:
        return outcome.why_not
    if outcome.machine is None:
        return "the machine did not fail"
    if outcome.shrunk_steps is None or outcome.shrunk_steps > MAX_STEPS:
        return f"shrunk to {outcome.shrunk_steps} steps (> {MAX_STEPS})"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.deviation_matrix",
                                     description="the suite and the machines through each proxy deviation")
    parser.add_argument("--out", default="results/mutation-proxy", help="results directory")
    parser.add_argument("--deviations", nargs="*", help="deviation names (default: all)")
    parser.add_argument("--scope", choices=["area", "all"], default="area", help="suite tests run per deviation")
    parser.add_argument("--time-limit", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="the runs' --timeout-scale")
    parser.add_argument("--suite-budget", type=float, default=20.0,
                        help="machine budget (s) in the suite runs, where a kill matters more than its shrinking; "
                             "the machines alone keep theirs (default 60 s)")
    parser.add_argument("--no-suite", action="store_true", help="only the machines alone")
    parser.add_argument("--no-machines-alone", action="store_true", help="only the suite runs")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 4 if exc.code else 0
    names = args.deviations or [d.name for d in DEVIATIONS]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        print(f"deviation_matrix: unknown deviation(s): {', '.join(unknown)}", file=sys.stderr)
        return 4
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suite: list[Outcome] = []
    alone: list[Outcome] = []
    for name in names:
        deviation = BY_NAME[name]
        if not args.no_suite:
            suite.append(run(deviation, out, suite_selection(deviation, args.scope), f"proxy-{name}",
                             scale=args.timeout_scale, time_limit=args.time_limit, budget=args.suite_budget))
        if not args.no_machines_alone and deviation.area in MACHINES:
            alone.append(run(deviation, out, [f"{SUITE_DIR}/{MACHINES[deviation.area]}"], f"proxy-machine-{name}",
                             scale=args.timeout_scale, time_limit=args.time_limit))
    if suite:
        print_report(suite, "proxy deviations: the suite of each deviation's area")
    if alone:
        print_report(alone, "proxy deviations: the area's model machine alone")
        for o in alone:
            if machine_alone(o):
                print(f"machine alone missed: {o.fault}: {machine_alone(o)}")
    summary = {"suite": [{**asdict(o), "killed": o.killed, "why_not": o.why_not} for o in suite],
               "machines_alone": [{**asdict(o), "found": not machine_alone(o), "why_not": machine_alone(o)}
                                  for o in alone]}
    (out / "deviations.json").write_text(json.dumps(summary, indent=2))
    return 0 if all(o.killed for o in suite) and not any(machine_alone(o) for o in alone) else 1


if __name__ == "__main__":
    raise SystemExit(main())

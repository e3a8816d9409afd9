"""Machine benchmark: the model-vs-broker Hypothesis machines against the reference broker.

What it measures: every machine of the suite (ack, requeue, prefetch, confirms, cancel) runs
its Hypothesis examples against an embedded reference broker over TCP (or `--broker-url`),
with the suite's settings (`--examples` per machine, `--steps` per example). A step is one
rule: the broker call, the model's prediction, the comparison and the settle that follows
(deliveries, confirms and queue counts checked). Connection setup, queue declaration and
teardown per example are inside the timing, as in the suite; Hypothesis' own generation and
shrinking are too. Rate = steps run / wall time per machine, and over all machines.

Printed: a table (machine, examples, steps, seconds, steps/s) and last one JSON line
{"steps_per_s": total steps / total seconds, "<machine>": steps/s, ...}. The goal for the
reference broker is ≥ 300 steps/s. A machine that fails prints its failure and makes the
exit status 1 (the rate is still reported).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# run as a script, bench/ is sys.path[0] and bench/codec.py would shadow the codec package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conformance.catalogue.profiles import detect  # noqa: E402
from conformance.drivers.raw import RawClient  # noqa: E402
from conformance.suite.ack.test_machine_ack import AckMachine  # noqa: E402
from conformance.suite.cancel.test_machine_cancel import CancelMachine  # noqa: E402
from conformance.suite.confirms.test_machine_confirms import ConfirmMachine  # noqa: E402
from conformance.suite.qos.test_machine_prefetch import PrefetchMachine  # noqa: E402
from conformance.suite.requeue.test_machine_requeue import RequeueMachine  # noqa: E402
from conformance.suite.steps.machine_base import MachineTarget, ModelMachine, run_machine  # noqa: E402

MACHINES: tuple[type[ModelMachine], ...] = (AckMachine, RequeueMachine, PrefetchMachine, ConfirmMachine,
                                            CancelMachine)


def run_one(machine: type[ModelMachine], target: MachineTarget, examples: int, steps: int) -> tuple[int, float, bool]:
    ModelMachine.steps_run = 0
    start = time.perf_counter()
    ok = True
    try:
        run_machine(machine, target, examples=examples, steps=steps)
    except BaseException as exc:  # a failing machine is reported, the benchmark goes on
        if isinstance(exc, KeyboardInterrupt):
            raise
        ok = False
        traceback.print_exception(exc, file=sys.stderr)
    return ModelMachine.steps_run, time.perf_counter() - start, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--examples", type=int, default=120, help="Hypothesis examples per machine (the suite's)")
    parser.add_argument("--steps", type=int, default=10, help="steps per example (the suite's)")
    parser.add_argument("--broker-url", default=None, help="default: an embedded reference broker")
    parser.add_argument("--quick", action="store_true", help="5 examples per machine")
    args = parser.parse_args(argv)
    examples = 5 if args.quick else args.examples
    embedded = None
    url = args.broker_url
    if url is None:
        from reference_broker.server import EmbeddedBroker

        embedded = EmbeddedBroker().start()
        url = embedded.url
    try:
        with RawClient(url) as probe:
            profile = detect(probe.server_properties)
        target = MachineTarget(url, profile)
        rows = []
        for machine in MACHINES:
            steps, seconds, ok = run_one(machine, target, examples, args.steps)
            rows.append((machine.__name__, steps, seconds, ok))
    finally:
        if embedded is not None:
            embedded.stop()
    print(f"broker {url} profile {profile}, {examples} examples x {args.steps} steps per machine")
    print(f"{'machine':<18}{'steps':>8}{'seconds':>10}{'steps/s':>10}  result")
    for name, steps, seconds, ok in rows:
        print(f"{name:<18}{steps:>8}{seconds:>10.2f}{steps / seconds:>10.0f}  {'ok' if ok else 'FAILED'}")
    total_steps = sum(r[1] for r in rows)
    total_seconds = sum(r[2] for r in rows)
    print(f"{'total':<18}{total_steps:>8}{total_seconds:>10.2f}{total_steps / total_seconds:>10.0f}")
    summary = {"steps_per_s": round(total_steps / total_seconds, 1)}
    summary.update({name: round(steps / seconds, 1) for name, steps, seconds, _ in rows})
    print(json.dumps(summary))
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

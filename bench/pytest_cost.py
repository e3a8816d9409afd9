"""Where `make test`'s time goes: each test's wall time and CPU, its own and its processes'.

A pytest plugin and a summary. As a plugin (`-p bench.pytest_cost`, with `AMQPC_TEST_COST` naming
a directory) it records, for each test, its wall time and the CPU spent meanwhile by the pytest
process (or xdist worker) that ran it, by its children already reaped, and by its descendants
still running (read from /proc: the Spark JVM, a broker a fixture keeps), one JSON line per test
in `<dir>/<worker>.jsonl`. On a machine whose cores are all busy the wall time says little; the
CPU is what a split of the run can move elsewhere.

    AMQPC_TEST_COST=build/cost .venv/bin/pytest -n 5 --dist loadgroup -p bench.pytest_cost
    python -m bench.pytest_cost build/cost            # totals by group, then the 25 costliest modules

Groups: `spark` (the tests marked spark, on one worker), `whole run` (the tests that start an
`amqp-conformance run` or `clients` subprocess, known by a child's CPU of 1 s or more), `rest`.
Linux only (/proc). Timings are the machine's of the moment: never a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from conformance.results.verdicts import EXIT_OK, EXIT_USAGE

TICK = os.sysconf("SC_CLK_TCK")
WHOLE_RUN_CHILD_CPU = 1.0  # seconds of a child's CPU within one test: a whole run or a client's subprocess


def _descendants_cpu(root: int) -> float:
    """CPU seconds (user + system) of the live descendants of `root` (not `root` itself)."""
    children: dict[int, list[int]] = defaultdict(list)
    cpu: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        pid = int(entry.name)
        children[int(fields[1])].append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    total, stack = 0.0, list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        total += cpu.get(pid, 0.0)
        stack.extend(children.get(pid, ()))
    return total


def _cpu() -> tuple[float, float]:
    """(this process's CPU, its children's: reaped and live)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, reaped.ru_utime + reaped.ru_stime + _descendants_cpu(os.getpid())


class CostRecorder:
    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.file = (out / f"{worker}.jsonl").open("a")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, Any, None]:
        start, (own, kids) = time.monotonic(), _cpu()
        yield
        own2, kids2 = _cpu()
        record = {"test": item.nodeid, "wall": round(time.monotonic() - start, 3),
                  "cpu": round(own2 - own, 3), "children": round(max(0.0, kids2 - kids), 3),
                  "spark": item.get_closest_marker("spark") is not None}
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def pytest_unconfigure(self) -> None:
        self.file.close()


def pytest_configure(config: pytest.Config) -> None:
    out = os.environ.get("AMQPC_TEST_COST")
    if out:
        config.pluginmanager.register(CostRecorder(Path(out)), "amqpc-test-cost")


def group(record: dict[str, Any]) -> str:
    if record["spark"]:
        return "spark"
    return "whole run" if record["children"] >= WHOLE_RUN_CHILD_CPU else "rest"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="the AMQPC_TEST_COST directory of a run")
    parser.add_argument("--top", type=int, default=25, help="how many modules to list")
    args = parser.parse_args(argv)
    records = [json.loads(line) for f in sorted(args.dir.glob("*.jsonl")) for line in f.open()]
    if not records:
        print(f"no records in {args.dir}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{'group':<12}{'tests':>7}{'wall s':>10}{'CPU s':>10}{'of it children':>16}")
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_group[group(record)].append(record)
    for name, rows in [*sorted(by_group.items()), ("all", records)]:
        print(f"{name:<12}{len(rows):>7}{sum(r['wall'] for r in rows):>10.1f}"
              f"{sum(r['cpu'] + r['children'] for r in rows):>10.1f}{sum(r['children'] for r in rows):>16.1f}")
    modules: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for record in records:
        row = modules[record["test"].split("::")[0]]
        row[0] += 1
        row[1] += record["wall"]
        row[2] += record["cpu"] + record["children"]
    print(f"\n{'module':<60}{'tests':>7}{'wall s':>10}{'CPU s':>10}")
    for module, (count, wall, cpu) in sorted(modules.items(), key=lambda kv: -kv[1][2])[:args.top]:
        print(f"{module:<60}{count:>7}{wall:>10.1f}{cpu:>10.1f}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

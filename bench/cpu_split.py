"""Where one command's CPU goes on this machine: the broker's, everything else's, and what idled.

`python -m bench.cpu_split -- COMMAND ...` runs COMMAND (such as `amqp-conformance run --broker-url
...`) and prints one line: its wall time, the CPU-seconds every core spent busy and idle meanwhile
(`/proc/stat`, iowait counted as idle), and the CPU-seconds of the Erlang VMs (`beam.smp`, RabbitMQ's
nodes; `/proc/<pid>/stat`) among the busy ones; then the same as JSON. A run that leaves idle
CPU-seconds on a machine whose cores it could fill waits on something other than the CPU (the
broker's clock, a lock): docs/benchmarks.md, fourteenth session. Linux only; the command's exit
status is passed on (`EXIT_USAGE`, 4, when no command is given).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conformance.results.verdicts import EXIT_USAGE

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cores() -> tuple[int, int]:
    """Busy and idle clock ticks of every core since boot (iowait is idle: no process could run)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, idle


def beam_ticks() -> int:
    """User and system clock ticks of every running beam.smp (Erlang VM) process."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        name, rest = stat.split(")", 1)[0], stat.rsplit(")", 1)[1].split()
        if "beam" in name:
            total += int(rest[11]) + int(rest[12])
    return total


def main(argv: list[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("usage: python -m bench.cpu_split -- COMMAND ...", file=sys.stderr)
        return EXIT_USAGE
    busy0, idle0, beam0, start = *cores(), beam_ticks(), time.monotonic()
    status = subprocess.run(command, check=False).returncode
    busy1, idle1, beam1, wall = *cores(), beam_ticks(), time.monotonic() - start
    figures = {"wall_s": round(wall, 1), "busy_cpu_s": round((busy1 - busy0) / TICKS, 1),
               "idle_cpu_s": round((idle1 - idle0) / TICKS, 1), "beam_cpu_s": round((beam1 - beam0) / TICKS, 1)}
    print(f"wall {figures['wall_s']} s, busy {figures['busy_cpu_s']} CPU-s (beam {figures['beam_cpu_s']}), "
          f"idle {figures['idle_cpu_s']} CPU-s, exit {status}")
    print(json.dumps(figures))
    return status


if __name__ == "__main__":
    sys.exit(main())

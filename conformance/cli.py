"""The `amqp-conformance` command line, the front door (console script `amqp-conformance = conformance.cli:main`).

Responsibility: parse the command line and dispatch to one subcommand, whose options and run
live with its feature: `run`, `baseline`, `rules` and `broker` (`conformance.gate.cli`),
`clients` (client libraries judged by a scripted broker, `conformance.client_judge.cli`),
`grid` (targets x clients into one lake, `conformance.grid.cli`),
`record` (real traffic through a recording relay, or a capture, `conformance.record.cli`),
`report` (the HTML report, `reports.cli`) and `preflight` (`reports.preflight_cli`).

Rules:
- This is the only module of the harness that imports the reports: `run --report` and
  `clients --report` get `build_report` from here. Importing the reports costs no Spark: pyspark
  loads when a report is built.
- Each subcommand is a `Command` in `COMMANDS` (name, help, add_arguments, run); adding one
  touches nothing else. `run(args)` returns the exit status. A command with `own_parser`
  (`report`, `preflight`, `broker`) gets the rest of the command line unparsed as `args.argv`
  and parses it with its own parser, so its options are exactly those of its own entry point.
- Exit statuses follow docs/design.md decision 8 (`conformance.results.verdicts.EXIT_*`): 0 ok,
  1 unexpected failure, 2 harness or environment error, 3 broker unreachable, 4 usage error.
  A usage error prints exactly one line on stderr ("amqp-conformance: error: ...") and
  nothing on stdout.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from conformance.client_judge import cli as clients_cli
from conformance.gate import cli as gate_cli
from conformance.gate.options import UsageError as GateUsageError
from conformance.grid import cli as grid_cli
from conformance.record import cli as record_cli
from conformance.results.verdicts import EXIT_USAGE
from reports.cli import report_main
from reports.preflight_cli import preflight_main

PROG = gate_cli.PROG


class UsageError(Exception):
    """A bad command line: one line on stderr, exit status 4."""


USAGE_ERRORS = (UsageError, GateUsageError, clients_cli.UsageError, record_cli.UsageError, grid_cli.UsageError)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    own_parser: bool = False


def build_report(results: Path, out: Path) -> int:
    """The HTML report of the results lake `results` into `out` (`--report`); its exit status."""
    return report_main([str(results), "--out", str(out)])


def _forwarded(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="the options of the command (see its --help)")


COMMANDS: tuple[Command, ...] = (
    Command("run", "run the conformance suite against a broker (the CI gate)", gate_cli.run_arguments,
            lambda args: gate_cli.run_run(args, build_report)),
    Command("baseline", "write a baseline of known deviations from a recorded run", gate_cli.baseline_arguments,
            gate_cli.baseline_run),
    Command("rules", "list the rule catalogue with the suite's coverage", gate_cli.rules_arguments,
            gate_cli.rules_run),
    Command("clients", "judge client libraries with a scripted broker (client-side scenarios)",
            clients_cli.add_arguments, lambda args: clients_cli.run(args, build_report)),
    Command("grid", "run a grid of targets x clients into one lake (resumable)", grid_cli.add_arguments,
            lambda args: grid_cli.run(args, build_report)),
    Command("record", "record real traffic through a relay, or import a capture, for the audit",
            record_cli.add_arguments, record_cli.run),
    Command("report", "build the HTML report from a results directory", _forwarded,
            lambda args: report_main(args.argv), own_parser=True),
    Command("preflight", "will a recorded workload behave the same on another RabbitMQ version?", _forwarded,
            lambda args: preflight_main(args.argv), own_parser=True),
    Command("broker", "start the reference broker (same options as python -m reference_broker)", _forwarded,
            gate_cli.broker_run, own_parser=True),
)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Conformance harness for AMQP 0-9-1 brokers.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in commands:
        child = sub.add_parser(command.name, help=command.help, description=command.help,
                               add_help=not command.own_parser)
        command.add_arguments(child)
        child.set_defaults(handler=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        forwarded = next((c for c in COMMANDS if c.own_parser and argv[:1] == [c.name]), None)
        if forwarded is not None:
            return forwarded.run(argparse.Namespace(argv=argv[1:]))
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError(f"a command is required ({', '.join(c.name for c in COMMANDS)}); see --help")
        status: int = args.handler(args)
        return status
    except USAGE_ERRORS as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())

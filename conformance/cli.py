"""The `amqp-conformance` command line (console script `amqp-conformance = conformance.cli:main`).

Responsibility: parse the command line and dispatch to one subcommand. Today: `rules` (the
catalogue with the suite's coverage per rule and per area); `run` and `report` plug in the
same way.

Rules:
- Each subcommand is a `Command` in `COMMANDS` (name, help, add_arguments, run); adding one
  touches nothing else. `run(args)` returns the exit status.
- Exit statuses follow DESIGN.md decision 8: 0 ok, 1 unexpected failure, 2 harness or
  environment error, 3 broker unreachable, 4 usage error. A usage error prints exactly one
  line on stderr ("amqp-conformance: error: ...") and nothing on stdout.
- `rules`: exit 0; 2 if part of the suite could not be collected or names unknown rule IDs
  (the table is still printed, the problems go to stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from conformance.catalogue import AREAS

PROG = "amqp-conformance"
EXIT_OK, EXIT_HARNESS, EXIT_USAGE = 0, 2, 4


class UsageError(Exception):
    """A bad command line: one line on stderr, exit status 4."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _rules_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--uncovered", action="store_true", help="only rules without a test")
    parser.add_argument("--area", choices=AREAS, help="only this area")
    parser.add_argument("--suite", type=Path, default=None, help="collect this directory instead of the shipped suite")


def _rules_run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from conformance.coverage import SUITE_DIR, suite_coverage

    suite = args.suite or SUITE_DIR
    if not suite.exists():
        raise UsageError(f"--suite {suite}: no such directory")
    coverage = suite_coverage(suite)
    console = Console(width=None if sys.stdout.isatty() else 160)
    rules = Table(title="Rules" + (f" ({args.area})" if args.area else "") + (" without tests" if args.uncovered else ""))
    for column in ("rule", "area", "title", "tests"):
        rules.add_column(column, justify="right" if column == "tests" else "left")
    for entry in coverage.select(args.area, args.uncovered):
        count = str(len(entry.tests)) if entry.covered else "[red]0[/red]"
        rules.add_row(entry.rule.id, entry.rule.area, entry.rule.title, count)
    console.print(rules)
    areas = Table(title="Coverage per area")
    for column in ("area", "rules", "covered", "uncovered", "tests", "coverage"):
        areas.add_column(column, justify="left" if column == "area" else "right")
    for area in coverage.areas():
        if args.area in (None, area.area):
            areas.add_row(area.area, str(area.rules), str(area.covered), str(area.rules - area.covered),
                          str(area.tests), f"{area.percent:.0f}%")
    console.print(areas)
    for rule_id, tests in sorted(coverage.unknown.items()):
        print(f"{PROG}: unknown rule id {rule_id!r} in {', '.join(tests)}", file=sys.stderr)
    for error in coverage.errors:
        print(f"{PROG}: could not collect {error}", file=sys.stderr)
    return EXIT_HARNESS if coverage.unknown or coverage.errors else EXIT_OK


COMMANDS: tuple[Command, ...] = (
    Command("rules", "list the rule catalogue with the suite's coverage", _rules_arguments, _rules_run),
)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Conformance harness for AMQP 0-9-1 brokers.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in commands:
        child = sub.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(child)
        child.set_defaults(handler=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError(f"a command is required ({', '.join(c.name for c in COMMANDS)}); see --help")
        status: int = args.handler(args)
        return status
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())

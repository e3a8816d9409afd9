"""The gate's subcommands of `amqp-conformance` (the front door, `conformance.cli`, dispatches here).

Responsibility: each subcommand's options and its run: `run` (the suite against a broker as a
CI gate, `runner`), `baseline` (a baseline file from a recorded run), `rules` (the catalogue
with the suite's coverage per rule and per area, `conformance.coverage`) and `broker` (the
reference broker, `conformance.embedded`).

Rules:
- `<name>_arguments(parser)` adds a subcommand's options; `<name>_run(args)` returns its exit
  status (docs/design.md decision 8: 0 ok, 1 unexpected failure, 2 harness or environment error,
  3 broker unreachable, 4 usage error). A usage error is raised as `options.UsageError` with
  one line; the front door prints it and exits 4. Nothing here imports the reports: `run
  --report` builds the report with the callable the front door passes.
- `broker` gets the rest of the command line unparsed as `args.argv` and parses it with the
  reference broker's own parser, so its options are exactly those of `python -m reference_broker`.
- `rules`: exit 0; 2 if part of the suite could not be collected or names unknown rule IDs
  (the table is still printed, the problems go to stderr).
- `baseline`: exit 0 when the file is written; 4 when the results hold no such run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from conformance import embedded
from conformance.catalogue.profiles import AUTO, NEWEST, ProfileError, choices, resolve
from conformance.catalogue.rules import AREAS, plain_markdown
from conformance.coverage import Coverage, short_names
from conformance.gate import runner
from conformance.gate.collect import suite_coverage
from conformance.gate.options import DEFAULT_OUT, RunOptions, UsageError
from conformance.results.baseline import from_results
from conformance.results.verdicts import EXIT_HARNESS, EXIT_OK, STATUS_TEXT
from conformance.results.wording import plural
from conformance.run.config import ConfigError, from_values
from conformance.run.options import RUN_OPTIONS, add_to_argparse
from conformance.suite import SUITE_DIR

PROG = "amqp-conformance"


def rules_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--uncovered", action="store_true", help="only rules and clauses without a test")
    parser.add_argument("--area", choices=AREAS, help="only this area")
    parser.add_argument("--suite", type=Path, default=None, help="collect this directory instead of the shipped suite")
    parser.add_argument("--profile", default=None, metavar="P",
                        help=f"also show what each rule expects on P: {', '.join(choices()[1:])}")
    parser.add_argument("--capability", action="append", default=[], metavar="NAME",
                        help="with --profile amqp-0-9-1: a capability the broker claims (repeat)")
    parser.add_argument("--extension-profile", default=NEWEST, metavar="P",
                        help="with --profile amqp-0-9-1: the RabbitMQ profile that judges claimed extensions")


def rules_run(args: argparse.Namespace) -> int:
    suite = args.suite or SUITE_DIR
    if not suite.exists():
        raise UsageError(f"--suite {suite}: no such directory")
    if args.profile == AUTO:
        raise UsageError("--profile auto needs a broker: name a profile (see --help)")
    try:
        profile = None if args.profile is None else resolve(args.profile, {}, args.capability, args.extension_profile)
    except ProfileError as exc:
        raise UsageError(str(exc)) from None
    coverage = suite_coverage(suite)
    console = Console(width=None if sys.stdout.isatty() else 160)
    rules = Table(title="Rules" + (f" ({args.area})" if args.area else "") + (" without tests" if args.uncovered else "")
                  + (f" on {profile.display}" if profile else ""))
    columns = ("rule", "area", "title", "tests") + (("capability", "expects") if profile else ())
    for column in columns:
        rules.add_column(column, justify="right" if column == "tests" else "left")
    for entry in coverage.select(args.area, args.uncovered):
        count = str(len(entry.tests)) if entry.covered else "[red]0[/red]"
        extra = (entry.rule.capability or "", profile.for_rules([entry.rule.id]).expect(entry.rule.id)) if profile else ()
        rules.add_row(entry.rule.id, entry.rule.area, entry.rule.plain_title, count, *extra)
    console.print(rules)
    if profile is not None:
        for line in profile.explain():
            console.print(f"profile: {line}", soft_wrap=True, highlight=False, markup=False)
    areas = Table(title="Coverage per area")
    for column in ("area", "rules", "covered", "uncovered", "tests", "coverage"):
        areas.add_column(column, justify="left" if column == "area" else "right")
    for area in coverage.areas():
        if args.area in (None, area.area):
            areas.add_row(area.area, str(area.rules), str(area.covered), str(area.rules - area.covered),
                          str(area.tests), f"{area.percent:.0f}%")
    console.print(areas)
    _print_clauses(console, coverage, args.area, args.uncovered)
    for rule_id, tests in sorted(coverage.unknown.items()):
        print(f"{PROG}: unknown rule id {rule_id!r} in {', '.join(tests)}", file=sys.stderr)
    for error in (*coverage.errors, *coverage.clause_problems):
        print(f"{PROG}: could not collect {error}", file=sys.stderr)
    return EXIT_HARNESS if coverage.unknown or coverage.errors or coverage.clause_problems else EXIT_OK


def _print_clauses(console: Console, coverage: Coverage, area: str | None, uncovered: bool) -> None:
    """The clauses of the rules (of `area`) with their tests, then the total line of clauses without a test."""
    clauses = [c for c in coverage.clauses if area in (None, c.rule.area) and (c.untested or not uncovered)]
    if clauses:
        table = Table(title="Clauses" + (f" ({area})" if area else "") + (" without tests" if uncovered else ""))
        for column in ("clause", "promise", "tests"):
            table.add_column(column)
        for entry in clauses:
            tests = short_names(entry.tests)
            status = (escape("\n".join(tests)) if tests else escape(f"untestable: {entry.clause.untestable}")
                      if entry.clause.untestable else "[red]no test[/red]")
            table.add_row(entry.clause.id, escape(plain_markdown(entry.clause.text)), status)
        console.print(table)
    total = [c for c in coverage.clauses if area in (None, c.rule.area)]
    untestable = sum(c.clause.untestable is not None for c in total)
    missing = coverage.untested_clauses(area)
    console.print(f"{plural(len(missing), 'clause')} without a test (of {len(total)}; {untestable} untestable)",
                  highlight=False)


def run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("exit status: " + "; ".join(f"{code} {text}" for code, text in STATUS_TEXT.items())
                     + ". A wrong user or password in --broker-url prints \"authentication refused\" (status 3).")

    add_to_argparse(parser, RUN_OPTIONS)
    parser.add_argument("--baseline", type=Path, default=None, metavar="FILE", help="known deviations (TOML)")
    parser.add_argument("--strict-baseline", action="store_true",
                        help="a baseline deviation that passes (XPASS) fails the run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                        help=f"results, junit.xml, pytest-output.txt, report/ (default: {DEFAULT_OUT})")
    parser.add_argument("--jobs", default=None, metavar="N",
                        help="parallel workers (pytest-xdist), or 'auto' (default: six per core, at most 12, "
                             "for the embedded broker and a --broker-url alike; 1 against a cluster you name; "
                             "AMQPC_JOBS sets it)")
    parser.add_argument("--suite", type=Path, default=None, metavar="DIR",
                        help="run the rule tests in DIR instead of the shipped suite")
    parser.add_argument("--report", action="store_true", help="also build the HTML report into DIR/report (Spark)")


def run_run(args: argparse.Namespace, report: Callable[[Path, Path], int] | None) -> int:
    """`run`; `report(results_dir, out_dir)` builds the HTML report (`--report`)."""
    try:
        config = from_values(lambda dest: getattr(args, dest))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    options = RunOptions(config, args.baseline, args.strict_baseline, args.out, args.jobs, args.suite, args.report)
    return runner.run(options, report=report)


def baseline_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="results", type=Path, required=True, metavar="RESULTS_DIR",
                        help="a results directory (`amqp-conformance run --out DIR` writes DIR/results)")
    parser.add_argument("--run", default=None, metavar="RUN_ID", help="the run to use (default: the latest)")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="the baseline file to write")


def baseline_run(args: argparse.Namespace) -> int:
    results = args.results / "results" if (args.results / "results" / "runs").is_dir() else args.results
    try:
        text, run_id, entries = from_results(results, args.run)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        args.out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--out {args.out}: {exc.strerror or exc}") from None
    print(f"baseline: {args.out} ({plural(entries, 'deviation')} from the failed tests of run {run_id}); "
          f"replace each TODO reason before using it")
    return EXIT_OK


def broker_run(args: argparse.Namespace) -> int:
    parser = embedded.broker_parser()
    parser.prog = f"{PROG} broker"
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            parser.parse_args(args.argv)
    except SystemExit as exc:
        if exc.code in (0, None):
            return EXIT_OK  # --help
        lines = errors.getvalue().strip().splitlines()
        raise UsageError(lines[-1].split("error: ", 1)[-1] if lines else "bad broker options") from None
    return embedded.broker_main(args.argv)

"""`amqp-conformance clients`: play the client-side scenarios at client libraries and judge them.

Responsibility: the subcommand's options and its run: pick the clients (all installed by
default) and scenarios, run them (`runner.run_clients`), print the clients x scenarios matrix
with each client's version, write the results lake under ``--out``/results, and with
``--report`` build the HTML report there.

Rules: exit 0 when no scenario failed, 1 when one did, 2 when only the harness broke (an
adapter that would not start, a report that could not be built), 4 for a usage error (an
unknown or uninstalled client, an unknown scenario) with one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from conformance.clientside import clients, runner
from conformance.clientside.clients import CLIENTS
from conformance.clientside.record import write_client_run
from conformance.clientside.runner import ScenarioResult
from conformance.clientside.scenario import Scenario
from conformance.plugin.verdicts import EXIT_FAILED, EXIT_HARNESS, EXIT_OK, Verdict

DEFAULT_OUT = Path("amqp-conformance-clients")
LETTERS = {Verdict.PASSED: "[green]P[/green]", Verdict.FAILED: "[red]F[/red]",
           Verdict.NOT_APPLICABLE: "[dim]-[/dim]", Verdict.BROKEN: "[magenta]B[/magenta]"}


class UsageError(Exception):
    """One line on stderr, exit 4."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--client", action="append", default=[], metavar="NAME",
                        help="a client to judge (repeatable; default: every installed one of pika, amqp, aio-pika, "
                             "aiormq, kombu, amqplib)")
    parser.add_argument("--scenario", action="append", default=[], metavar="ID", help="only this scenario (repeatable)")
    parser.add_argument("--smoke", action="store_true", help="only the representative subset `make test` runs")
    parser.add_argument("--list", action="store_true", help="list the scenarios and clients, run nothing")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                        help=f"results lake DIR/results and report DIR/report (default: {DEFAULT_OUT})")
    parser.add_argument("--report", action="store_true", help="also build the HTML report into DIR/report (Spark)")
    parser.add_argument("--jobs", type=int, default=3, metavar="N", help="clients judged at once (default 3)")
    parser.add_argument("--timeout-scale", type=float, default=1.0, metavar="X", help="multiply every wait by X")
    parser.add_argument("--run-id", default=None, metavar="ID", help="base of the run ids (one run per client)")


def run(args: argparse.Namespace) -> int:
    try:
        specs = clients.resolve(list(args.client))
        chosen = runner.select(args.scenario, args.smoke)
    except (clients.UnknownClient, KeyError) as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.list:
        _list(console, chosen)
        return EXIT_OK
    if not specs:
        raise UsageError("no client library is installed (pip install pika amqp aio-pika aiormq kombu)")
    if args.jobs < 1 or args.timeout_scale <= 0:
        raise UsageError("--jobs must be at least 1 and --timeout-scale positive")
    base = args.run_id or f"clients-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    started, t0 = datetime.now(UTC), time.monotonic()
    console.print(f"judging {len(specs)} client(s) on {len(chosen)} scenario(s) ...", highlight=False)
    found = runner.run_clients(specs, chosen, jobs=args.jobs, scale=args.timeout_scale)
    status = _status([r for results in found.values() for r in results])
    _matrix(console, chosen, found)
    for client, results in found.items():
        write_client_run(args.out / "results", base, client, results, started, args.timeout_scale, status)
    console.print(f"{time.monotonic() - t0:.0f} s; results: {args.out / 'results'} (runs {base}-<client>)",
                  highlight=False)
    if args.report:
        from reports.cli import report_main

        if report_main([str(args.out / "results"), "--out", str(args.out / "report")]) != 0:
            print("amqp-conformance: the report could not be built", file=sys.stderr)
            return max(status, EXIT_HARNESS)
        console.print(f"report: {args.out / 'report' / 'clients.html'}", highlight=False)
    return status


def _status(results: list[ScenarioResult]) -> int:
    verdicts = {r.verdict for r in results}
    if Verdict.FAILED in verdicts:
        return EXIT_FAILED
    return EXIT_HARNESS if Verdict.BROKEN in verdicts else EXIT_OK


def _list(console: Console, chosen: list[Scenario]) -> None:
    for sc in chosen:
        console.print(f"{sc.id:30} {' '.join(sc.rules):24} {sc.title}{'  [smoke]' if sc.smoke else ''}",
                      highlight=False, markup=False)
    for spec in CLIENTS.values():
        console.print(f"client {spec.name:10} {spec.language:7} {spec.installed_version() or 'not installed'}",
                      highlight=False)


def _matrix(console: Console, chosen: list[Scenario], found: dict[str, list[ScenarioResult]]) -> None:
    table = Table(title="clients x scenarios (P passed, F failed, - not applicable, B broken)")
    table.add_column("scenario")
    table.add_column("rules")
    for client, results in found.items():
        table.add_column(f"{client}\n{results[0].client_version if results else '?'}", justify="center")
    by = {(c, r.scenario.id): r for c, results in found.items() for r in results}
    for sc in chosen:
        table.add_row(sc.id, " ".join(sc.rules), *(LETTERS[by[c, sc.id].verdict] if (c, sc.id) in by else ""
                                                   for c in found))
    console.print(table)
    for client, results in found.items():
        for r in results:
            if r.verdict in (Verdict.FAILED, Verdict.BROKEN):
                first = r.message.splitlines()[0] if r.message else ""
                console.print(f"[bold]{client}[/bold] {r.scenario.id}: {first}", highlight=False, soft_wrap=True)

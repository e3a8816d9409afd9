"""`amqp-conformance clients`: play the client-side scenarios at client libraries and judge them, as a CI gate.

Responsibility: the subcommand's options and its run: pick the clients (every one of the
registry that can run here by default, `--client NAME`, or any adapter program with
`--adapter 'COMMAND'`) and scenarios, build compiled adapters first (saying where), run them
(`runner.run_clients`), print the clients x scenarios matrix with each client's version, judge
the results against `--baseline` (`gate`), write JUnit XML to DIR/junit.xml and the results
lake under DIR/results, and with `--report` build the HTML report there (with the `report`
callable the front door passes: nothing here imports the reports).

Rules: exit statuses as for `run` (`gate.exit_status`): 0 no unexpected result, 1 an unexpected
failure (or an XPASS under `--strict-baseline`), 2 a harness error (an adapter that would not
build or start, a report that could not be built), 4 a usage error (an unknown or unavailable
client, an unknown scenario, an `--adapter` that gives no hello, a bad baseline) with one line
on stderr. A registered client that cannot run here is left out of a default run with one line
naming the package to install; the others still run.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from conformance.client_judge import clients, gate, runner
from conformance.client_judge.record import write_client_run
from conformance.client_judge.runner import ScenarioResult
from conformance.client_judge.scenario import Scenario
from conformance.drivers.build import BuildFailed, Built
from conformance.drivers.registry import REGISTRY, ClientSpec, ClientUnavailable
from conformance.drivers.remote import AdapterError, RemoteDriver
from conformance.results.baseline import EXPECTED, BaselineError, load_baseline
from conformance.results.verdicts import EXIT_HARNESS, EXIT_OK, EXIT_UNREACHABLE, STATUS_TEXT, Verdict

DEFAULT_OUT = Path("amqp-conformance-clients")
LETTERS = {Verdict.PASSED: "[green]P[/green]", Verdict.FAILED: "[red]F[/red]",
           Verdict.NOT_APPLICABLE: "[dim]-[/dim]", Verdict.BROKEN: "[magenta]B[/magenta]"}


class UsageError(Exception):
    """One line on stderr, exit 4."""


@dataclass(frozen=True)
class AdapterSpec(ClientSpec):
    """A client that is not in the registry: any adapter program, named by its own hello line."""

    argv: tuple[str, ...] = ()
    version: str = "?"

    def installed_version(self) -> str | None:
        return self.version

    def check(self) -> None:
        return None

    def prepare(self) -> Built:
        return Built(list(self.argv), None, False, 0.0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "exit status: " + "; ".join(f"{code} {text}" for code, text in STATUS_TEXT.items() if code != EXIT_UNREACHABLE)
    parser.add_argument("--client", action="append", default=[], metavar="NAME",
                        help=f"a client to judge (repeatable; default: every one that can run here of {', '.join(REGISTRY)})")
    parser.add_argument("--adapter", action="append", default=[], metavar="COMMAND",
                        help="judge the adapter program COMMAND (a shell-quoted command line, e.g. 'python3 my_adapter.py'; "
                             "repeatable; see docs/adapter-protocol.md); with it, registry clients run only if named")
    parser.add_argument("--scenario", action="append", default=[], metavar="ID", help="only this scenario (repeatable)")
    parser.add_argument("--smoke", action="store_true", help="only the representative subset `make test` runs")
    parser.add_argument("--list", action="store_true", help="list the scenarios and clients, run nothing")
    parser.add_argument("--baseline", type=Path, default=None, metavar="FILE",
                        help="known client deviations (TOML, as for `run`; tests patterns are SCENARIO[CLIENT], "
                             "or SCENARIO for every client)")
    parser.add_argument("--strict-baseline", action="store_true", help="a baseline deviation that passes (XPASS) fails")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                        help=f"DIR/junit.xml, results lake DIR/results, report DIR/report (default: {DEFAULT_OUT})")
    parser.add_argument("--report", action="store_true", help="also build the HTML report into DIR/report (Spark)")
    parser.add_argument("--jobs", type=int, default=3, metavar="N", help="clients judged at once (default 3)")
    parser.add_argument("--timeout-scale", type=float, default=1.0, metavar="X", help="multiply every wait by X")
    parser.add_argument("--run-id", default=None, metavar="ID", help="base of the run ids (one run per client)")


def adapter_spec(command: str, taken: set[str]) -> AdapterSpec:
    """A spec for an adapter command line, named by its hello (UsageError when it gives none)."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"--adapter {command!r}: {exc}") from None
    if not argv:
        raise UsageError("--adapter needs a command line")
    try:
        probe = RemoteDriver(argv, timeout=5.0, start_timeout=30.0)
    except AdapterError as exc:
        raise UsageError(f"--adapter {command!r}: {exc}") from None
    info = probe.info()
    probe.stop()
    name, n = info.client or "adapter", 2
    while name in taken:
        name, n = f"{info.client}#{n}", n + 1
    return AdapterSpec(name, info.language, "(adapter)", f"--adapter {command}", argv=tuple(argv), version=info.version)


def _specs(args: argparse.Namespace, console: Console) -> list[ClientSpec]:
    try:
        if args.adapter and not args.client:
            specs: list[ClientSpec] = []
        else:
            specs, left_out = clients.resolve(list(args.client))
            for line in left_out:
                console.print(f"skipped: {line}", highlight=False, markup=False, soft_wrap=True)
    except clients.UnknownClient as exc:
        raise UsageError(str(exc)) from None
    taken = {s.name for s in specs}
    for command in args.adapter:
        specs.append(adapter_spec(command, taken))
        taken.add(specs[-1].name)
    return specs


def _build(specs: list[ClientSpec], console: Console) -> tuple[list[ClientSpec], int]:
    """Build the compiled adapters (saying where); a client whose build fails is left out (status 2)."""
    ready, status = [], EXIT_OK
    for spec in specs:
        if spec.build is None:
            ready.append(spec)
            continue
        try:
            built = spec.prepare()
        except (BuildFailed, ClientUnavailable) as exc:
            print(f"amqp-conformance: the {spec.name} adapter did not build: {exc}", file=sys.stderr)
            status = EXIT_HARNESS
            continue
        how = f"built in {built.seconds:.1f} s into" if built.fresh else "from the cache,"
        console.print(f"{spec.name} adapter: {how} {built.directory}", highlight=False, markup=False, soft_wrap=True)
        ready.append(spec)
    return ready, status


def run(args: argparse.Namespace, report: Callable[[Path, Path], int] | None) -> int:
    """`clients`; `report(results_dir, out_dir)` builds the HTML report (`--report`)."""
    console = Console(width=None if sys.stdout.isatty() else 160)
    try:
        chosen = runner.select(args.scenario, args.smoke)
    except KeyError as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    if args.list:
        _list(console, chosen)
        return EXIT_OK
    if args.jobs < 1 or args.timeout_scale <= 0:
        raise UsageError("--jobs must be at least 1 and --timeout-scale positive")
    if args.strict_baseline and args.baseline is None:
        raise UsageError("--strict-baseline needs --baseline FILE")
    try:
        baseline = load_baseline(args.baseline) if args.baseline is not None else None
    except BaselineError as exc:
        raise UsageError(str(exc)) from None
    specs = _specs(args, console)
    if not specs:
        raise UsageError("no client library can run here (pip install pika amqp aio-pika aiormq kombu)")
    for warning in baseline.warnings if baseline else ():
        console.print(f"warning: {warning}", style="yellow", highlight=False, markup=False, soft_wrap=True)
    specs, build_status = _build(specs, console)
    base = args.run_id or f"clients-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    started, t0 = datetime.now(UTC), time.monotonic()
    console.print(f"judging {len(specs)} client(s) on {len(chosen)} scenario(s) ...", highlight=False)
    found = runner.run_clients(specs, chosen, jobs=args.jobs, scale=args.timeout_scale)
    tests, judged = gate.judge_results(found, baseline)
    status = max(gate.exit_status(tests, judged, args.strict_baseline), build_status)
    _matrix(console, chosen, found, {t.nodeid: judged.outcome(t) for t in tests})
    for line in gate.baseline_lines(baseline, judged, tests):
        console.print(line, style="cyan" if line.startswith("XPASS") else None, highlight=False, markup=False,
                      soft_wrap=True)
    languages = {s.name: s.language for s in specs}
    for client, results in found.items():
        write_client_run(args.out / "results", base, client, results, started, args.timeout_scale, status,
                         languages.get(client))
    junit = gate.write_junit(args.out / "junit.xml", tests, judged, run_id=base,
                             baseline=str(args.baseline) if args.baseline else None, strict=args.strict_baseline,
                             started=f"{started:%Y-%m-%dT%H:%M:%S}", languages=languages)
    console.print(f"{time.monotonic() - t0:.0f} s; junit: {junit}; results: {args.out / 'results'} "
                  f"(runs {base}-<client>); exit status {status}: {STATUS_TEXT[status]}", highlight=False)
    if args.report:
        if report is None or report(args.out / "results", args.out / "report") != EXIT_OK:
            print("amqp-conformance: the report could not be built", file=sys.stderr)
            return max(status, EXIT_HARNESS)
        console.print(f"report: {args.out / 'report' / 'clients.html'}", highlight=False)
    return status


def _list(console: Console, chosen: list[Scenario]) -> None:
    for sc in chosen:
        console.print(f"{sc.id:30} {' '.join(sc.rules):24} {sc.title}{'  [smoke]' if sc.smoke else ''}",
                      highlight=False, markup=False)
    for spec in REGISTRY.values():
        console.print(f"client {spec.name:14} {spec.language:7} {spec.package_source:6} {spec.package:40} "
                      f"{spec.installed_version() or 'not installed'}", highlight=False, markup=False)


def _matrix(console: Console, chosen: list[Scenario], found: dict[str, list[ScenarioResult]],
            outcomes: dict[str, str]) -> None:
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
                known = " [yellow](expected: baseline)[/yellow]" if outcomes.get(
                    gate.test_id(client, r.scenario.id)) == EXPECTED else ""
                console.print(f"[bold]{client}[/bold] {r.scenario.id}{known}: {first}", highlight=False,
                              soft_wrap=True)

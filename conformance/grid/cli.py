"""`amqp-conformance grid FILE`: run a grid of targets x clients into one lake, and show it.

Responsibility: the subcommand's options and its run: read the grid file (`spec`), run or
resume it (`runner.run_grid`), print the targets x clients table (one letter per cell: the
cell's exit status), and with `--report` build the HTML report of the grid's lake.

Rules: exit statuses as for `run`: 0 every cell ran and none failed unexpectedly, 1 a cell
failed unexpectedly, 2 a target did not start, was unreachable, or a cell broke (the rows say
why), or the grid was interrupted (Ctrl-C: the table so far and one line saying how to resume),
4 a usage error (a bad grid file or option: one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from conformance.grid.runner import GridInterrupted, run_grid
from conformance.grid.spec import Grid, GridError, load
from conformance.results.verdicts import EXIT_FAILED, EXIT_HARNESS, EXIT_OK, EXIT_UNREACHABLE, STATUS_TEXT

DEFAULT_OUT = Path("amqp-conformance-grid")
LETTERS = {0: "[green]P[/green]", 1: "[red]F[/red]", 2: "[magenta]B[/magenta]", 3: "[yellow]U[/yellow]"}


class UsageError(Exception):
    """One line on stderr, exit 4."""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"want a positive integer, not {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="the grid file (TOML: [[target]] tables and clients)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"the grid's directory: lake/, cells/, grid.json (default: {DEFAULT_OUT})")
    parser.add_argument("--parallel", type=_positive, default=1, help="targets run side by side (default 1)")
    parser.add_argument("--new-round", action="store_true",
                        help="run every cell again (a new round in the same lake) instead of resuming the last")
    parser.add_argument("--rerun", action="append", default=[], metavar="TARGET[/CLIENT]",
                        help="run these cells of the last round again (repeatable; TARGET alone: all of its "
                             "cells); their earlier results leave the lake, the manifest keeps what they said")
    parser.add_argument("--report", action="store_true", help="also build the HTML report of the lake into DIR/report")


def _table(grid: Grid, round_: dict[str, Any]) -> Table:
    clients = list(dict.fromkeys(c for t in grid.targets for c in t.clients))
    table = Table(title=f"grid round {round_['round']}: targets x clients (P ran clean, F unexpected failures, "
                        "B broken, U unreachable, D the broker went down during it, . not run)")
    table.add_column("target")
    for client in clients:
        table.add_column(client, justify="center")
    table.add_column("state")
    for target in grid.targets:
        row = round_["targets"].get(target.name, {})
        cells = row.get("cells", {})
        letters = [_letter(cells[c]) if c in cells else ("." if c in target.clients else "") for c in clients]
        state = row.get("state", "pending") + (f": {row['reason']}" if row.get("reason") else "")
        table.add_row(target.name, *letters, state)
    return table


def _letter(cell: dict[str, Any]) -> str:
    return "[yellow]D[/yellow]" if cell.get("went_down") else LETTERS.get(cell["exit"], "?")


def exit_status(round_: dict[str, Any]) -> int:
    rows = list(round_["targets"].values())
    statuses = [cell["exit"] for row in rows for cell in row.get("cells", {}).values()]
    if (any(row.get("state") in ("did not start", "unreachable") for row in rows) or EXIT_HARNESS in statuses
            or EXIT_UNREACHABLE in statuses):
        return EXIT_HARNESS
    return EXIT_FAILED if EXIT_FAILED in statuses else EXIT_OK


def run(args: argparse.Namespace, report: Callable[[Path, Path], int]) -> int:
    try:
        grid = load(args.file)
    except GridError as exc:
        raise UsageError(str(exc)) from None
    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    console.print(f"grid {args.file}: {len(grid.targets)} target(s), {len(grid.cells())} cell(s) into {args.out}")
    try:
        round_ = run_grid(grid, args.out, parallel=args.parallel, new_round=args.new_round,
                          rerun=tuple(args.rerun))
    except GridError as exc:
        raise UsageError(str(exc)) from None
    except GridInterrupted as stopped:
        console.print(_table(grid, stopped.round))
        console.print(f"interrupted: the cells that finished are in {args.out / 'lake'}; run the same command "
                      "again (without --new-round) to run the others", style="bold")
        return EXIT_HARNESS
    console.print(_table(grid, round_))
    status = exit_status(round_)
    if args.report and report(args.out / "lake", args.out / "report") != EXIT_OK:
        status = max(status, EXIT_HARNESS)
    console.print(f"lake: {args.out / 'lake'}\nmanifest: {args.out / 'grid.json'}")
    console.print(f"exit status {status}: {STATUS_TEXT[status]}", style="bold")
    return status

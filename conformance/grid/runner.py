"""Run a grid: every (target, client) cell is one `amqp-conformance run`, its results moved into
the grid's one lake.

Rules:
- The grid's directory holds `lake/` (the results lake of every cell, `runs/`, `tests/`,
  `frames/` partitioned by run, as one run writes them), `cells/<target>/<client>/` (each cell's
  junit.xml and pytest output) and `grid.json` (the manifest: rounds, and per round each
  target's state and each cell's exit status, run id and seconds), rewritten atomically after
  every cell.
- A round runs every cell once. Run again, the grid resumes its last round: a cell that
  finished (exit 0, 1 or 2, its results in the lake) is not run again; `new_round` starts a
  round that runs every cell again into the same lake (the history the grid pages compare).
- Targets run side by side, `parallel` at a time; the cells of one target run one after the
  other (each with the target's `jobs` workers). A target's `start` runs first (bounded); if it
  fails, or a cell finds the broker unreachable (exit 3), the target's row says why and its
  remaining cells are not run. `stop` runs after the cells whenever `start` ran.
- A broker that went down during a cell (exit 3 after the run reached it: GarageMQ wedges
  under the suite, and a library may hang on it until the run's watchdog) is not the end of a
  target the grid started: that cell keeps its results (in the lake, with the test that saw the
  broker go and the `broken` ones after it; none when the watchdog ended the run), the target is
  stopped and started again (`restarts` in its row) and its next cell runs on a fresh broker. A
  cell whose first connection was refused ends the row as before.
- `test_timeout` (a target's) is each cell's `--test-timeout`: a shorter bound for a broker that
  wedges, where a library's blocking call otherwise waits for the watchdog's default.
- `rerun` names cells (`TARGET/CLIENT`, or `TARGET` for all of its cells) of the resumed round to run
  again (after a fix, say): each one's partitions leave the lake and its manifest entry moves to
  the round's `replaced` list (what it said, when it was replaced), so the record keeps it.
- Every wait is bounded: `start` by its `start_timeout`, `stop` by STOP_SECONDS, a cell by
  CELL_SECONDS (the run's own watchdog ends it sooner).
- Interrupted (Ctrl-C: `KeyboardInterrupt` in the caller's thread), the grid starts no other cell;
  each running cell is told to stop as a terminal would tell it (SIGINT), then terminated after
  INTERRUPT_SECONDS; its partial results are thrown away and it is not recorded, so running the
  grid again resumes with it. Started targets are stopped as usual; `run_grid` then raises
  `GridInterrupted`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conformance.grid.spec import Grid, GridError, Target
from conformance.results.verdicts import (
    AUTH_REFUSED_AT,
    EXIT_FAILED,
    EXIT_HARNESS,
    EXIT_OK,
    EXIT_UNREACHABLE,
    UNREACHABLE_AT,
)

CELL_SECONDS = 3600.0
STOP_SECONDS = 300.0
INTERRUPT_SECONDS = 60.0  # a cell told to stop: until it is terminated (its run tears its tests down first)
FINISHED = (EXIT_OK, EXIT_FAILED, EXIT_HARNESS)  # a cell with results in the lake


class GridInterrupted(Exception):
    """The grid was interrupted; what finished is kept (`round`: the round's manifest entry)."""

    def __init__(self, round_: dict[str, Any]) -> None:
        super().__init__("interrupted")
        self.round = round_


@dataclass
class Stop:
    """An interruption: no cell starts once it is requested; the running ones get SIGINT."""

    requested: threading.Event = field(default_factory=threading.Event)
    running: set[subprocess.Popen[str]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def request(self) -> None:
        self.requested.set()
        with self.lock:
            for process in self.running:
                if process.poll() is None:
                    process.send_signal(signal.SIGINT)


@dataclass
class Manifest:
    """grid.json: rounds of targets and cells."""

    path: Path
    rounds: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def load(cls, path: Path) -> Manifest:
        if not path.exists():
            return cls(path)
        return cls(path, list(json.loads(path.read_text(encoding="utf-8")).get("rounds", [])))

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"rounds": self.rounds}, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)

    def round(self, new: bool) -> dict[str, Any]:
        if new or not self.rounds:
            self.rounds.append({"round": len(self.rounds) + 1, "started": datetime.now(UTC).isoformat(),
                                "targets": {}})
        return self.rounds[-1]

    def update(self, row: dict[str, Any], **changes: Any) -> None:
        with self.lock:
            row.update(changes)
            self.save()


def cell_command(target: Target, client: str, grid: Grid, out: Path, run_id: str) -> list[str]:
    argv = [sys.executable, "-m", "conformance.cli", "run", "--client", client, "--out", str(out),
            "--run-id", run_id]
    for option, value in (("--broker-url", target.url), ("--broker-admin", target.admin),
                          ("--baseline", target.baseline), ("--profile", target.profile), ("--jobs", target.jobs)):
        if value is not None:
            argv += [option, value]
    for node in target.cluster_nodes:
        argv += ["--cluster-node", node]
    if target.node_control is not None:
        argv += ["--node-control", target.node_control]
    select = target.select if target.select is not None else grid.select
    if select:
        argv += ["--select", ",".join(select)]
    if grid.timeout_scale is not None:
        argv += ["--timeout-scale", str(grid.timeout_scale)]
    if target.test_timeout is not None:
        argv += ["--test-timeout", f"{target.test_timeout:g}"]
    return argv


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _shell(command: str, env: dict[str, str], timeout: float) -> str | None:
    """Run a target's start or stop command; None, or why it failed."""
    try:
        done = subprocess.run(command, shell=True, env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return f"{command!r} did not end within {timeout:.0f} s"
    if done.returncode != 0:
        return f"{command!r} exited {done.returncode}: {_last_line(done.stderr or done.stdout)}"
    return None


def move_into_lake(results: Path, lake: Path) -> int:
    """Move a cell's run partitions (results/<table>/run=<id>) into the lake; how many."""
    moved = 0
    for partition in sorted(results.glob("*/run=*")):
        destination = lake / partition.parent.name / partition.name
        destination.parent.mkdir(parents=True, exist_ok=True)
        if destination.exists():
            shutil.rmtree(destination)
        os.replace(partition, destination)
        moved += 1
    return moved


def run_target(target: Target, grid: Grid, root: Path, manifest: Manifest, round_: dict[str, Any],
               stop: Stop | None = None) -> None:
    stop = stop or Stop()
    row = round_["targets"].setdefault(target.name, {"state": "pending", "cells": {}})
    pending = [c for c in target.clients if not _finished(row["cells"].get(c, {}))]
    if not pending and row["state"] in ("pending", "running", "restarting", "interrupted"):
        manifest.update(row, state="done")  # its last cells finished before an interruption, or left the file
    if not pending or stop.requested.is_set():
        return
    env = {**os.environ, **target.env}
    if target.start:
        manifest.update(row, state="starting")
        failure = _shell(target.start, env, target.start_timeout)
        if failure is not None:
            manifest.update(row, state="did not start", reason=failure)
            return
    manifest.update(row, state="running", reason=None)
    try:
        for client in pending:
            if stop.requested.is_set():
                manifest.update(row, state="interrupted")
                break
            if not _run_cell(target, client, grid, root, env, manifest, round_, row, stop):
                break
            went_down = row["cells"][client].get("went_down") and client != pending[-1]
            if went_down and not _restart(target, env, manifest, row):
                break
        else:
            manifest.update(row, state="done")
    finally:
        if target.start and target.stop:
            failure = _shell(target.stop, env, STOP_SECONDS)
            if failure is not None:
                manifest.update(row, stop_failed=failure)


def _run_cell(target: Target, client: str, grid: Grid, root: Path, env: dict[str, str], manifest: Manifest,
              round_: dict[str, Any], row: dict[str, Any], stop: Stop) -> bool:
    """One cell; False when the target turned out unreachable or the grid was interrupted (its
    other cells are not run)."""
    out = root / "cells" / target.name / client
    shutil.rmtree(out, ignore_errors=True)
    run_id = f"grid{round_['round']}-{target.name}-{client}-{datetime.now(UTC):%Y%m%dT%H%M%S}"
    start = time.monotonic()
    status, said = _run_bounded(cell_command(target, client, grid, out, run_id), env, stop)
    if stop.requested.is_set():  # cut short: not a verdict; the grid resumes with this cell
        shutil.rmtree(out, ignore_errors=True)
        manifest.update(row, state="interrupted")
        return False
    cell: dict[str, Any] = {"exit": status, "run_id": run_id, "seconds": round(time.monotonic() - start, 1),
                            "said": said}
    went_down = status == EXIT_UNREACHABLE and target.start is not None and not _refused_at_start(said)
    if status in FINISHED or went_down:
        cell["partitions"] = move_into_lake(out / "results", root / "lake")
    if went_down:
        cell["went_down"] = True
    with manifest.lock:
        row["cells"][client] = cell
        manifest.save()
    if status == EXIT_UNREACHABLE and not went_down:
        manifest.update(row, state="unreachable", reason=said)
        return False
    return True


def _finished(cell: dict[str, Any]) -> bool:
    """A cell with its results in the lake: it ran to its end, or its broker went down during it."""
    return cell.get("exit") in FINISHED or bool(cell.get("went_down"))


def _refused_at_start(said: str) -> bool:
    """Whether a cell's exit 3 came before its first test (the run's last line: the broker refused
    its first connection, conformance.plugin.health.connect_failure), not from a broker that went
    down during the run (the run's verdict line, or its watchdog's)."""
    return UNREACHABLE_AT in said or AUTH_REFUSED_AT in said


def _restart(target: Target, env: dict[str, str], manifest: Manifest, row: dict[str, Any]) -> bool:
    """Stop and start a target whose broker went down during a cell; False (the row says why) when it
    does not start again."""
    manifest.update(row, state="restarting", restarts=row.get("restarts", 0) + 1)
    if target.stop:
        _shell(target.stop, env, STOP_SECONDS)
    failure = _shell(target.start or "", env, target.start_timeout)
    if failure is not None:
        manifest.update(row, state="did not start", reason=f"after the broker went down: {failure}")
        return False
    manifest.update(row, state="running")
    return True


def _run_bounded(argv: list[str], env: dict[str, str], stop: Stop) -> tuple[int, str]:
    """A cell's run: (exit status, its last line), bounded by CELL_SECONDS, ended on `stop`."""
    # its own session: a terminal's Ctrl-C reaches the grid alone, which passes one SIGINT on (`Stop`)
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    with stop.lock:
        stop.running.add(process)
    if stop.requested.is_set():  # requested while it started: it missed the signal
        process.send_signal(signal.SIGINT)
    try:
        try:
            stdout, stderr = process.communicate(timeout=CELL_SECONDS)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            stdout, stderr = _end(process)
            return EXIT_HARNESS, f"the cell did not end within {CELL_SECONDS:.0f} s"
        return process.returncode, _last_line(stdout + "\n" + stderr)
    except BaseException:
        _end(process)
        raise
    finally:
        with stop.lock:
            stop.running.discard(process)


def _end(process: subprocess.Popen[str]) -> tuple[str, str]:
    """Wait for a process told to stop: terminated after INTERRUPT_SECONDS, killed after as many more."""
    for step in (None, process.terminate, process.kill):
        if step is not None:
            step()
        try:
            return process.communicate(timeout=INTERRUPT_SECONDS)
        except subprocess.TimeoutExpired:
            continue
    return "", ""


def rerun_cells(grid: Grid, names: tuple[str, ...]) -> list[tuple[str, str]]:
    """The (target, client) cells `names` mean (`TARGET/CLIENT` or `TARGET`); GridError for a name
    that is no cell of the grid."""
    chosen: list[tuple[str, str]] = []
    for name in names:
        target_name, _, client = name.partition("/")
        target = next((t for t in grid.targets if t.name == target_name), None)
        if target is None:
            raise GridError(f"--rerun {name!r}: no target {target_name!r} in the grid "
                            f"({', '.join(t.name for t in grid.targets)})")
        if client and client not in target.clients:
            raise GridError(f"--rerun {name!r}: target {target_name!r} has no client {client!r} "
                            f"({', '.join(target.clients)})")
        chosen += [(target.name, c) for c in ([client] if client else target.clients)]
    return chosen


def _replace(root: Path, manifest: Manifest, round_: dict[str, Any], cells: list[tuple[str, str]]) -> None:
    with manifest.lock:
        for target_name, client in cells:
            cell = round_["targets"].get(target_name, {}).get("cells", {}).pop(client, None)
            if cell is None:
                continue
            for partition in (root / "lake").glob(f"*/run={cell['run_id']}"):
                shutil.rmtree(partition)
            round_.setdefault("replaced", []).append(
                {"target": target_name, "client": client, **cell, "replaced": datetime.now(UTC).isoformat()})
        manifest.save()


WAKE_SECONDS = 0.5  # how often the grid's main thread wakes while its cells run


def _done_within(future: Future[None], seconds: float) -> bool:
    """`future.result()` within `seconds`, False when it is not done yet. A SIGINT may land on any
    thread of the process; Python runs its handler (the KeyboardInterrupt) in the main thread only,
    at its next bytecode, which a main thread blocked in an untimed wait would reach only when the
    cells had ended: waking it often lets a Ctrl-C stop the running cells."""
    try:
        future.result(timeout=seconds)
    except FuturesTimeout:
        return False
    return True


def run_grid(grid: Grid, root: Path, *, parallel: int = 1, new_round: bool = False,
             rerun: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run (or resume) the grid into `root`; the round's manifest entry. `GridInterrupted` on a
    KeyboardInterrupt, once the running cells have ended (see the module rules)."""
    again = rerun_cells(grid, rerun)
    root.mkdir(parents=True, exist_ok=True)
    (root / "lake").mkdir(exist_ok=True)
    manifest = Manifest.load(root / "grid.json")
    round_ = manifest.round(new_round)
    _replace(root, manifest, round_, again)
    stop = Stop()
    pool = ThreadPoolExecutor(max_workers=max(1, parallel))
    try:
        for future in [pool.submit(run_target, t, grid, root, manifest, round_, stop) for t in grid.targets]:
            while not _done_within(future, WAKE_SECONDS):
                pass  # the main thread wakes to run a Ctrl-C's handler (see _done_within)
    except KeyboardInterrupt:
        stop.request()
        pool.shutdown(wait=True, cancel_futures=True)
        raise GridInterrupted(round_) from None
    pool.shutdown(wait=True)
    return round_

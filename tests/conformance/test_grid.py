"""`amqp-conformance grid`: targets x clients into one lake, resumable, a target that cannot be
reached or started as a row that says why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from conformance.grid.runner import cell_command
from conformance.grid.spec import GridError, Target, parse
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
CI_GRID_SECONDS = 2400  # 25 cells, two targets at a time: about 10 minutes on a quiet 2-core machine


@pytest.mark.parametrize(("text", "says"), [
    ("", "no [[target]]"),
    ("bogus = 1\n[[target]]\nname = 'a'\n", "unknown key 'bogus'"),
    ("[[target]]\nname = 'a b'\n", "name must be"),
    ("[[target]]\nname = 'a'\n[[target]]\nname = 'a'\n", "a second target named 'a'"),
    ("[[target]]\nname = 'a'\nport = 1\n", "unknown key 'port'"),
    ("[[target]]\nname = 'a'\nenv = { X = 1 }\n", "env must be a table of strings"),
    ("timeout_scale = -1\n[[target]]\nname = 'a'\n", "timeout_scale must be a positive number"),
    ("clients = [1]\n[[target]]\nname = 'a'\n", "clients must be a list of names"),
    ("[[target]\n", "grid file"),
    ("[[target]]\nname = 'a'\ntest_timeout = 0\n", "test_timeout must be a positive number"),
])
def test_a_bad_grid_file_is_one_clear_error(text: str, says: str) -> None:
    with pytest.raises(GridError) as error:
        parse(text)
    assert says in str(error.value), str(error.value)


def test_targets_take_the_default_clients_unless_they_name_their_own() -> None:
    grid = parse("clients = 'raw, pika'\nselect = ['ack']\n[[target]]\nname = 'a'\n"
                 "[[target]]\nname = 'b'\nurl = 'amqp://x/'\nclients = ['amqp']\njobs = 2\nselect = 'qos'\n")
    assert [(t.name, c) for t, c in grid.cells()] == [("a", "raw"), ("a", "pika"), ("b", "amqp")]
    argv = cell_command(grid.targets[1], "amqp", grid, Path("/o"), "r1")
    assert argv[argv.index("--broker-url") + 1] == "amqp://x/" and argv[argv.index("--jobs") + 1] == "2"
    assert argv[argv.index("--select") + 1] == "qos" and "--broker-admin" not in argv  # the target's own
    assert cell_command(grid.targets[0], "raw", grid, Path("/o"), "r0")[-1] == "ack"  # the grid's
    bounded = parse("[[target]]\nname = 'g'\ntest_timeout = 120\n").targets[0]
    assert cell_command(bounded, "pika", grid, Path("/o"), "r2")[-2:] == ["--test-timeout", "120"]
    assert Target("e").url is None  # the embedded reference broker


def grid(path: Path, out: Path, *extra: str, timeout: float = 600) -> tuple[int, str, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "conformance.cli", "grid", str(path), "--out", str(out), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    manifest = json.loads((out / "grid.json").read_text()) if (out / "grid.json").exists() else {}
    return done.returncode, done.stdout + done.stderr, manifest


@pytest.mark.grid  # five runs of the suite: in `make test-grid`, out of make test's five minutes
def test_a_grid_runs_every_cell_into_one_lake_and_resumes_without_running_them_again(tmp_path: Path) -> None:
    path = tmp_path / "grid.toml"
    path.write_text(f"""
clients = ["raw", "amqp"]
select = "ACK-03"

[[target]]
name = "reference"

[[target]]
name = "nowhere"
url = "amqp://guest:guest@127.0.0.1:{free_port()}/"

[[target]]
name = "wont-start"
start = "echo no broker here >&2; exit 7"
""")
    out = tmp_path / "g"
    status, said, manifest = grid(path, out)
    assert status == 2, said  # the two rows that say why make it an environment error
    rows = manifest["rounds"][0]["targets"]
    assert {c: cell["exit"] for c, cell in rows["reference"]["cells"].items()} == {"raw": 0, "amqp": 0}, said
    assert rows["nowhere"]["state"] == "unreachable" and "unreachable" in rows["nowhere"]["reason"]
    assert list(rows["nowhere"]["cells"]) == ["raw"]  # the rest of an unreachable target is not run
    assert rows["wont-start"] == {"state": "did not start", "cells": {},
                                  "reason": "'echo no broker here >&2; exit 7' exited 7: no broker here"}
    runs = sorted(p.name for p in (out / "lake" / "runs").iterdir())
    assert runs == sorted(f"run={cell['run_id']}" for cell in rows["reference"]["cells"].values())
    assert (out / "lake" / "tests").is_dir() and (out / "cells" / "reference" / "raw" / "junit.xml").exists()

    status, said, again = grid(path, out)  # resumed: the finished cells are not run again
    assert again["rounds"][0]["targets"]["reference"]["cells"] == rows["reference"]["cells"], said
    assert sorted(p.name for p in (out / "lake" / "runs").iterdir()) == runs

    first = rows["reference"]["cells"]["amqp"]  # a cell run again: its old results leave the lake
    status, said, third = grid(path, out, "--rerun", "reference/amqp")
    cells = third["rounds"][0]["targets"]["reference"]["cells"]
    assert cells["raw"] == rows["reference"]["cells"]["raw"] and cells["amqp"]["exit"] == 0, said
    assert cells["amqp"]["run_id"] != first["run_id"]
    assert [(r["client"], r["run_id"], r["exit"]) for r in third["rounds"][0]["replaced"]] == [
        ("amqp", first["run_id"], 0)]
    assert sorted(p.name for p in (out / "lake" / "runs").iterdir()) == sorted(
        f"run={cell['run_id']}" for cell in cells.values())


@pytest.mark.grid
def test_a_broker_that_goes_down_during_a_cell_is_started_again_for_the_next(tmp_path: Path) -> None:
    """A broker the grid starts that wedges under a cell (tests.conformance.wedging_broker, as GarageMQ
    does): the cell keeps its results (the broken tests say the broker went down), the target is
    stopped and started again, and its next cell runs; run again, neither cell is run again."""
    port, command = free_port(), f"{sys.executable} -m tests.conformance.wedging_broker"
    path = tmp_path / "grid.toml"
    path.write_text(f"""
clients = ["raw", "amqp"]
select = "ACK-03"
timeout_scale = 0.4

[[target]]
name = "wedging"
url = "amqp://guest:guest@127.0.0.1:{port}/"
start = "{command} up {port} {tmp_path}"
stop = "{command} down {port} {tmp_path}"
start_timeout = 60
""")
    out = tmp_path / "g"
    status, said, manifest = grid(path, out)
    assert status == 2, said  # a cell whose broker went down is an environment error
    row = manifest["rounds"][0]["targets"]["wedging"]
    assert row["state"] == "done" and row["restarts"] == 1, row  # once between the two cells
    assert {c: (cell["exit"], cell.get("went_down")) for c, cell in row["cells"].items()} == {
        "raw": (3, True), "amqp": (3, True)}, row
    for cell in row["cells"].values():
        verdicts = {r["verdict"] for r in pq.read_table(out / "lake" / "tests" / f"run={cell['run_id']}",
                                                           columns=["verdict"]).to_pylist()}
        assert "broken" in verdicts, verdicts
    assert "D" in said  # the table's letter for a cell whose broker went down
    status, said, again = grid(path, out)
    assert again["rounds"][0]["targets"]["wedging"]["cells"] == row["cells"], said
    assert not (tmp_path / f"wedging-broker-{port}.pid").exists()  # stopped after the cells


@pytest.mark.parametrize(("name", "says"), [("elsewhere", "no target 'elsewhere'"),
                                            ("reference/bunny", "has no client 'bunny'")])
def test_a_cell_to_rerun_that_the_grid_has_not_is_a_usage_error(tmp_path: Path, name: str, says: str) -> None:
    path = tmp_path / "grid.toml"
    path.write_text('[[target]]\nname = "reference"\n')
    status, said, manifest = grid(path, tmp_path / "g", "--rerun", name, timeout=60)
    assert status == 4 and says in said and manifest == {}, said


@pytest.mark.grid
def test_a_new_round_runs_every_cell_again_into_the_same_lake(tmp_path: Path) -> None:
    path = tmp_path / "grid.toml"
    path.write_text('select = "ACK-03"\n[[target]]\nname = "reference"\n')
    out = tmp_path / "g"
    assert grid(path, out)[0] == 0
    status, said, manifest = grid(path, out, "--new-round")
    assert status == 0, said
    ids = [r["targets"]["reference"]["cells"]["raw"]["run_id"] for r in manifest["rounds"]]
    assert len(ids) == 2 and ids[0] != ids[1]
    assert sorted(p.name for p in (out / "lake" / "runs").iterdir()) == sorted(f"run={i}" for i in ids)


@pytest.mark.grid
@pytest.mark.timeout(CI_GRID_SECONDS + 60)
def test_the_ci_grid_runs_every_target_and_builds_its_pages(tmp_path: Path) -> None:
    """grids/ci.toml: every target starts and answers, no cell breaks, and the report of its lake
    has the grid page with a letter for each broker column and a row for each client."""
    from conformance.grid.spec import load

    spec = load(ROOT / "grids" / "ci.toml")
    out = tmp_path / "grid"
    status, said, manifest = grid(ROOT / "grids" / "ci.toml", out, "--parallel", "2", "--report",
                                  timeout=CI_GRID_SECONDS)
    rows = manifest["rounds"][-1]["targets"]
    states = {name: row["state"] for name, row in rows.items()}
    # GarageMQ wedges now and then under the suite (docs/garagemq.md: a consumer on a queue the
    # harness deletes deadlocks it); the run then ends with exit 3 and the grid's row says so.
    # That row is the grid doing its job, so it is accepted for GarageMQ only, with that reason.
    wedged = states.get("garagemq") == "unreachable"
    if wedged:
        assert "broker unreachable" in rows["garagemq"]["reason"], rows["garagemq"]
        states["garagemq"] = "done"
    assert states == {t.name: "done" for t in spec.targets}, said
    cells = {(name, client): cell["exit"] for name, row in rows.items() for client, cell in row["cells"].items()}
    assert set(cells) == {(t.name, c) for t, c in spec.cells()}
    allowed = {("garagemq", "raw"): (0, 1, 3)} if wedged else {}
    assert all(status in allowed.get(cell, (0, 1)) for cell, status in cells.items()), cells  # 1: a deviation found
    assert status in ((0, 1, 2) if wedged else (0, 1)), said
    page = (out / "report" / "grid.html").read_text(encoding="utf-8")
    assert all((out / "cells" / t / c / "junit.xml").exists() for (t, c), status in cells.items() if status in (0, 1))
    judged = len(spec.targets) - wedged  # a wedged GarageMQ left no results in the lake
    assert page.count('class="grid-broker"') >= 3 * judged  # the score, rules and clients tables
    assert all(f'data-client="{c}"' in page for c in {c for t in spec.targets for c in t.clients})


@pytest.mark.grid
def test_a_fault_pinned_in_the_second_round_is_a_regression_on_its_cell(tmp_path: Path) -> None:
    """Two rounds of the reference broker's ACK-04 tests into one lake; in the second, the broker
    accepts a second ack of a settled tag silently (the named fault double_ack_accepted, ACK-04):
    the grid page marks that cell a regression, and no cell whose rule no failure named (the ack
    machine's failure may name ACK-04 among the rules it could not tell apart)."""
    out = tmp_path / "g"
    clean, faulty = tmp_path / "clean.toml", tmp_path / "faulty.toml"
    clean.write_text('select = "ACK-04"\n[[target]]\nname = "reference"\n')
    faulty.write_text('select = "ACK-04"\n[[target]]\nname = "reference"\n'
                      'env = { AMQPC_BROKER_FAULTS = "double_ack_accepted" }\n')
    assert grid(clean, out)[0] == 0
    status, said, manifest = grid(faulty, out, "--new-round", "--report")
    assert status == 1, said  # the pinned fault fails ACK-04
    page = (out / "report" / "grid.html").read_text(encoding="utf-8")
    chunks = page.split('<tr data-rule="')[1:]
    rows = {chunk.split('"', 1)[0]: chunk.split("</tr>", 1)[0] for chunk in chunks}
    assert "grid-regression" in rows["ACK-04"], rows["ACK-04"][:400]
    regressions = {rule for rule, row in rows.items() if "grid-regression" in row}
    run_id = manifest["rounds"][-1]["targets"]["reference"]["cells"]["raw"]["run_id"]
    failed = pq.read_table(out / "lake" / "tests" / f"run={run_id}", columns=["failed_rules"]).to_pylist()
    named = {rule for row in failed for rule in row["failed_rules"] or ()}
    assert "ACK-04" in named and regressions <= named, (regressions, named)


@pytest.mark.grid
@pytest.mark.timeout(300)
def test_an_interrupted_grid_keeps_what_finished_and_resumes_with_the_cut_cell(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the grid alone: a cell runs in its own session) while a cell runs: the grid
    passes one SIGINT on, waits for the cell, throws its partial results away and records nothing for
    it, says how to resume and exits 2; run again, it runs that cell (and no other twice)."""
    import signal
    import time

    spec, out = tmp_path / "g.toml", tmp_path / "g"
    spec.write_text('select = "ACK-04"\nclients = ["raw", "pika"]\n[[target]]\nname = "reference"\n')
    # a terminal's Ctrl-C reaches a grid that handles SIGINT as Python does by default; this test may
    # run where SIGINT is ignored (a job a non-interactive shell started in the background: its
    # children inherit SIG_IGN, and Python then installs no KeyboardInterrupt handler), so the grid
    # process sets Python's handler before it starts (its cells then inherit SIGINT at its default)
    boot = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "runpy.run_module('conformance.cli', run_name='__main__', alter_sys=True)")
    grid_proc = subprocess.Popen([sys.executable, "-c", boot, "grid", str(spec), "--out", str(out)],
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    manifest = out / "grid.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # polled: the grid writes its manifest as each cell ends
        cells = json.loads(manifest.read_text())["rounds"][-1]["targets"].get("reference", {}).get("cells", {}) \
            if manifest.exists() else {}
        if "raw" in cells:
            break
        time.sleep(0.2)
    assert "raw" in cells, "the first cell did not finish within 120 s"
    second = out / "cells" / "reference" / "pika"
    while not second.exists() and time.monotonic() < deadline:  # the second cell's run has started
        time.sleep(0.05)
    assert second.exists(), "the second cell did not start"
    grid_proc.send_signal(signal.SIGINT)
    stdout, stderr = grid_proc.communicate(timeout=150)
    assert grid_proc.returncode == 2, stdout + stderr
    assert "interrupted: the cells that finished are in" in stdout, stdout
    row = json.loads(manifest.read_text())["rounds"][-1]["targets"]["reference"]
    assert set(row["cells"]) == {"raw"} and row["state"] == "interrupted", row
    assert not (out / "cells" / "reference" / "pika").exists()
    status, said, again = grid(spec, out)
    assert status == 0, said
    cells = again["rounds"][-1]["targets"]["reference"]["cells"]
    assert set(cells) == {"raw", "pika"} and cells["raw"] == row["cells"]["raw"]  # raw not run again
    assert len(again["rounds"]) == 1

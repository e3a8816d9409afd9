"""The other `amqp-conformance` subcommands (`broker`, `report`, `--help`) and `--select` parsing."""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.catalogue.selection import Selection, parse_selection
from conformance.cli import COMMANDS, build_parser, main
from conformance.drivers.raw import RawClient


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        return int(placeholder.getsockname()[1])


def _subparser(name: str) -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = commands.choices[name]
    return parser


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert all(command.name in out for command in COMMANDS)
    assert {c.name for c in COMMANDS} == {"run", "baseline", "rules", "clients", "grid", "record", "report",
                                         "broker", "preflight"}
    assert "from a results directory" in out and "directories" not in out  # `report` takes one


def test_run_help_states_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "3 broker unreachable, down, or authentication refused" in out
    assert 'wrong user or password in --broker-url prints "authentication refused"' in out


def test_broker_command_serves_amqp_with_the_reference_broker_options() -> None:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "conformance.cli", "broker", "--port", str(port),
                                "--timeout-mode", "legacy", "--log-level", "WARNING"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with RawClient(f"amqp://guest:guest@127.0.0.1:{port}/", timeout=2.0) as client:
                    assert client.server_properties["product"] == "amqp-conformance reference broker"
                    break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, process.communicate()
                time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(10)


def test_broker_help_is_the_reference_broker_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["broker", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: amqp-conformance broker") and "--legacy-ruleset" in out


def test_report_command_is_the_report_entry_point(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--spark-master" in help_text
    run_options = {a for action in _subparser("run")._actions for a in action.option_strings}
    named = re.findall(r"amqp-conformance run (--[a-z-]+)", help_text)
    assert named and set(named) <= run_options  # it names only options `run` has
    assert main(["report", "/nonexistent/results", "--out", "x"]) == 4
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "not a directory" in lines[0]


def test_selection_by_area_and_rule() -> None:
    selection = parse_selection(["qos,ACK-03", " CCN-01 "])
    assert selection == Selection(frozenset({"qos"}), frozenset({"ACK-03", "CCN-01"}))
    assert selection.keeps(["QOS-09"]) and selection.keeps(["ACK-01", "ACK-03"]) and selection.keeps(["NOPE", "CCN-01"])
    assert not selection.keeps(["ACK-01"]) and not selection.keeps([])
    assert not parse_selection([]) and selection.describe() == "qos ACK-03 CCN-01"
    with pytest.raises(ValueError, match="--select 'ack-03': neither an area"):
        parse_selection(["ack-03"])  # rule IDs are exact


def test_record_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["record", "--out", str(tmp_path)]) == 4
    assert "--listen" in capsys.readouterr().err
    assert main(["record", "--out", str(tmp_path), "--pcap", str(tmp_path / "none.pcap")]) == 4
    assert main(["record", "--out", str(tmp_path), "--listen", "nowhere", "--upstream", "amqp://h:1"]) == 4
    assert "HOST:PORT" in capsys.readouterr().err

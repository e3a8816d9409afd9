"""GarageMQ for tests and by hand: start one on free ports, run the suite against it, stop it.

Responsibility: everything the project needs to drive the Debian package `garagemq` (a Go
AMQP 0-9-1 broker) without touching the system-wide instance (docs/design.md).

Rules:
- Each broker gets a copy of /etc/garagemq/config.yaml whose `tcp.port`, `admin.port` and
  `db.defaultPath` are changed: free ports (its defaults, 5672/15672, are RabbitMQ's) and a
  fresh db directory (it keeps queues on disk across runs).
- The process runs under `timeout -s KILL <lifetime>`, in its own process group: it dies at
  `stop()`, and on its own after `lifetime` seconds even if this process is killed first.
- `start()` waits, with a deadline, for an AMQP `connection.start` on the port (not merely an
  open socket); a broker that exits or does not answer in time raises `GarageMQError` with the
  tail of its log. A port taken between choosing and binding is retried on new ports.
- `run_suite()` runs `pytest --broker-url URL` in a subprocess under a hard timeout; a run that
  hits it is killed (its whole process group) and reported as `timed_out`, never waited for.

By hand: `.venv/bin/python -m tests.garagemq_broker [--timeout S] [pytest args...]` starts a
GarageMQ, runs the suite against it with the given pytest arguments, stops it and exits with
pytest's status (124 when the hard timeout ended the run).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tests.conftest import free_port

DEFAULT_CONFIG = Path("/etc/garagemq/config.yaml")
USER, PASSWORD = "guest", "guest"  # the package's config: user guest, md5 of "guest"
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
EXIT_TIMED_OUT = 124
ROOT = Path(__file__).resolve().parent.parent


class GarageMQError(RuntimeError):
    """GarageMQ could not be started (missing, exited, or never answered)."""


def executable() -> str | None:
    """The garagemq binary on PATH (or the Debian package's path), None when not installed."""
    found = shutil.which("garagemq")
    if found:
        return found
    return "/usr/bin/garagemq" if os.access("/usr/bin/garagemq", os.X_OK) else None


def available() -> bool:
    """True when the binary and the package's config are both present."""
    return executable() is not None and DEFAULT_CONFIG.is_file()


def rewrite_config(text: str, changes: dict[tuple[str, str], str]) -> str:
    """`text` (GarageMQ's YAML: top-level sections with indented `key: value` lines) with the
    value of each (section, key) in `changes` replaced. Every change must apply exactly once."""
    out, section, done = [], None, set()
    line_re = re.compile(r"^(\s+)([A-Za-z_]\w*):(\s*)([^#\n]*?)(\s*#.*)?$")
    for line in text.splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            section = line.split(":", 1)[0].strip()
        elif section is not None and (m := line_re.match(line)) and (section, m.group(2)) in changes:
            key = (section, m.group(2))
            if key in done:
                raise ValueError(f"{section}.{m.group(2)} appears twice in the config")
            line = f"{m.group(1)}{m.group(2)}: {changes[key]}"
            done.add(key)
        out.append(line)
    missing = set(changes) - done
    if missing:
        raise ValueError(f"not in the config: {', '.join(f'{s}.{k}' for s, k in sorted(missing))}")
    return "\n".join(out) + "\n"


def amqp_answers(host: str, port: int, timeout: float) -> bool:
    """True when the port answers the AMQP 0-9-1 header with a method frame (connection.start)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(PROTOCOL_HEADER)
            data = s.recv(7)
            return len(data) >= 1 and data[0] == 1  # frame type 1: method
    except OSError:
        return False


@dataclass
class GarageMQ:
    """One GarageMQ process on its own ports with its own db directory (see the module rules)."""

    config: Path = DEFAULT_CONFIG
    lifetime: float = 900.0  # hard limit on the process's life, whatever happens to us
    start_timeout: float = 15.0
    host: str = "127.0.0.1"
    port: int = 0
    admin_port: int = 0
    workdir: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    crashed: int | None = None  # set by stop(): the exit status if it had ended by itself
    last_log: str = ""

    @property
    def url(self) -> str:
        return f"amqp://{USER}:{PASSWORD}@{self.host}:{self.port}/"

    @property
    def log_path(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "garagemq.log"

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def start(self, attempts: int = 3) -> GarageMQ:
        binary = executable()
        if binary is None or not self.config.is_file():
            raise GarageMQError(f"garagemq is not installed (binary or {self.config} missing)")
        self.workdir = Path(tempfile.mkdtemp(prefix="amqpc-garagemq-"))
        error: GarageMQError | None = None
        for _ in range(attempts):
            try:
                self._start_once(binary)
                return self
            except GarageMQError as exc:
                error = exc
                self._kill()
                if "address already in use" not in str(exc):
                    break
        self.stop()
        assert error is not None
        raise error

    def _start_once(self, binary: str) -> None:
        assert self.workdir is not None
        self.port, self.admin_port = free_port(), free_port()
        while self.admin_port == self.port:
            self.admin_port = free_port()
        db = self.workdir / "db"
        shutil.rmtree(db, ignore_errors=True)
        db.mkdir()
        conf = self.workdir / "config.yaml"
        conf.write_text(rewrite_config(self.config.read_text(), {
            ("tcp", "ip"): self.host, ("tcp", "port"): str(self.port),
            ("admin", "ip"): self.host, ("admin", "port"): str(self.admin_port),
            ("db", "defaultPath"): str(db)}))
        timeout_bin = shutil.which("timeout")
        command = [binary, "--config", str(conf), "--log-level", "warning"]
        if timeout_bin:
            command = [timeout_bin, "-s", "KILL", str(int(self.lifetime)), *command]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if amqp_answers(self.host, self.port, 1.0):
                return
            time.sleep(0.05)
        tail = self.log_tail()
        state = (f"exited with status {self.process.returncode}" if self.process.poll() is not None
                 else f"no AMQP answer on port {self.port} within {self.start_timeout:.0f} s")
        raise GarageMQError(f"garagemq {state}; log:\n{tail}")

    def _kill(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)

    def died(self) -> int | None:
        """The exit status if the broker ended by itself (crashed), else None."""
        return None if self.process is None else self.process.poll()

    def stop(self) -> None:
        """Kill the process (group) and remove its directory (the log's tail stays in
        `last_log`); safe to call twice."""
        if self.workdir is not None:
            self.crashed = self.died()
            self.last_log = self.log_tail(40)
        self._kill()
        workdir, self.workdir = self.workdir, None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    def __enter__(self) -> GarageMQ:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class SuiteRun:
    """What a suite run in a subprocess ended with."""

    returncode: int  # pytest's status; EXIT_TIMED_OUT when the hard timeout killed it
    output: str
    duration: float
    timed_out: bool = False


def run_suite(url: str, args: Sequence[str], timeout: float, python: str = sys.executable) -> SuiteRun:
    """`pytest --broker-url URL -p no:randomly ARGS` in a subprocess (own process group, cwd =
    the repository) under a hard `timeout`; the output is stdout and stderr together."""
    command = [python, "-m", "pytest", "--broker-url", url, "-p", "no:randomly", *args]
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        timed_out = False
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        out.seek(0)
        output = out.read().decode(errors="replace")
    code = EXIT_TIMED_OUT if timed_out else process.returncode
    return SuiteRun(code, output, time.monotonic() - started, timed_out)


# -- a campaign: the suite across as many fresh brokers as it takes ---------------------------
NOT_RUN_PREFIXES = ("broker wedged", "broker unreachable")


@dataclass(frozen=True)
class Verdict:
    """One test's verdict as the plugin recorded it (a row of the results' tests table)."""

    test_id: str
    rule_ids: tuple[str, ...]
    area: str
    verdict: str
    phase: str
    message: str
    reply: str  # "channel 406 (60/80)" or ""
    round: int
    downed_broker: bool = False  # the broker went down during (or right after) this test

    @property
    def not_run(self) -> bool:
        """Skipped by the plugin because the broker was already down: run it again."""
        return self.verdict == "broken" and self.phase == "setup" and self.message.startswith(NOT_RUN_PREFIXES)


def read_verdicts(results_dir: Path, run_id: str, round_no: int) -> list[Verdict]:
    """The tests of one run in the order they started. The last test that ran before the first
    one the plugin skipped as "broker down" is marked `downed_broker`: the plugin judges a test
    before it probes the broker, so that test may carry a verdict such as non-strict or passed
    although the broker died or wedged under it."""
    from conformance.results.parts import read_table

    if not (results_dir / "tests" / f"run={run_id}").is_dir():
        return []
    rows = sorted(read_table(results_dir, "tests", run_id).to_pylist(), key=lambda r: r["started"])
    out = []
    for row in rows:
        reply = ""
        if row["reply_code"] is not None:
            reply = f"{row['reply_scope']} {row['reply_code']} ({row['reply_class_id']}/{row['reply_method_id']})"
        out.append(Verdict(row["test_id"], tuple(row["rule_ids"]), row["area"], row["verdict"], row["phase"],
                           row["message"] or "", reply, round_no))
    first_skipped = next((i for i, v in enumerate(out) if v.not_run), None)
    if first_skipped:  # None: the broker never went down; 0: it was down before the first test
        culprit = max(i for i in range(first_skipped) if not out[i].not_run)
        out[culprit] = replace(out[culprit], downed_broker=True)
    return out


@dataclass
class Round:
    """One fresh GarageMQ and one suite run against it."""

    number: int
    run_id: str
    run: SuiteRun
    broker_exit: int | None  # the broker's own exit status when it crashed during the run
    broker_log: str
    verdicts: list[Verdict]

    @property
    def downed_by(self) -> Verdict | None:
        return next((v for v in self.verdicts if v.downed_broker), None)


@dataclass
class Campaign:
    """The suite run round after round, each on a fresh broker, until every test has a verdict
    of its own (or the budget is spent)."""

    rounds: list[Round]
    final: dict[str, Verdict]  # test id -> its last real verdict
    duration: float
    budget_spent: bool

    def counts(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {}
        for v in self.final.values():
            per_area = table.setdefault(v.area, {})
            per_area[v.verdict] = per_area.get(v.verdict, 0) + 1
        return table

    @property
    def deviations(self) -> list[Verdict]:
        """Failed and broken tests, and every test under which the broker went down."""
        return sorted((v for v in self.final.values() if v.verdict in ("failed", "broken") or v.downed_broker),
                      key=lambda v: (v.rule_ids, v.test_id))

    @property
    def not_run(self) -> list[str]:
        return sorted(t for t, v in self.final.items() if v.not_run)


def run_campaign(args: Sequence[str], results_dir: Path, *, budget: float = 600.0, max_rounds: int = 12,
                 round_timeout: float | None = None) -> Campaign:
    """Run the suite (pytest `args`: options and paths) against a fresh GarageMQ; while the
    plugin reports the broker wedged or gone (exit 3), start another fresh GarageMQ and run only
    the tests it could not run. Every round and the whole campaign stay within `budget` seconds.
    The test during which the broker went down keeps its verdict (it is not run again)."""
    started = time.monotonic()
    options = [a for a in args if a.startswith("-")]  # positional paths are replaced by node ids
    rounds: list[Round] = []
    final: dict[str, Verdict] = {}
    todo: list[str] = list(args)
    budget_spent = False
    for number in range(1, max_rounds + 1):
        left = budget - (time.monotonic() - started)
        if left < 10:
            budget_spent = True
            break
        limit = min(left, round_timeout or left)
        run_id = f"garagemq-round-{number}-{os.getpid()}-{int(time.time())}"
        with GarageMQ(lifetime=limit + 60) as broker:
            run = run_suite(broker.url, ["--results-dir", str(results_dir), "--run-id", run_id, *todo], limit)
        verdicts = read_verdicts(results_dir, run_id, number)
        rounds.append(Round(number, run_id, run, broker.crashed, broker.last_log, verdicts))
        for v in verdicts:
            if not (v.not_run and v.test_id in final):
                final[v.test_id] = v
        again = [v.test_id for v in verdicts if v.not_run]
        if run.timed_out:
            budget_spent = True
            break
        if run.returncode != 3 or not again:
            break
        todo = [*options, *again]
    return Campaign(rounds, final, time.monotonic() - started, budget_spent)


def markdown(campaign: Campaign) -> str:
    """The campaign as Markdown: rounds, verdict counts per area, every deviation."""
    from conformance.catalogue.rules import AREAS
    from conformance.results.verdicts import Verdict

    lines = ["| round | tests | exit | duration | broker |", "|---|---|---|---|---|"]
    for r in campaign.rounds:
        broker = "alive"
        if r.broker_exit is not None:
            broker = f"crashed (exit {r.broker_exit})"
        elif r.run.returncode == 3:
            broker = "wedged"
        culprit = r.downed_by
        if culprit is not None:
            broker += f" during/after `{culprit.test_id.split('::')[-1]}`"
        exit_text = "killed (hard timeout)" if r.run.timed_out else str(r.run.returncode)
        lines.append(f"| {r.number} | {len(r.verdicts)} | {exit_text} | {r.run.duration:.1f} s | {broker} |")
    verdict_names = [v.value for v in Verdict]
    counts = campaign.counts()
    lines += ["", "| area | " + " | ".join(verdict_names) + " |", "|---" * (len(verdict_names) + 1) + "|"]
    for area in [a for a in AREAS if a in counts] + sorted(set(counts) - set(AREAS)):
        lines.append(f"| {area} | " + " | ".join(str(counts[area].get(n, 0)) for n in verdict_names) + " |")
    lines += ["", "| rules | test | verdict | reply | message |", "|---|---|---|---|---|"]
    for v in campaign.deviations:
        message = v.message.splitlines()[0] if v.message else ""
        message = message.replace("|", "\\|")[:300]
        lines.append(f"| {', '.join(v.rule_ids)} | `{v.test_id.split('::')[-1]}` | {v.verdict}"
                     f"{' (broker went down)' if v.downed_broker else ''} | {v.reply} | {message} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.garagemq_broker",
                                     description="Run the conformance suite against a fresh GarageMQ.")
    parser.add_argument("--timeout", type=float, default=600.0, help="hard limit of the whole run (s)")
    parser.add_argument("--keep", action="store_true", help="print the URL and keep GarageMQ until Ctrl-C")
    parser.add_argument("--campaign", metavar="DIR", type=Path, default=None,
                        help="restart a fresh GarageMQ whenever it wedges or dies and run the tests it could "
                             "not run; write the results to DIR and a Markdown summary to DIR/summary.md")
    args, rest = parser.parse_known_args(argv)
    if args.campaign is not None:
        campaign = run_campaign(rest, args.campaign, budget=args.timeout)
        for r in campaign.rounds:
            sys.stdout.write(r.run.output[-3000:])
            if r.broker_exit is not None:
                print(f"garagemq crashed (exit {r.broker_exit}); its log ends:\n{r.broker_log}")
        text = markdown(campaign)
        (args.campaign / "summary.md").write_text(text)
        print(text)
        print(f"campaign: {len(campaign.rounds)} rounds, {campaign.duration:.1f} s"
              f"{', budget spent' if campaign.budget_spent else ''}", flush=True)
        return EXIT_TIMED_OUT if campaign.budget_spent else campaign.rounds[-1].run.returncode
    with GarageMQ(lifetime=args.timeout + 60) as broker:
        print(f"garagemq at {broker.url} (admin port {broker.admin_port}, dir {broker.workdir})", flush=True)
        if args.keep:
            with contextlib.suppress(KeyboardInterrupt):
                assert broker.process is not None
                broker.process.wait()
                print(f"garagemq ended by itself (exit {broker.died()}); its log ends:\n{broker.log_tail(40)}")
            return 0
        run = run_suite(broker.url, rest, args.timeout)
    sys.stdout.write(run.output)
    if broker.crashed is not None:
        print(f"garagemq crashed (exit {broker.crashed}); its log ends:\n{broker.last_log}")
    verdict = "killed by the hard timeout" if run.timed_out else f"exit status {run.returncode}"
    print(f"\nsuite against garagemq: {verdict} after {run.duration:.1f} s", flush=True)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())

"""Socket fuzzing of the reference broker: the cases of tests/reliability/fuzz_cases.py, each on
a fresh connection over a real socket, with a bystander connection that must keep working.

`python -m tests.reliability.fuzz --count 100000 [--seed S]` starts its own broker subprocess,
prints the count, the outcome table and the broker's VmRSS after warm-up and at the end, and
exits 1 on any failure. (tests/reliability/fuzz_engine.py fuzzes the sans-IO engine in process.)

Rules:
- Every socket wait has a deadline; a broker that neither answers nor closes within it gets the
  outcome "timeout" (a hang). After a connection.close the client answers close-ok and shuts its
  side, and after the close-ok to its own close it shuts its side too (NET-02: the broker leaves
  that to the client), so every case ends with the broker closing the socket.
- A bystander connection, open for the whole run, does a publish/get round trip every
  `health_every` cases and after every batch; a failed one stops the run (`BrokerUnhealthy`).
- Every kind of case gets its share of the count, generated in Hypothesis runs of at most
  `batch` cases taken kind by kind in turn, seeded from one seed: a failure shrinks to a short
  case of its kind, a seed reproduces a run, the fuzzing side's memory stays bounded.
- Memory: the broker subprocess's VmRSS (/proc/<pid>/status) after warm-up and at the end; a
  growth above the bound fails. Its log must hold no ERROR line and no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import random
import socket
import subprocess
import sys
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed

from codec import (
    NEED_DATA,
    PROTOCOL_HEADER,
    BasicGet,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    BasicReturn,
    ChannelClose,
    ChannelOpen,
    CodecError,
    Command,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionStartOk,
    ConnectionTuneOk,
    ContentAssembler,
    FrameReader,
    ProtocolHeader,
    QueueDeclare,
    QueueDeclareOk,
    encode_method,
)
from tests.reliability.fuzz_cases import shares, strategies
from tests.reliability.fuzz_frames import STAGES, Case, Limits

Address = tuple[str, int]
PLAIN = b"\x00guest\x00guest"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STAGE_REPLIES = {"raw": (), "start_ok": ("connection.start",), "tune_ok": ("connection.start", "connection.tune"),
                 "open": ("connection.start", "connection.tune"),
                 "opened": ("connection.start", "connection.tune", "connection.open-ok", "channel.open-ok")}


# -- one case ------------------------------------------------------------------------------
class _Link:
    """One fuzzing connection: bounded reads of whole commands, writes that tolerate a close."""

    def __init__(self, address: Address, timeout: float) -> None:
        self.deadline = time.monotonic() + timeout
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader, self.assembler = FrameReader(frame_max=0), ContentAssembler()
        self.shut = False

    def send(self, data: bytes, cuts: Sequence[int] = ()) -> None:
        for a, b in itertools.pairwise([0, *cuts, len(data)]):
            if self.shut or a == b:
                continue
            try:
                self.sock.sendall(data[a:b])
            except OSError:
                self.shut = True  # the broker closed first: what it sent is still readable

    def shutdown(self) -> None:
        if not self.shut:
            self.shut = True
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_WR)

    def next(self) -> Command | ProtocolHeader | None:
        """The next command or protocol header; None at EOF; TimeoutError at the deadline."""
        while True:
            frame = self.reader.next_frame()
            if isinstance(frame, ProtocolHeader):
                return frame
            if frame is not NEED_DATA:
                command = self.assembler.feed(frame)  # type: ignore[arg-type]
                if isinstance(command, Command):
                    return command
                continue  # a heartbeat, or a command still incomplete
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                raise
            except OSError:
                data = b""  # NET-01: a reset after the close is the end of the connection
            if not data:
                return None
            self.reader.receive_data(data)


def handshake(case: Case) -> bytes:
    """The client's side of the handshake up to the case's stage."""
    steps = [PROTOCOL_HEADER, encode_method(0, ConnectionStartOk({}, "PLAIN", PLAIN, "en_US")),
             encode_method(0, ConnectionTuneOk(*case.tune, 0)),
             encode_method(0, ConnectionOpen(virtual_host="/")) + encode_method(1, ChannelOpen())]
    return b"".join(steps[:STAGES.index(case.stage)])


def event(item: Command | ProtocolHeader, case: Case) -> str:
    if isinstance(item, ProtocolHeader):
        return "refused" if item.raw == PROTOCOL_HEADER else f"header {bytes(item.raw)!r}"
    m = item.method
    if isinstance(m, ConnectionClose):
        return f"close {m.reply_code}"
    if isinstance(m, ChannelClose):
        return f"ch-close {m.reply_code}"
    if isinstance(m, BasicReturn):
        same = (item.properties, item.body) == case.content
        return f"return {m.reply_code}" + ("" if same else " with other content")
    return str(m.NAME)


def run_case(address: Address, case: Case, timeout: float = 10.0) -> str:
    """Send one case on a fresh connection; the broker's reaction as an outcome string."""
    try:
        link = _Link(address, timeout)
    except OSError as exc:
        raise BrokerUnhealthy(f"cannot connect to the broker: {exc}") from None
    events: list[str] = []
    replies = list(STAGE_REPLIES[case.stage])
    try:
        if case.pipelined:
            prefix = handshake(case)
            link.send(prefix + case.data, [len(prefix) + c for c in case.cuts])
        else:
            link.send(handshake(case))
            while replies:
                if wrong := _not_reply(link.next(), replies.pop(0), case):
                    return wrong
            link.send(case.data, case.cuts)
        if case.halfclose:
            link.shutdown()
        while (item := link.next()) is not None:
            if replies:
                if wrong := _not_reply(item, replies.pop(0), case):
                    return wrong
                continue
            events.append(event(item, case))
            if isinstance(item, Command) and isinstance(item.method, ConnectionClose):
                link.send(encode_method(0, ConnectionCloseOk()))
                link.shutdown()
            elif isinstance(item, Command) and isinstance(item.method, ConnectionCloseOk):
                link.shutdown()  # NET-02: after close-ok to our close, ending the socket is ours
            elif case.settle and len(events) == case.settle:
                link.send(encode_method(0, ConnectionClose(200, "bye", 0, 0)))
    except TimeoutError:
        events.append("timeout")
    except CodecError as exc:
        events.append(f"undecodable bytes from the broker: {exc.reason}")
    finally:
        link.sock.close()
    return " > ".join(events) or "silent"


def _not_reply(item: Command | ProtocolHeader | None, name: str, case: Case) -> str:
    """"" when `item` is the handshake reply `name`, else the outcome that says what came."""
    if isinstance(item, Command) and name == item.method.NAME:
        return ""
    return f"handshake: {'eof' if item is None else event(item, case)} instead of {name}"


# -- a run -----------------------------------------------------------------------------------
class BrokerUnhealthy(BaseException):
    """The broker failed the bystander's round trip or died: stop the run, shrinking would not
    help (a BaseException, so Hypothesis does not take it for the case's failure)."""


@dataclass
class Report:
    seed: int
    count: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    round_trips: int = 0
    rss_kib: dict[str, int] = field(default_factory=dict)  # "after warm-up", "at the end"
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    def lines(self) -> list[str]:
        out = [f"seed {self.seed}: {self.count} cases in {self.seconds:.1f} s, {self.round_trips} bystander "
               f"round trips, {len(self.failures)} failures", "", f"{'cases':>8}  outcome"]
        out += [f"{n:>8}  {outcome}" for outcome, n in self.outcomes.most_common()]
        out += ["", f"{'cases':>8}  kind"] + [f"{n:>8}  {kind}" for kind, n in sorted(self.kinds.items())]
        if self.rss_kib:
            out += [""] + [f"broker VmRSS {name}: {kib / 1024:.1f} MiB" for name, kib in self.rss_kib.items()]
        return out + [f"FAILURE: {text}" for text in self.failures]


class Bystander:
    """A healthy connection kept open during the run: publish + get on its own queue."""

    def __init__(self, address: Address, timeout: float) -> None:
        from conformance.drivers.raw import RawClient

        self.client = RawClient(f"amqp://guest:guest@{address[0]}:{address[1]}/", timeout=timeout).connect()
        self.tune = self.client.tune
        self.ch = self.client.channel()
        self.queue = f"fuzz-bystander-{uuid.uuid4().hex[:12]}"
        self.client.rpc(self.ch, QueueDeclare(queue=self.queue, exclusive=True), QueueDeclareOk)
        self.n = 0

    def round_trip(self) -> None:
        self.n += 1
        body = f"round trip {self.n}".encode()
        try:
            self.client.send(self.ch, BasicPublish(routing_key=self.queue), BasicProperties(), body)
            got = self.client.rpc(self.ch, BasicGet(queue=self.queue, no_ack=True))
        except AssertionError as exc:  # the driver's NoReply / Closed / ConnectionLost
            raise BrokerUnhealthy(f"bystander round trip {self.n} failed: {exc}") from None
        if not isinstance(got.method, BasicGetOk) or got.body != body:
            raise BrokerUnhealthy(f"bystander round trip {self.n}: got {got.method!r} {got.body!r}")


def fuzz(address: Address, count: int, seed: int | None = None, *, batch: int = 500, health_every: int = 50,
         timeout: float = 10.0, on_case: Callable[[int], None] | None = None, max_failures: int = 5,
         kinds: Collection[str] = ()) -> Report:
    """Run `count` generated cases against the broker at `address` (only `kinds` when given),
    every kind its share in Hypothesis runs of at most `batch` cases taken in turn; failures go
    in the report."""
    seed = random.SystemRandom().randrange(2**32) if seed is None else seed
    report, started = Report(seed), time.monotonic()
    bystander = Bystander(address, timeout)
    tune = bystander.tune
    chosen = strategies(Limits() if tune is None else Limits(tune.channel_max, tune.frame_max))
    chosen = {kind: strategy for kind, strategy in chosen.items() if not kinds or kind in kinds}
    remaining = shares(count, list(chosen))

    def one(case: Case) -> None:
        outcome = run_case(address, case, timeout)
        report.count += 1
        report.outcomes[outcome] += 1
        report.kinds[case.kind] += 1
        if on_case is not None:
            on_case(report.count)
        if report.count % health_every == 0:
            bystander.round_trip()
            report.round_trips += 1
        assert outcome in case.expect, f"{case!r} -> got {outcome!r}"

    try:
        for turn in itertools.count():
            if not any(remaining.values()) or len(report.failures) >= max_failures:
                break
            for kind, strategy in chosen.items():
                size = min(batch, remaining[kind])
                remaining[kind] -= size
                if size:
                    _run_batch(one, strategy, size, zlib.crc32(f"{seed}/{kind}/{turn}".encode()), report)
            bystander.round_trip()
            report.round_trips += 1
    except BrokerUnhealthy as exc:
        report.failures.append(str(exc))
    finally:
        bystander.client.close()
        report.seconds = time.monotonic() - started
    return report


def _run_batch(one: Callable[[Case], None], strategy: Any, size: int, batch_seed: int, report: Report) -> None:
    test = hypothesis_seed(batch_seed)(settings(
        max_examples=size, database=None, deadline=None, print_blob=False, phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, report_multiple_bugs=False,
    )(given(case=strategy)(one)))
    try:
        test()
    except Exception as exc:  # already shrunk; one that did not fail again comes as a group
        inner = exc.exceptions[0] if isinstance(exc, BaseExceptionGroup) else exc
        flaky = " (did not fail again on a rerun)" if inner is not exc else ""
        report.failures.append(f"{str(inner).splitlines()[0]}{flaky}")


# -- the broker as a subprocess, the command line ------------------------------------------
class BrokerProcess:
    """`python -m reference_broker --port 0`, its log drained by a thread: the address comes
    from the "listening on" line; ERROR lines and tracebacks are kept as evidence of a crash."""

    def __init__(self, ready_timeout: float = 30.0) -> None:
        cmd = [sys.executable, "-m", "reference_broker", "--port", "0", "--log-level", "INFO"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        self.address: Address = ("", 0)
        self.errors: list[str] = []
        self._ready = threading.Event()
        self._drain = threading.Thread(target=self._read_log, name="broker-log", daemon=True)
        self._drain.start()
        if not self._ready.wait(ready_timeout):
            self.stop()
            raise RuntimeError(f"the broker did not listen within {ready_timeout:.0f} s: {self.errors}")

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if not self._ready.is_set() and " listening on " in line:
                host, _, port = line.split(" listening on ", 1)[1].split()[0].rpartition(":")
                self.address = (host, int(port))
                self._ready.set()
            elif _is_error(line) and len(self.errors) < 50:
                self.errors.append(line.rstrip())

    def rss_kib(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise BrokerUnhealthy(f"the broker exited with {self.proc.returncode}: {self.errors[-5:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._drain.join(timeout=10)


def _is_error(line: str) -> bool:
    """An ERROR/CRITICAL record (the format is "<date> <time> <LEVEL> <logger>: …") or a traceback."""
    fields = line.split(" ", 3)
    return line.startswith("Traceback (most recent call last)") or (
        len(fields) > 2 and fields[2] in ("ERROR", "CRITICAL"))


def run_with_subprocess(count: int, seed: int | None = None, *, warmup: int | None = None,
                        rss_bound_mib: float = 16.0, progress: int = 0, **options: Any) -> Report:
    """The whole check: a broker subprocess, `count` cases, VmRSS after `warmup` cases and at
    the end (a growth above `rss_bound_mib` fails), no ERROR line or traceback in its log."""
    broker, began = BrokerProcess(), time.monotonic()
    warmup = max(count // 4, 1) if warmup is None else warmup  # the allocator's high water first
    rss: dict[str, int] = {}

    def on_case(n: int) -> None:
        if n == warmup:
            rss["after warm-up"] = broker.rss_kib()
        if n % 500 == 0:
            broker.check_alive()
        if progress and n % progress == 0:
            print(f"{n} cases, {time.monotonic() - began:.0f} s, broker VmRSS {broker.rss_kib() / 1024:.1f} MiB",
                  file=sys.stderr, flush=True)

    try:
        report = fuzz(broker.address, count, seed, on_case=on_case, **options)
        broker.check_alive()
        rss["at the end"] = broker.rss_kib()
    except BrokerUnhealthy as exc:
        report = Report(seed or 0, failures=[str(exc)])
    finally:
        broker.stop()
    report.rss_kib = rss
    if len(rss) == 2 and rss["at the end"] - rss["after warm-up"] > rss_bound_mib * 1024:
        growth = (rss["at the end"] - rss["after warm-up"]) / 1024
        report.failures.append(f"broker VmRSS grew by {growth:.1f} MiB after warm-up (bound {rss_bound_mib} MiB)")
    report.failures += [f"broker log: {line}" for line in broker.errors]
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.reliability.fuzz", description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--count", type=int, default=1000, help="cases to run (default 1000)")
    p.add_argument("--seed", type=int, help="reproduce a run (the report's first line has it)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds one case may take (default 10)")
    p.add_argument("--rss-bound-mib", type=float, default=16.0, help="allowed VmRSS growth (default 16)")
    p.add_argument("--progress", type=int, default=0, metavar="N", help="a progress line every N cases")
    ns = p.parse_args(argv)
    report = run_with_subprocess(ns.count, ns.seed, timeout=ns.timeout, rss_bound_mib=ns.rss_bound_mib,
                                 progress=ns.progress)
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

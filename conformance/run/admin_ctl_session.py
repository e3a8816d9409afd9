"""One `rabbitmqctl eval` kept open for a run's admin calls (conformance.run.admin_ctl).

Responsibility: `CtlSession` runs a single `rabbitmqctl eval` whose expression loops on the
broker node: it reads one Erlang expression per line from rabbitmqctl's standard input,
evaluates it and prints one reply line. Every call after the first costs a line each way in
place of a new Erlang VM (about 1 CPU-s each: a run through rabbitmqctl makes some 450 calls).

Rules:
- The loop runs in the process `rabbitmqctl eval` makes on the node (`rabbit_misc:rpc_call` →
  `rpc:call`, with no timeout from 3.10.8 to 4.3.5); that process's group leader is
  rabbitmqctl's, so `io:get_line` reads rabbitmqctl's standard input and `io:format` writes to
  its standard output. Each request is `erl_eval:exprs` of the line's expression, as
  `rabbitmqctl eval EXPR` does for its argument; the reply is `amqpc-reply {ok, Value}` or
  `amqpc-reply {Class, Reason}` (`~0p`: one line), or `amqpc-json JSON` for a value
  `{amqpc_json, IoData}`.
- `start` sends `ok.` and waits for its reply (`START_SECONDS` at most): a rabbitmqctl that
  cannot read its standard input (the CLI of RabbitMQ 4.3.6 on Erlang/OTP 28 crashes in
  `prim_tty:read` as soon as anything reads it, its own `eval` without an argument included), a
  command that does not pass standard input on (`docker exec` without `-i`), or one that exits,
  makes `start` return False: the adapter then runs one rabbitmqctl per call, as before.
- A call waits at most the adapter's timeout. A call that gets no reply in time, or a session
  whose rabbitmqctl ended, is an `AdminError` and ends the session (a reply that comes later
  cannot be taken for another call's).
- The end of standard input ends the loop and rabbitmqctl (`close`, or this process exiting:
  the pipe closes with it), so no process is left on the node.
- At most `SLOTS` sessions run on this machine at once (a slot is an flock on a file in
  `SLOT_DIR`, held while the session lives; a process without one runs a command per call).
  Every rabbitmqctl process listens on a port of a range of eleven (RabbitMQ's networking
  guide: the server's distribution port + 10000 to + 10010, `RABBITMQ_CTL_DIST_PORT_MIN/MAX`):
  twelve kept sessions, one per pytest-xdist worker, took them all, and the next plain
  rabbitmqctl command failed "Distribution failed: nodistribution" (seen on RabbitMQ 3.10.8).
  A session unused for `IDLE_SECONDS` ends (`idle_ended`) and frees its slot: the tests that
  use the admin come in bursts, on any worker; a worker that found no free slot tries again at
  its next call.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

from conformance.run.admin_base import AdminError

SLOTS = 3  # sessions at once on this machine: eight of rabbitmqctl's eleven ports stay free
SLOT_DIR = Path(tempfile.gettempdir()) / "amqpc-rabbitmqctl-sessions"
IDLE_SECONDS = 3.0
START_SECONDS = 15.0  # rabbitmqctl's VM start and the first round trip, on a busy machine
REPLY, JSON_REPLY = "amqpc-reply ", "amqpc-json "
LOOP = ("Loop = fun(F) -> case io:get_line('') of eof -> ok; {error, _} -> ok; Line -> "
        "R = try {ok, Toks, _} = erl_scan:string(unicode:characters_to_list(Line)), "
        "{ok, Exprs} = erl_parse:parse_exprs(Toks), {value, V, _} = erl_eval:exprs(Exprs, []), {ok, V} "
        "catch C:E -> {C, E} end, "
        "case R of {ok, {amqpc_json, J}} -> io:format(\"amqpc-json ~s~n\", [J]); "
        "_ -> io:format(\"amqpc-reply ~0p~n\", [R]) end, F(F) end end, Loop(Loop).")


def erl_binary(text: str) -> str:
    """`text` as an Erlang binary literal (UTF-8); no control characters (one request, one line)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError(f"not sent to rabbitmqctl: {text!r} holds a control character")
    return '<<"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"/utf8>>'


class CtlSession:
    """A `rabbitmqctl eval` that evaluates one expression per line (module rules)."""

    def __init__(self, command: list[str], timeout: float) -> None:
        self.command, self.timeout = command, timeout
        self._process: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Lock()
        self._slot: IO[str] | None = None
        self._idle: threading.Timer | None = None
        self.no_slot = False  # start found every slot taken (not a failure of rabbitmqctl)
        self.idle_ended = False  # ended unused for IDLE_SECONDS (not a failure either)

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> bool:
        """Start rabbitmqctl and see one round trip through it; False when that fails or no slot is free."""
        self._slot = take_slot()
        if self._slot is None:
            self.no_slot = True
            return False
        try:
            self._process = subprocess.Popen([*self.command, "eval", LOOP], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                             encoding="utf-8", errors="replace", bufsize=1)
        except OSError:
            self.close()
            return False
        assert self._process.stdout is not None
        threading.Thread(target=self._read, args=(self._process.stdout,), daemon=True,
                         name="amqpc-rabbitmqctl-session").start()
        try:
            self._call("ok.", min(START_SECONDS, self.timeout))
        except AdminError:
            self.close()
            return False
        return True

    def call(self, expression: str) -> str:
        """The `~0p` text of `{ok, Value}`'s Value; AdminError for `{Class, Reason}`."""
        with self._lock:
            try:
                return self._call(expression, self.timeout)
            finally:
                self._idle_timer()

    def call_json(self, expression: str) -> Any:
        """The JSON an expression returning `{amqpc_json, IoData}` printed, decoded."""
        with self._lock:
            try:
                return json.loads(self._call(expression, self.timeout, want=JSON_REPLY))
            finally:
                self._idle_timer()

    def _idle_timer(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        if self._process is not None:
            self._idle = threading.Timer(IDLE_SECONDS, self._end_idle)
            self._idle.daemon = True
            self._idle.start()

    def _end_idle(self) -> None:
        if self._lock.acquire(blocking=False):  # a call in progress keeps it (its end restarts the timer)
            try:
                if self._process is not None:
                    self.idle_ended = True
                    self.close()
            finally:
                self._lock.release()

    def close(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        process, self._process = self._process, None
        if process is not None:
            try:
                if process.stdin is not None:
                    process.stdin.close()
                process.wait(timeout=5.0)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait()
        slot, self._slot = self._slot, None
        if slot is not None:
            slot.close()  # the flock goes with the file

    def _call(self, expression: str, timeout: float, want: str = REPLY) -> str:
        process = self._process
        if process is None or process.stdin is None or process.poll() is not None:
            raise AdminError("rabbitmqctl session: ended")
        try:
            process.stdin.write(expression.strip() + "\n")
            process.stdin.flush()
        except OSError as exc:
            self.close()
            raise AdminError(f"rabbitmqctl session: {exc}") from None
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                self.close()
                raise AdminError(f"rabbitmqctl session: no answer within {timeout:.0f} s") from None
            if line is None:
                self.close()
                raise AdminError("rabbitmqctl session: rabbitmqctl exited")
            if line.startswith(want):
                reply = line[len(want):]
                if want == JSON_REPLY:
                    return reply
                if reply.startswith("{ok,"):
                    return reply[4:-1]
                raise AdminError(f"rabbitmqctl eval: {reply}")
            if line.startswith((REPLY, JSON_REPLY)):  # the other kind: the expression returned the wrong shape
                raise AdminError(f"rabbitmqctl eval: {line}")

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)


def take_slot() -> IO[str] | None:
    """An open slot file whose flock this process holds, or None when all `SLOTS` are taken."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): no session
        return None
    with contextlib.suppress(OSError):
        SLOT_DIR.mkdir(exist_ok=True)
    for number in range(SLOTS):
        try:
            slot = open(SLOT_DIR / f"slot-{number}", "a+")  # noqa: SIM115 - held while the session lives
        except OSError:
            return None
        try:
            fcntl.flock(slot, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            slot.close()
            continue
        return slot
    return None

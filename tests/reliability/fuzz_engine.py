"""The atheris harness: coverage-guided fuzzing of the sans-IO engine (`ServerConnection`, with
its FrameReader, ContentAssembler and the core) in process, no sockets.

`python -m tests.reliability.fuzz_engine -runs=N [-seed=S] [-max_len=512 -len_control=0]`
(libFuzzer's flags). Only `codec` and `reference_broker` are instrumented: `instrument_all()`
would spend minutes on everything else that is loaded.

Rules: the first octet of an input picks the prefix (the whole handshake with channel 1 open,
the protocol header alone, or nothing) and the chunk size the rest is fed in; per input the
engine raises nothing, writes only frames a client can decode, closes connections only with
hard codes and channels only with soft ones (ERR-02), and the core forgets the connection
once its transport is gone.
"""

from __future__ import annotations

import gc
import sys
import types
from typing import Any

from codec import (
    PROTOCOL_HEADER,
    ChannelClose,
    ChannelOpen,
    ConnectionClose,
    ConnectionOpen,
    ConnectionStartOk,
    ConnectionTuneOk,
    FrameReader,
    MethodFrame,
    ReplyCode,
    encode_method,
)
from reference_broker.config import BrokerConfig
from reference_broker.core import BrokerCore, Send
from reference_broker.protocol.connection import CLOSE_GRACE_MS, ServerConnection, Write

INSTRUMENTED = ("codec", "reference_broker")
HANDSHAKE = (PROTOCOL_HEADER + encode_method(0, ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest", "en_US"))
             + encode_method(0, ConnectionTuneOk(2047, 131072, 0)) + encode_method(0, ConnectionOpen(virtual_host="/"))
             + encode_method(1, ChannelOpen()))
_STATE: dict[str, Any] = {"uses": 1000}


def one_input(data: bytes) -> None:
    if _STATE["uses"] >= 1000:  # a fresh core now and then: declared queues pile up
        _STATE.update(core=BrokerCore(BrokerConfig()), uses=0, conn=0)
    _STATE["uses"] += 1
    _STATE["conn"] += 1
    core = _STATE["core"]
    engine, client, now = ServerConnection(_STATE["conn"], core), FrameReader(frame_max=0), 0
    flags = data[0] if data else 0
    stream = (HANDSHAKE if flags & 1 else PROTOCOL_HEADER if flags & 2 else b"") + data[1:]
    step = 1 + (flags >> 2) * 37
    for at in range(0, len(stream), step):
        now += 10
        for out in [*engine.receive_data(stream[at:at + step], now), *engine.tick(now)]:
            client.receive_data(out.data if isinstance(out, Write) else
                                engine.encode(out) if isinstance(out, Send) and out.conn == engine.id else b"")
            for frame in client.frames():  # a CodecError here: the broker wrote garbage
                m = frame.method if isinstance(frame, MethodFrame) else None
                if isinstance(m, ConnectionClose | ChannelClose):
                    assert ReplyCode(m.reply_code).is_hard_error == isinstance(m, ConnectionClose), frame
    engine.tick(now + CLOSE_GRACE_MS)
    engine.transport_lost(now + CLOSE_GRACE_MS)
    assert engine.id not in core.connections, "the core kept a connection that is gone"


def main(argv: list[str] | None = None) -> int:
    import atheris  # type: ignore[import-not-found]

    import reference_broker.server  # noqa: F401  (every module of the broker, loaded to be instrumented)

    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType) and str(obj.__module__).split(".")[0] in INSTRUMENTED:
            atheris.instrument_func(obj)
    atheris.Setup([sys.argv[0], *(sys.argv[1:] if argv is None else argv)], one_input)
    atheris.Fuzz()  # exits the process when the runs are done
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

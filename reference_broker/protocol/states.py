"""Connection states and the handshake's transition table (h11's `_state.py` shape).

Rules: everything that moves a connection from one state to the next is in
`HANDSHAKE`: (state, method class) -> the state after it. A client method not in the table
while the handshake runs is 503 COMMAND_INVALID on the connection; `connection.close` is
accepted in every state. Channel lifecycle states (absent, open, closing) live in the core
(`BrokerCore.apply`, ERR-03/ERR-04) and are checked by the same kind of property test.
"""

from __future__ import annotations

from codec import ConnectionClose, ConnectionOpen, ConnectionStartOk, ConnectionTuneOk

HEADER = "header"  # waiting for the protocol header
START_OK = "start_ok"  # connection.start sent
TUNE_OK = "tune_ok"  # connection.tune sent
OPEN = "open"  # tune-ok received, waiting for connection.open
OPENED = "opened"  # channels may be used
CLOSING = "closing"  # the broker sent connection.close, waiting for close-ok
CLOSED = "closed"

HANDSHAKE: dict[tuple[str, type], str] = {
    (START_OK, ConnectionStartOk): TUNE_OK,
    (TUNE_OK, ConnectionTuneOk): OPEN,
    (OPEN, ConnectionOpen): OPENED,
    (START_OK, ConnectionClose): CLOSED,
    (TUNE_OK, ConnectionClose): CLOSED,
    (OPEN, ConnectionClose): CLOSED,
}
HANDSHAKE_STATES = (START_OK, TUNE_OK, OPEN)

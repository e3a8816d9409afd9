"""Sans-IO protocol engines of the reference broker (connection handshake, framing, close)."""

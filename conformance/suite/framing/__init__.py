"""The framing area: framing, tuning, connection end and heartbeats over the wire."""

"""The ack area: delivery tags and acknowledgements over the wire, and the ack machine."""

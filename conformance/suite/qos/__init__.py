"""The qos area: prefetch limits (basic.qos) over the wire, and the prefetch machine."""

"""RabbitMQ's error texts (RULES.md ERR-04 and the rules that cite them), built in one place.

Rules: each function returns the explanation after "<CONSTANT> - " (ERR-01); the codes and
scopes live with the callers' `AmqpError`.
"""

from __future__ import annotations

from codec.fields import rabbitmq_value_text


def q(name: str, vhost: str) -> str:
    return f"queue '{name}' in vhost '{vhost}'"


def x(name: str, vhost: str) -> str:
    return f"exchange '{name}' in vhost '{vhost}'"


def no_queue(name: str, vhost: str) -> str:
    return f"no {q(name, vhost)}"


def no_exchange(name: str, vhost: str) -> str:
    return f"no {x(name, vhost)}"


def stopped(name: str, vhost: str) -> str:
    return f"{q(name, vhost)} process is stopped by supervisor"  # CLU-04: its node is down


def unknown_tag(tag: int) -> str:
    return f"unknown delivery tag {tag}"  # ACK-03


def locked(name: str, vhost: str) -> str:
    return (f"cannot obtain exclusive access to locked {q(name, vhost)}. It could be originally "
            "declared on another connection or the exclusive property value does not match that "
            "of the original declaration.")


def inequivalent(arg: str, what: str, received: object, current: object) -> str:
    return f"inequivalent arg '{arg}' for {what}: received {_show(received)} but current is {_show(current)}"


def inequivalent_arg(arg: str, what: str, received: object, current: object) -> str:
    """An argument of the table that differs (rabbit_misc:assert_args_equivalence, val/1)."""
    return (f"inequivalent arg '{arg}' for {what}: received {rabbitmq_value_text(received, current)} "
            f"but current is {rabbitmq_value_text(current, received)}")


def _show(value: object) -> str:
    if isinstance(value, bool):
        return f"'{str(value).lower()}'"
    if value is None:
        return "none"
    if isinstance(value, str):
        return f"'{value}'"
    return f"the value '{value}'"


def consumer_timeout(channel: int, timeout_ms: int) -> str:
    """TMO-3x-2 / TMO-4.3-3 ("-1" on 4.3 when the channel closes)."""
    return (f"delivery acknowledgement on channel {channel} timed out. Timeout value used: "
            f"{timeout_ms} ms. This timeout value can be configured, see consumers doc guide to "
            "learn more")


MEMORY, DISK = "memory", "disk"
RESOURCES = (MEMORY, DISK)  # resource alarms (core/alarms.py)


def blocked_reason(alarms: frozenset[str]) -> str:
    """rabbit_reader blocked_by_message (ALM-01): "low on memory", "low on disk", "low on memory & disk"."""
    return "low on " + " & ".join(r for r in RESOURCES if r in alarms)

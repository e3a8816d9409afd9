"""Which client libraries each check runs through: every library of the client registry, but those
a check names with the reason they cannot express it (the `clients` mark, plugin/through_clients).

A step a library cannot express at all (its driver or adapter answers `Unsupported`, nothing is
sent) needs no entry here: the test is then not-applicable with the library's own reason.
"""

from __future__ import annotations

import pytest

from conformance.drivers.registry import REGISTRY

LIBRARIES = tuple(REGISTRY)


def clients_but(why: dict[str, str]) -> pytest.MarkDecorator:
    """`clients` for every library but those `why` names (registry names), each with the reason it
    cannot express the check."""
    unknown = set(why) - set(LIBRARIES)
    assert not unknown, f"not libraries of the client registry: {sorted(unknown)}"
    return pytest.mark.clients(*(n for n in LIBRARIES if n not in why), why=dict(why))


# rabbitmq-c 0.11's default client-properties claim only authentication_failure_close: the broker
# does not tell it of a cancel it makes itself (CCN-02 is owed to clients that claim
# consumer_cancel_notify), and an application of it has no callback for one it was not told of
NO_CANCEL_NOTIFY = {"rabbitmq-c": "its client-properties do not claim consumer_cancel_notify (rabbitmq-c 0.11 "
                                  "claims authentication_failure_close only), so the broker does not notify it"}

"""How a client-side run (`amqp-conformance clients`) reads in the results lake.

Responsibility: the conventions the client judge writes (`conformance.client_judge.record`) and
the report reads (`reports.clients`), declared once: a scenario's test id
(``clients/<client>::<scenario>``) and the line of the run's `profile_detail` that records the
client's language (``client language: go``). The run's profile is `records.CLIENT_PROFILE`.
"""

from __future__ import annotations

LANGUAGE_LINE = "client language: "


def scenario_test_id(client: str, scenario: str) -> str:
    return f"clients/{client}::{scenario}"


def scenario_of(test_id: str) -> str:
    """The scenario of a client-side test id ("clients/pika::server-cancel" gives "server-cancel")."""
    return test_id.rsplit("::", 1)[-1]


def language_line(language: str) -> str:
    """The `profile_detail` line that records a client's language."""
    return f"{LANGUAGE_LINE}{language}"


def language_of(profile_detail: str | None) -> str | None:
    """The client's language a client-side run recorded ("go"), None when it recorded none."""
    for line in (profile_detail or "").splitlines():
        if line.startswith(LANGUAGE_LINE):
            return line.removeprefix(LANGUAGE_LINE).strip() or None
    return None

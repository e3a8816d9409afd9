"""The client libraries `amqp-conformance clients` judges, chosen from the one client registry.

Responsibility: `resolve`, which turns the command line's client names into specs of the
registry (`conformance.drivers.registry.REGISTRY`): every installed client when
none is named (the ones that cannot run here are returned apart, each with its one line naming
the package to install), exactly the named ones otherwise (an unknown or unavailable name is a
usage error).

Rules: nothing here starts a process or builds an adapter.
"""

from __future__ import annotations

from conformance.drivers.registry import REGISTRY, ClientSpec, ClientUnavailable


class UnknownClient(ValueError):
    """A client name that is not in the registry, or one that cannot run here (one line, exit 4)."""


def resolve(names: list[str]) -> tuple[list[ClientSpec], list[str]]:
    """(the specs to judge, one line per known client left out because it cannot run here).

    With no names: every registered client that can run here; one whose package, runtime or
    toolchain is missing is left out with its line. Named clients must all be available.
    """
    if not names:
        chosen: list[ClientSpec] = []
        left_out: list[str] = []
        for spec in REGISTRY.values():
            try:
                spec.check()
            except ClientUnavailable as exc:
                left_out.append(str(exc))
                continue
            chosen.append(spec)
        return chosen, left_out
    specs = []
    for name in names:
        found = REGISTRY.get(name)
        if found is None:
            raise UnknownClient(f"unknown client {name!r}; known clients: {', '.join(REGISTRY)}")
        try:
            found.check()
        except ClientUnavailable as exc:
            raise UnknownClient(str(exc)) from None
        specs.append(found)
    return specs, []

"""Drivers: one interface (`interface.ClientDriver`) for the raw codec client and the client libraries.

The clients themselves are listed once, in `registry.REGISTRY`; `CLIENTS` here is its view for
the suite's `--client` option (raw, then the libraries the broker-side suite runs through).
"""

from conformance.drivers.registry import RAW, REGISTRY, suite_clients

CLIENTS = suite_clients()  # the drivers a suite run can use (`--client`)


def library_version(client: str) -> str | None:
    """The installed version of a library driver; None for raw (or a library that is not installed)."""
    if client == RAW or client not in REGISTRY:
        return None
    return REGISTRY[client].installed_version()

"""Drivers: one interface (`interface.ClientDriver`) for the raw codec client and the client libraries."""

from importlib.metadata import PackageNotFoundError, version

CLIENTS = ("raw", "pika", "amqp", "aio-pika")  # the drivers a suite run can use (`--client`)


def library_version(client: str) -> str | None:
    """The installed version of a library driver (its `--client` name is its PyPI package); None for raw."""
    if client == CLIENTS[0]:
        return None
    try:
        return version(client)
    except PackageNotFoundError:
        return None

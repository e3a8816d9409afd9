"""Drivers: one interface (`interface.ClientDriver`) for the raw codec client and the client libraries.

The clients themselves are listed once, in `registry.REGISTRY`: the suite's `--client` choices
(`registry.suite_clients`), the Python adapter program and the client judge read it there.
"""

"""Drivers: one interface (`interface.ClientDriver`) for the raw codec client and the client libraries."""

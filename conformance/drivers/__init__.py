"""Drivers: one interface (`interface.ClientDriver`) for the raw codec client and the client libraries."""

CLIENTS = ("raw", "pika", "amqp", "aio-pika")  # the drivers a suite run can use (`--client`)

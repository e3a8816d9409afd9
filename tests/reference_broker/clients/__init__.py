"""Loopback tests, by concern: real AMQP clients (pika, py-amqp, aio-pika) against the reference broker.

The clients are used unchanged, through their public APIs; each test checks behaviour a
client can observe (deliveries, properties, exceptions with reply code and text), and where
that alone cannot show it (what the broker withholds), the broker's state read through
`EmbeddedBroker.call`. Rule IDs refer to RULES.md.

Waits are bounded: `pump_*` helpers process client events until a condition holds or a
deadline passes, and the few "nothing more arrives" checks use a short bounded event window
(`SETTLE`) backed by a state check that does not depend on timing.

Tests parametrized over `client` use small adapters (`PikaClient`, `AmqpClient`,
`AioPikaClient`) exposing the same publish/get/settle operations; everything else is written
per client because the clients' APIs differ.
"""

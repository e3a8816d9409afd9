"""Drivers: the raw codec client (primary), pika and py-amqp adapters."""

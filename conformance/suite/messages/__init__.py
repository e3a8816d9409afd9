"""The messages area: what the broker does to the messages it carries, and priority queues."""

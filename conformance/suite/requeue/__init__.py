"""The requeue area: where requeued messages go and their redelivered flag, and the requeue machine."""

"""The queues area: declaring, owning and removing queues (equivalence, exclusivity, auto-delete, x-expires, purge, delete)."""

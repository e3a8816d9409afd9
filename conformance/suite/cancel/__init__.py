"""The cancel area: consumer cancellation and its notification, and the cancel machine."""

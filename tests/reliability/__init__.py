"""Reliability tests of the reference broker: crash recovery, limits and security,
socket fuzzing."""

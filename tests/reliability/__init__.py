"""Reliability tests of the reference broker (issue 9): crash recovery, limits and security,
socket fuzzing."""

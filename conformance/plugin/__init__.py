"""The pytest plugin: hooks and fixtures, verdicts, evidence, results records, health, watchdog, admin."""

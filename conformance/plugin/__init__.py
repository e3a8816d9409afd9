"""The pytest plugin: hooks and fixtures, verdicts, evidence, results records, health, watchdog, admin.

Importing it first lets an xdist worker wait its turn to start (`start_gate`: the first worker
starts alone), before anything heavier is imported.
"""

from conformance.plugin.start_gate import wait_turn

wait_turn()

"""The CI gate: the amqp-conformance command, the in-process runner, progress, baselines, JUnit XML."""

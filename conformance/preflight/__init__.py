"""The upgrade pre-flight: will a recorded workload behave the same on another RabbitMQ version?

`shapes` reduces recorded frames to the workload's distinct shapes, `behaviour` says what each
profile does with a shape (from the catalogue's rules and the model's oracles), `judging` turns
shapes into findings, `replay` checks them against a live target. The Spark job and the page
are in `reports.preflight_spark` and `reports.preflight_page`; docs/preflight.md explains it.
"""

"""reports: the results pipeline on Spark and the static HTML conformance report.

Entry point: `reports.cli.report_main` (`amqp-conformance report RESULTS_DIR --out DIR`).
See reports/README.md for the site, the Spark set-up and the module map.
"""

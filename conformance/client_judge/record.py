"""Client-side results into the results lake (docs/design.md decision 7): one run per client library.

Responsibility: turn `ScenarioResult`s into the lake's records: per client a run record
(client name and version, the scripted broker as the "broker", profile `client-side`), one
test record per scenario (test id ``clients/<client>::<scenario>``, the scenario's rule ids,
area ``client``) and its frame log.

Rules:
- Frame directions are the client library's: "out" = sent by the client, "in" = received by
  it, so the report's arrows (→ client to broker) read the same as for broker runs.
- A run's id is ``<base>-<client>``; several clients of one invocation share the base.
- The client's language (the registry's, or an `--adapter`'s hello) is a line of the run's
  `profile_detail`, ``client language: go`` (`conformance.results.client_runs`), so the report
  groups clients by it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from conformance.client_judge.runner import ScenarioResult
from conformance.results.client_runs import language_line, scenario_test_id
from conformance.results.parts import ResultsWriter
from conformance.results.records import CLIENT_PROFILE, RunRecord, TestRecord, harness_version
from conformance.results.verdicts import Verdict

BROKER = "scripted://reference-broker"
PRODUCT = "scripted reference broker"
OUTCOMES = {Verdict.PASSED: "passed", Verdict.FAILED: "failed", Verdict.NOT_APPLICABLE: "skipped",
            Verdict.BROKEN: "failed"}


def write_client_run(root: Path, base: str, client: str, results: Iterable[ScenarioResult], started: datetime,
                     scale: float, exit_status: int | None, language: str | None = None) -> str:
    """Write one client's run; return its run id."""
    results = list(results)
    run_id = f"{base}-{client}"
    version = next((r.client_version for r in results if r.client_version), None)
    writer = ResultsWriter(root, run_id)
    detail = "\n".join(["a scripted broker played each scenario at the client library",
                         *([language_line(language)] if language else [])])
    run = RunRecord(run_id, BROKER, client, harness_version(), scale, started, product=PRODUCT,
                    version=harness_version(), profile=CLIENT_PROFILE, profile_detail=detail, admin=None,
                    client_version=version)
    writer.write_run(run)
    for r in results:
        record = TestRecord(run_id, scenario_test_id(client, r.scenario.id), list(r.scenario.rules), "client", str(r.verdict),
                            OUTCOMES[r.verdict], "call", r.started, r.duration, r.duration, message=r.message or None,
                            title=r.scenario.title)
        if r.verdict in (Verdict.FAILED, Verdict.BROKEN) and r.stderr and "nothing on stderr" not in r.stderr:
            record.message = f"{r.message}\nadapter stderr: {r.stderr}"[:4000]
        writer.add_test(record, [replace(f, direction="in" if f.direction == "out" else "out") for f in r.frames])
    writer.close()
    writer.write_run(replace(run, finished=datetime.now(UTC), exit_status=exit_status, tests=len(results)))
    return run_id

"""`amqp-conformance run`'s options: validated before anything starts, and what a run found.

Rules: every bad option is found by `prepare` before the broker or pytest starts, and raised
as `UsageError` with one line (exit status 4): a bad URL, profile, client, admin, baseline,
selector, job count, timeout scale, budget, run id, suite, output directory, cluster node
or node control.
"""

from __future__ import annotations

import importlib.util
import os
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conformance.catalogue.profiles import NEWEST, ProfileError, check_choice
from conformance.catalogue.selection import parse_selection
from conformance.drivers.raw import BrokerAddress
from conformance.drivers.registry import suite_clients
from conformance.gate.baseline import Baseline, BaselineError, Judgement, load_baseline
from conformance.results.evidence import TestEvidence
from conformance.run.admin import parse_admin
from conformance.run.nodes import parse_cluster

DEFAULT_OUT = Path("amqp-conformance-results")
ENV_JOBS = "AMQPC_JOBS"  # the default of --jobs (a number or 'auto')
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class UsageError(Exception):
    """A bad option: one line on stderr, exit status 4."""


class EnvironmentFailure(Exception):
    """The run could not start (the embedded broker did not come up): exit status 2."""


@dataclass
class RunOptions:
    broker_url: str | None = None
    profile: str = "auto"
    client: str = "raw"
    broker_admin: str | None = None
    baseline: Path | None = None
    strict_baseline: bool = False
    out: Path = DEFAULT_OUT
    select: tuple[str, ...] = ()
    jobs: str | None = None  # None: `default_jobs`
    timeout_scale: float = 1.0
    run_id: str | None = None
    suite: Path | None = None
    report: bool = False
    test_timeout: float | None = None  # None: the watchdog's default
    run_timeout: float | None = None
    capabilities: tuple[str, ...] = ()  # declared beyond what the broker advertises
    extension_profile: str = NEWEST
    cluster_nodes: tuple[str, ...] = ()  # --cluster-node: the other nodes, or ("embedded",)
    node_control: str | None = None  # --node-control: the command template


@dataclass
class Prepared:
    options: RunOptions
    run_id: str
    baseline: Baseline | None
    jobs: str


def prepare(options: RunOptions) -> Prepared:
    """Validate every option (UsageError, one line, on the first bad one)."""
    try:
        if options.broker_url:
            BrokerAddress.parse(options.broker_url)
        if options.broker_admin:
            parse_admin(options.broker_admin, options.broker_url or "")
        parse_selection(options.select)
        parse_cluster(options.broker_url, options.cluster_nodes, options.node_control)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        check_choice(options.profile, options.capabilities, options.extension_profile)
    except ProfileError as exc:
        raise UsageError(str(exc)) from None
    if options.client not in suite_clients():
        raise UsageError(f"--client {options.client!r}: one of {', '.join(suite_clients())}")
    if not options.timeout_scale > 0:
        raise UsageError("--timeout-scale must be a positive number")
    for name, budget in (("--test-timeout", options.test_timeout), ("--run-timeout", options.run_timeout)):
        if budget is not None and not budget >= 0:
            raise UsageError(f"{name} must be a number of seconds >= 0 (0 = no limit)")
    jobs = _jobs(options.jobs) if options.jobs is not None else default_jobs(options.broker_url)
    run_id = options.run_id or f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    if not _RUN_ID.fullmatch(run_id):
        raise UsageError(f"--run-id {run_id!r}: letters, digits, '.', '_' and '-' only")
    if options.strict_baseline and options.baseline is None:
        raise UsageError("--strict-baseline needs --baseline FILE")
    if options.suite is not None and not options.suite.is_dir():
        raise UsageError(f"--suite {options.suite}: not a directory")
    try:
        baseline = load_baseline(options.baseline) if options.baseline is not None else None
    except BaselineError as exc:
        raise UsageError(str(exc)) from None
    try:
        options.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {options.out}: {exc.strerror or exc}") from None
    return Prepared(options, run_id, baseline, jobs)


def default_jobs(broker_url: str | None) -> str:
    """Workers when --jobs is not given: one against a broker the user names (its global settings are
    theirs to share out), several against the embedded reference broker, whose suite mostly waits on
    timers (2 cores, measured: 1 job about 62 s, 2 jobs 45 s, 4 jobs 37 s). AMQPC_JOBS overrides it."""
    chosen = os.environ.get(ENV_JOBS)
    if chosen:
        return _jobs(chosen)
    if broker_url or importlib.util.find_spec("xdist") is None:
        return "1"
    return str(min(4, 2 * (os.cpu_count() or 1)))


def _jobs(text: str) -> str:
    if text != "auto" and not (text.isdigit() and int(text) >= 1):
        raise UsageError(f"--jobs {text!r}: a number of workers >= 1, or 'auto'")
    if text != "1" and importlib.util.find_spec("xdist") is None:
        raise UsageError("--jobs needs pytest-xdist (pip install pytest-xdist)")
    return text


@dataclass
class Outcome:
    """What a finished run found; `exit_status` is the gate's answer."""

    exit_status: int
    tests: list[TestEvidence] = field(default_factory=list)
    judgement: Judgement = field(default_factory=Judgement)
    profile: str | None = None
    problem: str | None = None  # the one-line reason for 2, 3 or 4
    harness: Any = None  # the plugin's Harness of the controller, if the session got that far
    seconds: float = 0.0  # the suite's wall time (broker start and probe included)

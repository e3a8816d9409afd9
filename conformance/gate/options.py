"""`amqp-conformance run`'s options: validated before anything starts, and what a run found.

Rules: every bad option is found before the broker or pytest starts, and raised as `UsageError`
with one line (exit status 4): the run's own values where its configuration is built
(`conformance.run.config`: URL, profile, client, admin, selector, timeout scale, budgets, run id,
cluster node, node control), the gate's in `prepare` (baseline, job count, suite, output
directory).
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conformance.drivers.registry import RAW
from conformance.results.baseline import Baseline, BaselineError, Judgement, load_baseline
from conformance.results.evidence import TestEvidence
from conformance.run.config import RunConfig

DEFAULT_OUT = Path("amqp-conformance-results")
ENV_JOBS = "AMQPC_JOBS"  # the default of --jobs (a number or 'auto')
MAX_DEFAULT_JOBS = 12
JOBS_PER_CORE = 6
LIBRARY_JOBS = 2  # through a client library: the run judges a few dozen tests, the rest do not apply
TESTS_PER_JOB = 10  # a selection (`--select`) gets one worker per this many of its tests, at most the default
COUNT_TIMEOUT = 120.0  # s: the selection's count (a collection of the suite, about 2 CPU-s); past it, the default


class UsageError(Exception):
    """A bad option: one line on stderr, exit status 4."""


class EnvironmentFailure(Exception):
    """The run could not start (the embedded broker did not come up): exit status 2."""


@dataclass
class RunOptions:
    """What `amqp-conformance run` is asked: the run's configuration (conformance.run.config, built
    and checked once from the command line) and the gate's own options."""

    config: RunConfig = field(default_factory=RunConfig)
    baseline: Path | None = None
    strict_baseline: bool = False
    out: Path = DEFAULT_OUT
    jobs: str | None = None  # None: `default_jobs`
    suite: Path | None = None
    report: bool = False


@dataclass
class Prepared:
    options: RunOptions
    run_id: str
    baseline: Baseline | None
    jobs: str


def prepare(options: RunOptions) -> Prepared:
    """Check the gate's own options (UsageError, one line, on the first bad one); the run's
    configuration was checked when it was built."""
    config = options.config
    if options.jobs is not None:
        jobs = _jobs(options.jobs)
    else:
        jobs = default_jobs(config.broker_url, config.cluster_node, config.client)
        if jobs not in ("1", "auto") and config.selection and config.client == RAW and not os.environ.get(ENV_JOBS):
            jobs = jobs_for_selection(int(jobs), selected_tests(config.select, options.suite))
    run_id = options.config.run_id or f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    options.config = replace(options.config, run_id=run_id)
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


def default_jobs(broker_url: str | None, cluster_nodes: tuple[str, ...] = (), client: str = RAW) -> str:
    """Workers when --jobs is not given: six per core, at most MAX_DEFAULT_JOBS, for the embedded
    reference broker and a broker the user names alike. The suite mostly waits on the broker's
    clock and round trips (RabbitMQ 4.3.6's whole run at eight workers: 58 of the 2 cores' 95
    CPU-seconds busy), and a test that changes a broker-wide setting runs alone anyway
    (conformance.plugin.distributed). Measured on 2 cores, whole suite, RabbitMQ 4.3.6: 8 workers
    45-49 s, 12 workers 42-44 s, 16 workers 41-42 s; with a CPU hog eating one core, 8 workers 54-55 s,
    12 workers 47-50 s; embedded broker 38-40 s at 8, 38 s at 12 (docs/benchmarks.md). Each worker
    starts Python and collects the suite (about 0.7 CPU-s on that machine), which is what more workers
    cost. One worker against any
    cluster, the embedded one (`--cluster-node embedded`) as one the user names: its tests stop, kill and start
    the nodes every worker's tests use (eight workers on the embedded cluster failed three cluster tests so).
    LIBRARY_JOBS through a client library (`--client pika`...): it expresses a few dozen of the suite's tests
    (the rest are not applicable at once), so more workers only add their start; measured on 2 cores,
    RabbitMQ 4.3.6, whole suite: bunny 8 workers 50.9 s, 4 37.2 s, 2 33.9 s, 1 52.4 s; pika 25.2, 18.6,
    17.0 s at 8, 4, 2 (docs/benchmarks.md). AMQPC_JOBS overrides it."""
    chosen = os.environ.get(ENV_JOBS)
    if chosen:
        return _jobs(chosen)
    if importlib.util.find_spec("xdist") is None or cluster_nodes:
        return "1"
    if client != RAW:
        return str(LIBRARY_JOBS)
    return str(min(MAX_DEFAULT_JOBS, JOBS_PER_CORE * (os.cpu_count() or 1)))


def jobs_for_selection(default: int, selected: int | None) -> str:
    """The default worker count for a run of `selected` tests: one per TESTS_PER_JOB, at least one,
    at most `default`. Each worker starts Python, imports the harness and collects the whole suite
    (1-2 CPU-seconds): eight of them for a handful of tests cost most of the run (`--select ACK-05`
    on the embedded broker, 2 cores: 27.5 CPU-s at 8 workers, 7.2 at 1). Verdicts do not depend
    on the count (docs/benchmarks.md, "Parallel runs judge the same"). None (not counted): `default`."""
    if selected is None:
        return str(default)
    return str(max(1, min(default, math.ceil(selected / TESTS_PER_JOB))))


def selected_tests(selectors: tuple[str, ...] | list[str], suite: Path | None) -> int | None:
    """How many tests the selection keeps: pytest's collection of the suite in a process of its own
    (in this one it would import the test modules before the run's own pytest could rewrite their
    asserts); None when that fails or takes longer than COUNT_TIMEOUT."""
    command = [sys.executable, "-m", "conformance.gate.collect", "--count",
               *(["--suite", str(suite)] if suite is not None else []), *selectors]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=COUNT_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return int(lines[-1]) if done.returncode == 0 and lines and lines[-1].isdigit() else None


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

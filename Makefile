# amqp-conformance — the two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: test run lint typecheck unit bench-codec bench-broker generate clean clients \
	rabbitmq4-up rabbitmq4-down rabbitmq4-status test-rabbitmq43 test-rabbitmq40 test-cluster test-gates test-end-to-end test-cluster-brokers test-cluster-310 \
	mutation mutation-proxy

# Python caches compiled modules (and pytest its assertion rewrites) in __pycache__: a shell that
# sets PYTHONDONTWRITEBYTECODE makes every process of the test run (xdist workers, each
# `amqp-conformance run` a test starts, each broker subprocess) compile the project again, about
# 2 CPU-seconds a process.
unexport PYTHONDONTWRITEBYTECODE

# --no-compile: pip would compile every module of every package (pyspark's alone are thousands, most
# never imported here), 11 of the install's 27 s; Python compiles and caches what is imported.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --no-compile -e '.[dev]'
	@if command -v npm >/dev/null; then \
		npm install --prefix $(VENV)/node --no-audit --no-fund --loglevel=error amqplib@^2; \
	else echo "npm not found: the amqplib client (amqp-conformance clients) is not installed"; fi
	@touch $(STAMP)

# `make test`: ruff, then mypy in the background while the unit tests run (mypy's output is shown
# after pytest's; the target fails if either does).
test: $(STAMP) lint
	@mkdir -p build
	@$(BIN)/mypy > build/mypy.log 2>&1 & mypy=$$!; \
	$(MAKE) --no-print-directory unit; unit=$$?; \
	wait $$mypy; typed=$$?; echo "$(BIN)/mypy"; cat build/mypy.log; \
	test $$unit -eq 0 && test $$typed -eq 0

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

# pytest-xdist workers: the tests wait on brokers and timeouts more than they compute, so more
# workers than cores (measured on 2 cores: -n 3 365 s, -n 5 256 s, -n 6 257 s of pytest).
PYTEST_WORKERS ?= 5
unit: $(STAMP)
	$(BIN)/python -m codec.generate --check
	$(BIN)/python -m conformance.gate.document --check
	$(BIN)/pytest -rs -n $(PYTEST_WORKERS) --dist loadgroup

# The main job: the suite against the embedded reference broker, then the HTML report; prints
# where the results, JUnit XML and report are.
RUN_OUT ?= build/conformance
RUN_ARGS ?=
run: $(STAMP)
	$(BIN)/amqp-conformance run --out $(RUN_OUT) --report $(RUN_ARGS)

# Client libraries judged by a scripted broker: every scenario, every installed client, HTML report.
CLIENTS_OUT ?= build/clients
clients: $(STAMP)
	$(BIN)/amqp-conformance clients --out $(CLIENTS_OUT) --report

bench-codec: $(STAMP)
	$(BIN)/python bench/codec.py

bench-broker: $(STAMP)
	$(BIN)/python bench/broker.py

# The suite of each named fault's area against the reference broker with that fault, after a clean
# control run of the same selection (exit 2 when the control fails); a fault is killed only by a
# failure naming its own rule (docs/mutation.md). Writes results/mutation/mutation.json.
mutation: $(STAMP)
	$(BIN)/python -m conformance.mutation --out results/mutation

# The suite, and each model machine alone, through every deviation of the frame-rewriting
# proxy (tests/conformance/deviations.py), after a control through the proxy applying none,
# judged by the same definition (a failure naming the deviation's own rule); ~30 minutes.
mutation-proxy: $(STAMP)
	$(BIN)/python -m tests.conformance.deviation_matrix --out results/mutation-proxy

generate: $(STAMP)
	$(BIN)/python -m codec.generate
	$(BIN)/python -m conformance.gate.document

# RabbitMQ 4.3.6 (Debian sid) and 4.0.5 (trixie) in cached debootstrap chroots on loopback
# (scripts/rabbitmq4.sh; RMQ4=4.3 or 4.0 for one of them; needs root).
RMQ4 ?= all
rabbitmq4-up:
	scripts/rabbitmq4.sh up $(RMQ4)

rabbitmq4-down:
	scripts/rabbitmq4.sh down $(RMQ4)

rabbitmq4-status:
	scripts/rabbitmq4.sh status $(RMQ4)

# The tests marked for a 4.x node (not in `make test`): the differential test against 4.3.6, the
# profile detection and the gate (the whole suite with the management API and the baseline).
# The report and the audit on real Spark clusters started on loopback (a standalone master and
# two workers, a Spark Connect server), compared with local[2]: six JVMs, about 3 minutes on a
# 2-core machine, so a step of its own (`.ci/run` runs it, strictly), not part of `make test`.
test-cluster: $(STAMP)
	$(BIN)/pytest -rs -m cluster tests

# Whole-suite gate runs (`amqp-conformance run` end to end, a minute or two each on 2 cores): RabbitMQ
# 3.10.8 with its shipped baseline, and the reference broker under every profile; `.ci/run` runs them
# after `make test`, which keeps its 5-minute goal without them.
test-gates: $(STAMP)
	$(BIN)/pytest -rs -m gate -n 3 tests

# The project's costliest tests in CPU, kept out of `make test`'s 5 minutes on a slow 2-core machine
# (docs/benchmarks.md): the results pipeline on a local Spark session with the report in headless
# Chromium (markers spark, browser: one worker, one session) and the tests that run a whole
# `amqp-conformance` command or another harness process as a subprocess (marker end_to_end).
# About 320 CPU-s (212 s on a slow 2-core machine); `.ci/run` runs it right after `make test`.
END_TO_END := (spark or browser or end_to_end) and not (slow or cluster or gate or grid or rabbitmq43 or rabbitmq40 or broker_cluster or rabbitmq43cluster or rabbitmq310cluster)
test-end-to-end: $(STAMP)
	$(BIN)/pytest -rs -n $(PYTEST_WORKERS) --dist loadgroup -m "$(END_TO_END)" tests

test-rabbitmq43: $(STAMP)
	$(BIN)/pytest -m rabbitmq43 tests

# The small interop grid (grids/ci.toml: the reference broker, RabbitMQ 3.10.8 and 4.3.6, GarageMQ;
# raw and one library per language) with its report, and the suite through the Node and C adapters
# (tests/conformance/test_through_clients_adapters.py); RabbitMQ 4.3.6 started by the grid itself.
test-grid: $(STAMP)
	$(BIN)/pytest -rs -m grid tests

test-rabbitmq40: $(STAMP)
	$(BIN)/pytest -m rabbitmq40 tests

# Brokers judged as clusters (not `test-cluster`, which is Spark's): the cluster area on
# `reference_broker --nodes 3` and against each of its cluster faults, then on the live 3-node
# RabbitMQ 4.3.6 cluster (`scripts/rabbitmq4.sh cluster up 4.3 3` first; skipped without it, a
# failure under AMQPC_STRICT=1). About 40 s and 80 s on 2 cores.
test-cluster-brokers: $(STAMP)
	$(BIN)/pytest -rs -n 2 -m broker_cluster tests
	$(BIN)/pytest -rs -m rabbitmq43cluster tests

# Classic mirrored queues failing over (CCN-06.a/b, RabbitMQ up to 3.13) on a live 2-node RabbitMQ
# 3.10.8 cluster (`scripts/rabbitmq4.sh cluster up 3.10 2` first: Debian bookworm's package in its
# own chroot; skipped without it, a failure under AMQPC_STRICT=1), with and without deviations.
test-cluster-310: $(STAMP)
	$(BIN)/pytest -rs -m rabbitmq310cluster tests

clean:
	rm -rf $(VENV) build dist *.egg-info

# scrapeq: the two commands a newcomer needs are `make demo` and `make test`.
# Every target does its own set-up: Debian packages, the virtual environment in .venv/, and the
# control-plane tools built from Go modules (cached under ~/.cache/scrapeq, keyed by version).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The slowest tests are listed at the end of every run: where the suite's time goes.
PYTEST_ARGS ?= --durations=30

.PHONY: help setup system-packages venv tools test test-scale test-unit test-integration test-e2e lint \
	demo cluster-up cluster-down images bench bench-queue bench-worker bench-operator bench-cluster \
	bench-fleet bench-soak bench-output bench-sources bench-recrawl bench-sessions \
	generate clean

help:
	@echo "make demo          run scrapeq end to end on local defaults"
	@echo "make test          run the whole test suite (unit, integration, e2e)"
	@echo "make test-scale    the tests at full size that make test leaves out (many minutes)"
	@echo "make lint          ruff, mypy (strict) and the import contracts (part of make test)"
	@echo "make tools         build the Kubernetes components, CoreDNS, etcd and helm; print their paths"
	@echo "make cluster-up    start the local single-node cluster (real Pods); print the KUBECONFIG export"
	@echo "make cluster-down  stop it and undo its changes to the host"
	@echo "make images        build the worker, operator (and node) images with podman; print them"
	@echo "                   REGISTRY=registry.example.com/scrapeq names them for a push;"
	@echo "                   PULL_BASES=1 builds on the official base images (registry access)"
	@echo "make generate      rewrite generated files (chart copies, dashboard, deploy/)"
	@echo "make bench-queue   queue throughput and latency against PgQueuer and procrastinate"
	@echo "make bench-worker  worker pages/s against a browser-per-job loop"
	@echo "make bench-operator  1,000 ScrapeJobs + one of 100,000 URLs on the real control plane"
	@echo "make bench-cluster   helm install, scale from zero and pages/s on real Pods"
	@echo "make bench-fleet     500 simulated worker pods on one PostgreSQL, direct and through PgBouncer"
	@echo "make bench-soak      a million rows with 10 KB results through the queue, retention on"
	@echo "make bench-output    output delivery lag and PostgreSQL bytes per row, real S3 server"
	@echo "make bench-sources   1,000,000 URLs of a sitemap index (BENCH_ARGS=--source object: a list in S3) into rows"
	@echo "make bench-recrawl   a recurring crawl's second run (1 % of 1,000 pages changed) against its first"
	@echo "make bench-sessions  a defended site's pages completed with the session pool and without"

# As root (CI, the demo's usual case) also what the local node and images need; elsewhere the
# node cannot run anyway, and the demo says so and uses local processes.
system-packages:
	@scripts/ensure-system-packages.sh $$([ "$$(id -u)" -eq 0 ] && echo node)

$(STAMP): pyproject.toml requirements/constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@scripts/with-progress.sh "[1/2] upgrading pip in $(VENV)/" 15 $(VENV)/install-pip.log -- \
		$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	@scripts/with-progress.sh "[2/2] installing scrapeq and its pinned packages into $(VENV)/" 90 \
		$(VENV)/install.log -- \
		$(PY) -m pip install -q --disable-pip-version-check -c requirements/constraints.txt -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

tools:
	@tools/build.sh node helm versitygw

setup: system-packages venv
	@tools/build.sh node helm versitygw >/dev/null

# Lint first: it takes seconds, the suite takes minutes.
# pytest exits 5 when it collected no test: that is a failure here, never a green run.
test: setup lint
	@set +e; $(PY) -m pytest $(PYTEST_ARGS); status=$$?; \
	if [ $$status -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; exit $$status

# The tests at full size (marker `scale`: many minutes each), which `make test` leaves out.
test-scale: setup
	@$(PY) -m pytest -m scale $(PYTEST_ARGS)

test-unit: venv
	@$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: setup
	@$(PY) -m pytest tests/integration $(PYTEST_ARGS)

test-e2e: setup
	@$(PY) -m pytest tests/e2e $(PYTEST_ARGS)

lint: venv
	@$(PY) -m ruff check .
	@$(PY) -m ruff format --check .
	@$(PY) -m mypy
	@$(VENV)/bin/lint-imports --no-cache

demo: setup
	@$(PY) -m scrapeq demo $(DEMO_ARGS)

cluster-up: setup
	@$(PY) -m scrapeq dev cluster-up

cluster-down: venv
	@$(PY) -m scrapeq dev cluster-down

# Container images from worker/Dockerfile and operator/Dockerfile (+ the node's postgres and pause
# images), with locally made stand-ins for the public base images (scrapeq/local/images.py).
images: venv
	@scripts/ensure-system-packages.sh node
	@$(PY) -m scrapeq dev images $(if $(REGISTRY),--registry $(REGISTRY)) $(if $(PULL_BASES),--pull-bases)

bench: bench-queue bench-worker bench-operator

bench-queue: setup
	@$(PY) -m pip install -q --disable-pip-version-check -c requirements/constraints.txt -e '.[bench]'
	@$(PY) -m benchmarks.queue_throughput

# BENCH_ARGS passes options through, e.g. BENCH_ARGS="--pages 30" (docs/benchmarks.md).
bench-sessions: setup
	@$(PY) -m benchmarks.sessions $(BENCH_ARGS)

# BENCH_ARGS passes options through, e.g. BENCH_ARGS="--only heavy" (docs/benchmarks.md).
bench-worker: setup
	@$(PY) -m pip install -q --disable-pip-version-check -c requirements/constraints.txt -e '.[bench]'
ifeq ($(BENCH_ARGS),)
	@$(PY) -m benchmarks.worker_pages
	@$(PY) -m benchmarks.worker_pages --only steps
	@$(PY) -m benchmarks.worker_pages --only artifacts
else
	@$(PY) -m benchmarks.worker_pages $(BENCH_ARGS)
endif

bench-operator: setup
	@$(PY) -m benchmarks.operator_scale

# A sitemap index of 20 x 50,000 URLs expanded into rows: rows/s and the expanders' peak RSS.
bench-sources: setup
	@$(PY) -m benchmarks.sitemap_sources $(BENCH_ARGS)

# A recurring crawl's second run (1 % of 1,000 rendered pages changed) against its first.
bench-recrawl: setup
	@$(PY) -m benchmarks.recrawl $(BENCH_ARGS)

bench-cluster: setup
	@$(PY) -m benchmarks.cluster_pods

# BENCH_ARGS passes options through, e.g. BENCH_ARGS="--pods 100 --seconds 30".
bench-fleet: setup
	@$(PY) -m benchmarks.fleet $(BENCH_ARGS)

bench-soak: setup
	@$(PY) -m benchmarks.soak $(BENCH_ARGS)

# BENCH_ARGS passes options through, e.g. BENCH_ARGS="--rows 2000 --rate 100".
bench-output: setup
	@$(PY) -m benchmarks.output_delivery $(BENCH_ARGS)

# Regenerate every copied or rendered file from its single source (see scripts/generate.py).
generate: venv
	@$(PY) -m scripts.generate

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .scrapeq

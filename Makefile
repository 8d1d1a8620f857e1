.PHONY: setup run test lint format

setup:
	bash scripts/setup.sh

run: setup
	bash scripts/run.sh

format:
	.venv/bin/ruff format .
	.venv/bin/ruff check --fix .

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

test:
	SETUP_SKIP_DEMO=1 bash scripts/setup.sh
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/pytest

.PHONY: resilience
# The resilience suite of issue 9 (faults under load, two tenants, fuzzing), slow parts included; it
# starts its own PostgreSQL and Redis. Figures are printed and written to var/resilience/results.json.
resilience:
	SETUP_SKIP_DEMO=1 bash scripts/setup.sh
	RESILIENCE_FUZZ_EXAMPLES=$${RESILIENCE_FUZZ_EXAMPLES:-60} .venv/bin/pytest -s -m "resilience or resilience_slow" tests/resilience

.PHONY: bench
# The product's own benchmark (production settings, the devtools provider as issuer); not part of `make test`.
bench: setup
	.venv/bin/python scripts/bench.py

.PHONY: bench-scada
# The SCADA import at historian scale (issue 21): 200 devices × 1 year × 5 min ≈ 21 M values, peak RSS, the
# re-import, query_scada_readings at its maximum; its own database. Figures: var/bench/scada.json.
bench-scada:
	.venv/bin/python scripts/bench_scada.py $(BENCH_SCADA_ARGS)

.PHONY: bench-baseline
# The model baseline of a month (issue 21): ky4 × 744 h every 15 min, wall time and peak RSS; its own
# database. Figures: var/bench/baseline.json.
bench-baseline:
	.venv/bin/python scripts/bench_baseline.py $(BENCH_BASELINE_ARGS)

.PHONY: bench-workers
# /mcp with 1, 2 and 4 uvicorn workers at a fixed client CPU (issue 25): req/s, CPU per call, PostgreSQL
# statements and Redis commands per call, query connections per worker. Figures: var/bench/workers.json.
bench-workers: setup
	.venv/bin/python scripts/bench_workers.py $(BENCH_WORKERS_ARGS)

.PHONY: bench-analysis
# The analyses on Net6 against the engine's floor (issue 42): end to end per kind, run_* latency, estimate
# against actual, 20 bursts on 2 worker processes; its own database and Redis index, server and worker as
# subprocesses. Figures: var/bench/analysis.json.
bench-analysis:
	.venv/bin/python scripts/bench_analysis.py $(BENCH_ANALYSIS_ARGS)

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

test:
	SETUP_SKIP_DEMO=1 bash scripts/setup.sh
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/pytest

.PHONY: bench
# The product's own benchmark (production settings, the devtools provider as issuer); not part of `make test`.
bench: setup
	.venv/bin/python scripts/bench.py

# The two commands of the README: `make run` (set up, then start onstage) and `make test` (set up, then test).
# Both install into .venv/ at the repository root through scripts/setup, which does nothing when up to date.

PY := .venv/bin/python

.PHONY: setup run test lint typecheck bench

setup:
	@scripts/setup
	@scripts/setup-page

run: setup
	.venv/bin/onstage serve

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

typecheck: setup
	.venv/bin/mypy

# mypy runs beside pytest (scripts/test says why); `make typecheck` runs it alone.
test: lint
	@scripts/setup-browser
	@scripts/test

# One at a time, on a quiet machine: each prints a markdown table for BENCHMARKS.md.
bench: setup
	$(PY) benchmarks/bus.py
	$(PY) benchmarks/listeners.py
	$(PY) benchmarks/generator.py
	$(PY) benchmarks/director.py
	$(PY) benchmarks/reaction.py

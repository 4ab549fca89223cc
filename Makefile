# Two commands for a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test install install-dev bench docs mutate lint fmt clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: requirements.lock core/pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --require-hashes -r requirements.lock
	$(BIN)/pip install --quiet --no-deps -e ./core
	touch $@

$(VENV)/.installed-dev: requirements-dev.lock $(VENV)/.installed
	$(BIN)/pip install --quiet --require-hashes -r requirements-dev.lock
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

## make run: install, migrate, create the admin login, seed demo data, start web + worker + beat.
run: install
	DJANGO_DEBUG=$${DJANGO_DEBUG:-false} CONSOLE_LOCAL_HTTP=$${CONSOLE_LOCAL_HTTP:-true} $(BIN)/python manage.py runconsole

## make test: install, then lint, types, the docs build, unit, database (PostgreSQL + SQLite), Celery and browser tests.
test: install-dev
	bash scripts/test.sh

## make bench: benchmarks against baselines measured in the same run (not part of make test).
bench: install-dev
	$(BIN)/python -m bench.run $(if $(BENCH_SCALE),--scale $(BENCH_SCALE))

## make docs: build the documentation site (docs/, mkdocs.yml) into site/; the console serves it at /docs/.
docs: install-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## make mutate: mutation testing of the money code (mutmut, over the modules and pure unit tests
## [tool.mutmut] names; not part of make test). docs/mutation.md has the latest score.
mutate: install-dev
	rm -rf mutants
	HYPOTHESIS_PROFILE=mutate $(BIN)/mutmut run --max-children $${MUTATE_CHILDREN:-2}
	$(BIN)/mutmut results

lint: install-dev
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy .

fmt: install-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf var/ site/ $(VENV)

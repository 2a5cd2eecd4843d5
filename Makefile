# rsiframe: two commands do everything on a fresh machine.
#   make quickstart   set up, then run recipes/quickstart.yaml end to end (offline): evolve
#                     the data, trainer and harness of a tiny transformer on CPU
#   make test         set up, then run the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: quickstart test test-k4 test-e2e selftest bench lint setup sandbox harbor docker clean

quickstart: setup sandbox
	$(BIN)/rsiframe run recipes/quickstart.yaml

test: setup sandbox
	$(BIN)/python -m pytest -q

# the same suite with 4 candidates in flight in every mini recipe (generational mode)
test-k4: setup sandbox
	RSIFRAME_TEST_CANDIDATES=4 $(BIN)/python -m pytest -q

# every e2e test is in tests/e2e/ (tests/project/test_layout.py); the self-test's scenarios
# are left to `make selftest`
test-e2e: setup sandbox
	$(BIN)/python -m pytest -q tests/e2e -m 'e2e and not selftest'

selftest: setup sandbox
	$(BIN)/rsiframe selftest integrity

bench: setup sandbox
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/build.py
	$(BIN)/python bench/viewer.py
	$(BIN)/python bench/compare.py
	$(BIN)/python bench/gateway.py
	$(BIN)/python bench/harbor.py

lint: setup
	$(BIN)/ruff check rsiframe operators viewer tests bench tasks
	$(BIN)/ruff format --check rsiframe operators viewer tests bench
	$(BIN)/mypy rsiframe operators viewer
	$(BIN)/python scripts/check_functions.py

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned to the CPU wheel, so the train extra's range never pulls a CUDA build
	$(BIN)/pip install --quiet --disable-pip-version-check 'torch==2.13.0'
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,train,llm,agents,cluster,docker]'
	touch $@

# bubblewrap gives evaluations a real sandbox; without it rsiframe falls back to plain
# processes and says so in every certificate. Installed here when we may (root + apt); apt's
# lock is waited for (scripts/apt-get.sh), and when bubblewrap still cannot be installed the
# set-up goes on with the process sandbox and says so.
sandbox:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing bubblewrap (sandbox for evaluations)"; \
		if ! { scripts/apt-get.sh update -qq >/dev/null && scripts/apt-get.sh install -y -qq bubblewrap >/dev/null; }; then \
			echo "note: bubblewrap could not be installed; evaluations use the weaker process sandbox (certificates say so). Install it later with: make sandbox"; \
		fi; \
	else \
		echo "note: bubblewrap (bwrap) not found; evaluations use the weaker process sandbox (certificates say so). As root with apt: make sandbox"; \
	fi

# Harbor's own venv (Python 3.12, harbor==0.25.0) for `evaluator.engine: harbor` (~1.5 min
# once; otherwise created on first use)
harbor: setup sandbox
	VENV=$(VENV) scripts/ci-setup.sh harbor

# `sandbox: docker`: docker.io + debootstrap, dockerd, the offline base image (cached)
docker: setup
	VENV=$(VENV) scripts/ci-setup.sh docker

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache

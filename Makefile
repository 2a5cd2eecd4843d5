# rsiframe: two commands do everything on a fresh machine.
#   make quickstart   set up, then run recipes/quickstart.yaml end to end (offline): evolve
#                     the data, trainer and harness of a tiny transformer on CPU
#   make test         set up, then run the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# the sandbox target's commands (a test names stand-ins; never the machine's apt lock)
BWRAP   ?= bwrap
APT_GET ?= apt-get
# what `make quickstart` runs (a test runs a smaller recipe through the same target)
QUICKSTART ?= recipes/quickstart.yaml
NO_BWRAP := note: no bubblewrap, so evaluations run as plain processes: the run works, but \
	candidate code sees the host (files, network) and every certificate \
	records the weaker isolation

.PHONY: quickstart test test-k4 test-e2e selftest bench lint setup sandbox harbor docker browser clean

quickstart: setup sandbox
	$(BIN)/rsiframe run $(QUICKSTART)
	@echo "the rsiframe commands are in $(VENV)/bin: source $(VENV)/bin/activate first (README, Next: four things to do)"

# two workers (pytest-xdist), a test file per worker at a time (tests/conftest.py: files
# that share a resource run in one group); TEST_WORKERS=0 runs them in this process
TEST_WORKERS ?= 2
PYTEST = $(BIN)/python -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

test: setup sandbox
	$(PYTEST)

# the tests that make a mini project where candidates in flight matter, with 4 in flight in
# its recipe (generational mode); the rest run as in `make test` (tests/conftest.py)
test-k4: setup sandbox
	RSIFRAME_TEST_CANDIDATES=4 $(PYTEST)

# every e2e test is in tests/e2e/ (tests/project/test_layout.py); the self-test's scenarios
# are left to `make selftest`
test-e2e: setup sandbox
	$(PYTEST) --durations=15 tests/e2e -m 'e2e and not selftest'

selftest: setup sandbox
	$(BIN)/rsiframe selftest integrity -j 2

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
	@PYTHON=$(PYTHON) VENV=$(VENV) scripts/setup-venv.sh

# bubblewrap gives evaluations a real sandbox; without it rsiframe falls back to plain
# processes and says so in every certificate. Installed here when we may (root + apt); apt's
# lock is waited for (scripts/apt-get.sh), and when bubblewrap still cannot be installed the
# set-up goes on with the process sandbox and says so.
sandbox:
	@t0=$$(date +%s); err=$$(mktemp); \
	if command -v $(BWRAP) >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v $(APT_GET) >/dev/null 2>&1; then \
		printf 'setup: installing bubblewrap (sandbox for evaluations; waits up to %s s for the apt lock) ...' "$${RSIFRAME_APT_LOCK_TIMEOUT:-120}"; \
		if RSIFRAME_APT_GET=$(APT_GET) scripts/apt-get.sh update -qq >/dev/null 2>$$err \
			&& RSIFRAME_APT_GET=$(APT_GET) scripts/apt-get.sh install -y -qq bubblewrap >/dev/null 2>$$err; then \
			echo " $$(( $$(date +%s) - t0 )) s"; \
		else \
			echo " failed after $$(( $$(date +%s) - t0 )) s ($$(grep -v '^apt: waiting' $$err | tail -n 1))"; \
			echo "$(NO_BWRAP); install it later with: make sandbox"; \
		fi; \
	else \
		echo "$(NO_BWRAP); install it later with: sudo apt-get install bubblewrap"; \
	fi; \
	rm -f $$err

# Harbor's own venv (Python 3.12, harbor==0.25.0) for `evaluator.engine: harbor` (~1.5 min
# once; otherwise created on first use)
harbor: setup sandbox
	VENV=$(VENV) scripts/ci-setup.sh harbor

# `sandbox: docker`: docker.io + debootstrap, dockerd, the offline base image (cached)
docker: setup
	VENV=$(VENV) scripts/ci-setup.sh docker

# headless Chromium for the report page's browser test (tests/e2e/test_report_browser.py):
# Debian's chromium and chromium-driver, no browser download
browser:
	scripts/ci-setup.sh browser

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache

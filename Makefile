# botd's commands. Every target creates .venv on first use and reinstalls
# when pyproject.toml changes (its stamp file is older than it). The installs are quiet: pip
# writes to .venv/install.log, shown on stderr only when it fails, so `make run` prints
# nothing on stdout but botd's answers.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
LOG    := $(VENV)/install.log
PIP_STAMP  := $(VENV)/.installed-pip
RUN_STAMP  := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
DIST_STAMP := $(VENV)/.installed-dist

# pip ARGS..., its output into $(LOG); on failure the log's end goes to stderr.
PIP = $(BIN)/python -m pip install --disable-pip-version-check
define pip
	@echo "botd: pip install $(1) (log: $(LOG))" >&2
	@$(PIP) $(1) >>$(LOG) 2>&1 || { tail -n 25 $(LOG) >&2; echo "botd: pip failed; all of it is in $(LOG)" >&2; exit 1; }
endef

.PHONY: run test lint bench dist clean

OLD_PYTHON = botd needs Python 3.11 or newer; $(PYTHON) is Python %s. Try: make PYTHON=python3.11

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.version_info >= (3, 11) or sys.exit("$(OLD_PYTHON)" % sys.version.split()[0])'
	@$(PYTHON) -m venv $(VENV)

# pip 25.1 installs dependency groups (--group) and refuses a Python older than a package
# needs before it looks at any dependency.
$(PIP_STAMP): | $(BIN)/python
	$(call pip,--upgrade 'pip>=25.1')
	@touch $(PIP_STAMP)

# `run` needs botd and every platform SDK (botd[all]), so any CONFIG can run.
$(RUN_STAMP): pyproject.toml | $(PIP_STAMP)
	$(call pip,-e '.[all]')
	@touch $(RUN_STAMP)

# The tests, lint and benchmarks need the developers' tools too (pyproject's dependency groups).
$(TEST_STAMP): pyproject.toml | $(PIP_STAMP)
	$(call pip,-e '.[all]' --group test --group lint)
	@touch $(TEST_STAMP) $(RUN_STAMP)

$(DIST_STAMP): pyproject.toml | $(PIP_STAMP)
	$(call pip,--group dist)
	@touch $(DIST_STAMP)

# A console chat: the embedded default config (scripted provider unless ANTHROPIC_API_KEY).
run: $(RUN_STAMP)
	@$(BIN)/botd run $(if $(CONFIG),--config $(CONFIG))

# Five workers (pytest-xdist) on two cores: the tests mostly wait (loopback servers, timers,
# leases); at four the cluster worker and the other three each had about 400 s of tests and
# the cores were a quarter idle (488 s), at five 456 s with the cores busy. The cluster tests
# go to one worker, one at a time, first (tests/conftest.py); the other four share the rest.
# botd and the tests are byte-compiled first: where PYTHONDONTWRITEBYTECODE is set (as in
# many CI images), every botd process a test starts would compile botd again. The slowest
# tests are listed at the end: the suite is kept under eight minutes on two cores.
WORKERS ?= 5
test: $(TEST_STAMP)
	@$(BIN)/python -m compileall -q -j 0 botd tests
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup --durations=30

lint: $(TEST_STAMP)
	$(BIN)/ruff check botd tests bench
	$(BIN)/ruff format --check botd tests bench
	$(BIN)/mypy botd tests bench

bench: $(TEST_STAMP)
	$(BIN)/python bench/subscriber.py
	$(BIN)/python bench/outbound.py
	$(BIN)/python bench/sessions.py
	$(BIN)/python bench/e2e.py
	$(BIN)/python bench/reading.py
	$(BIN)/python bench/budget.py
	$(BIN)/python bench/pg_cost.py
	$(BIN)/python bench/reading.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/web_search.py
	$(BIN)/python bench/exec_sandbox.py

# The sdist and the wheel (built from the sdist) into dist/; prints their paths.
dist: $(DIST_STAMP)
	@rm -rf dist
	@$(BIN)/python -m build --outdir dist . >>$(LOG) 2>&1 || { tail -n 25 $(LOG) >&2; \
	  echo "botd: the build failed; all of it is in $(LOG)" >&2; exit 1; }
	@ls dist/*

clean:
	rm -rf $(VENV) dist .pytest_cache .mypy_cache .ruff_cache .hypothesis

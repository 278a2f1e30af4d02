# botd's commands. Every target creates .venv on first use and reinstalls
# when pyproject.toml changes (its stamp file is older than it).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
RUN_STAMP  := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# `run` needs botd and every platform SDK (botd[all]), so any CONFIG can run.
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[all]'
	touch $(RUN_STAMP)

# The tests, lint and benchmarks need the test tools too (botd[test] includes botd[all]).
$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(TEST_STAMP) $(RUN_STAMP)

# A console chat: the embedded default config (scripted provider unless ANTHROPIC_API_KEY).
run: $(RUN_STAMP)
	@$(BIN)/botd run $(if $(CONFIG),--config $(CONFIG))

# Two workers (pytest-xdist): most tests wait on loopback servers, so two cores run two at once.
WORKERS ?= 2
test: $(TEST_STAMP)
	$(BIN)/python -m pytest -n $(WORKERS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check botd tests bench
	$(BIN)/ruff format --check botd tests bench
	$(BIN)/mypy botd

bench: $(TEST_STAMP)
	$(BIN)/python bench/subscriber.py
	$(BIN)/python bench/outbound.py
	$(BIN)/python bench/sessions.py
	$(BIN)/python bench/e2e.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

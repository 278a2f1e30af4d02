# botd's commands. Every target creates .venv on first use and reinstalls
# when pyproject.toml changes (the stamp file is older than it).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# A console chat: the embedded default config (scripted provider unless ANTHROPIC_API_KEY).
run: $(STAMP)
	@$(BIN)/botd run $(if $(CONFIG),--config $(CONFIG))

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check botd tests bench
	$(BIN)/ruff format --check botd tests bench
	$(BIN)/mypy botd

bench: $(STAMP)
	$(BIN)/python bench/subscriber.py
	$(BIN)/python bench/outbound.py
	$(BIN)/python bench/sessions.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

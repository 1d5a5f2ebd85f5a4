# Every target sets up what it needs from scratch: a virtualenv in .venv with pinned packages.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test demo bench clean

venv: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt -c constraints.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

test: venv
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

demo: venv
	$(BIN)/zen demo

# Simulator benchmark: zen against the baselines on fixed scenarios (ratios, not timings).
bench: venv
	$(BIN)/python -m zen.sim.bench

clean:
	rm -rf $(VENV) .zen

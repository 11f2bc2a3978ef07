# Two commands on a fresh machine:  `make demo`  and  `make test`.
# The CPU build of torch is installed first so that pip does not pull a CUDA build for the
# `torch>=2.2` requirement; on a GPU workstation pass your own, e.g. make demo TORCH="torch==2.13.0".

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.medanon-installed

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[test,dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/medanon demo --out demo-output

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/phantoms.py

clean:
	rm -rf $(VENV) demo-output .pytest_cache

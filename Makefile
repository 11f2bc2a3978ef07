# Two commands on a fresh machine:  `make demo`  and  `make test`.
# torch is installed first, as TORCH says: `torch==2.13.0` from the package index pip is configured with (a CPU
# build where that index serves one, as on an air-gapped mirror; on stock PyPI for Linux it is the CUDA build).
# For a CPU-only install from the internet:
#   make demo TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.medanon-installed

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH)
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

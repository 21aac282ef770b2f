# Two entry points (see README): `make reproduce` and `make test`.
# Each creates the virtual environment it needs on first use.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The CPU build of PyTorch. Pinned because an unpinned torch resolves to a
# multi-GB CUDA build; GPU users: see README "Installing for a GPU".
TORCH  ?= torch==2.13.0
PROFILE ?= full

.PHONY: install test test-quick reproduce figures bench clean-build

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

## the test suite, slow checks included (what CI runs)
# pytest exits 5 when it collects nothing: reported, not treated as a failure.
test: $(STAMP)
	$(PY) -m pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$rc

## the quick subset for development
test-quick: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

## the main job: every notebook headless at full size, regenerating figures/
reproduce: $(STAMP)
	$(PY) -m skillgate_lib notebooks --profile $(PROFILE) --out build/notebooks

## figures and tables only, from the committed artifacts in data/runs/
figures: $(STAMP)
	$(PY) -m skillgate_lib notebooks --profile figures --out build/notebooks

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean-build:
	rm -rf build

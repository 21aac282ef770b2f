"""Fixtures shared by the test files: a tiny warm-started model, a clean method registry, and the notebooks run at
their defaults in a clone of the working tree."""

from __future__ import annotations

import pytest

from skillgate_lib import methods
from skillgate_lib.policy.warmstart import WarmStartConfig, warmstart

import notebook_clone


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny model after two SFT steps: enough to exercise the code path, not to be good."""
    out = tmp_path_factory.mktemp("model")
    warmstart(WarmStartConfig(steps=2, batch_size=4, out=str(out), threads=1), progress=False)
    return out


@pytest.fixture
def registry():
    """:data:`skillgate_lib.methods.METHODS` as the test found it, restored afterwards (register freely)."""
    before = dict(methods.METHODS)
    yield methods
    methods.METHODS.clear()
    methods.METHODS.update(before)


@pytest.fixture(scope="session")
def notebooks_at_defaults(tmp_path_factory) -> notebook_clone.CloneRun:
    """Every notebook but those that train (03) run once at their defaults in a clone of the working tree
    (:mod:`notebook_clone`): the headless checks, the clean-tree check and notebook 04's checks read this one run."""
    return notebook_clone.run_at_defaults(tmp_path_factory.mktemp("notebooks_at_defaults"))

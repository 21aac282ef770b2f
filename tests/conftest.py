"""Fixtures shared by the test files: a tiny warm-started model, and a clean method registry."""

from __future__ import annotations

import pytest

from skillgate_lib import methods
from skillgate_lib.policy.warmstart import WarmStartConfig, warmstart


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

"""Notebook hygiene (no outputs, a literal-only parameters cell) and headless execution."""

from __future__ import annotations

import ast
import json

import pytest

from skillgate_lib import notebooks

NOTEBOOKS = notebooks.notebook_paths()
ids = [p.stem for p in NOTEBOOKS]


def _cells(path):
    return json.loads(path.read_text())["cells"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_committed_notebook_carries_no_outputs(path):
    for i, cell in enumerate(_cells(path)):
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"{path.name}: cell {i} has outputs; clear them before committing"
            assert cell.get("execution_count") is None, f"{path.name}: cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_parameters_cell_holds_literals_only(path):
    tagged = [c for c in _cells(path) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: expected exactly one cell tagged 'parameters', found {len(tagged)}"
    tree = ast.parse("".join(tagged[0]["source"]))
    for node in tree.body:
        assert isinstance(node, ast.Assign), f"{path.name}: parameters cell line {node.lineno} is not an assignment"
        ast.literal_eval(node.value)  # raises on anything but a literal


def test_hygiene_check_catches_outputs(tmp_path):
    """The check above can fail: a notebook with an output is caught."""
    bad = tmp_path / "99_bad.ipynb"
    bad.write_text(json.dumps({"cells": [{"cell_type": "code", "outputs": [{"x": 1}], "execution_count": 3,
                                          "metadata": {}, "source": []}]}))
    with pytest.raises(AssertionError):
        test_committed_notebook_carries_no_outputs(bad)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_notebook_runs_headless(path, tmp_path, monkeypatch):
    # Figures from a test run go to a scratch folder, never over the committed ones.
    monkeypatch.setenv("SKILLGATE_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("SKILLGATE_BUILD", str(tmp_path / "build"))
    out = notebooks.run_notebook(path, tmp_path / "executed")
    executed = json.loads(out.read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors

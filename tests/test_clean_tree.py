"""Running a notebook at its defaults leaves every file git tracks as it was.

Every notebook but 03 writes figures and tables; at their defaults they go under ``build/``
(ignored), and only the ``make figures`` / ``make reproduce`` profiles point them at
``figures/``. The check reads the session's one run of those notebooks in a clone of the repository that
holds the working tree as it is (``notebooks_at_defaults``, :mod:`notebook_clone`), so a notebook that wrote
into ``figures/`` or ``data/`` shows up in that clone's ``git status``, or, if it wrote the same bytes, in the
files' modification times.
"""

from __future__ import annotations

import pytest

from skillgate_lib import paths

import notebook_clone
from notebook_clone import git

ROOT = paths.REPO_ROOT


@pytest.mark.slow
def test_notebooks_at_their_defaults_leave_the_tracked_tree_unchanged(notebooks_at_defaults):
    """Every notebook but those that train (``notebook_clone.TRAINS``), run at its defaults."""
    run = notebooks_at_defaults
    assert run.returncode == 0, run.stderr
    assert set(run.notebooks) == set(notebook_clone.at_defaults()) >= {"01_credit_starvation_theory", "04_paper_figures"}
    failed = {name: nb["error"] for name, nb in run.notebooks.items() if nb["error"]}
    assert not failed, failed  # a notebook that stopped early may have left writes undone
    assert run.status_after == run.status_before, f"a notebook changed what git sees:\n{run.status_after}"
    assert not run.touched, f"rewritten with the same bytes: {run.touched}"  # a figure regenerated identically was still written
    silent = [name for name, nb in run.notebooks.items() if not nb["wrote"]]
    assert not silent, f"wrote nothing under build/figures at their defaults: {silent}"
    written = {p.name for p in (run.clone / "build" / "figures").glob("*")}
    assert {"theory_share.png", "audit_gradient_share.png", "fig1_teaser.png", "results_table.md",
            "rate_curves.png", "pretrained_probe.png"} <= written, sorted(written)


def test_the_clean_tree_check_sees_a_rewritten_figure(tmp_path):
    """The check above can fail: a file rewritten in the clone shows in its status."""
    clone = tmp_path / "clone"
    git("clone", "-q", "--no-hardlinks", "--depth", "1", f"file://{ROOT}", str(clone), cwd=ROOT)
    (clone / "figures" / "results_table.md").write_text("rewritten\n")
    assert "figures/results_table.md" in git("status", "--porcelain", cwd=clone)


def test_a_notebook_that_fails_in_the_clone_is_recorded_and_the_next_still_runs(tmp_path):
    """The shared run reports a failing notebook by name with its error (the headless checks read that), and goes
    on to the next (here none runs a kernel: both names are missing)."""
    run = notebook_clone.run_at_defaults(tmp_path, names=("no_such_notebook", "nor_this_one"))
    assert run.returncode == 0, run.stderr
    assert set(run.notebooks) == {"no_such_notebook", "nor_this_one"}
    assert "no_such_notebook" in run.notebooks["no_such_notebook"]["error"]
    assert "nor_this_one" in run.notebooks["nor_this_one"]["error"]

"""Running a notebook at its defaults leaves every file git tracks as it was.

Notebooks 01, 02, 04 and 05 write figures and tables; at their defaults they go under ``build/``
(ignored), and only the ``make figures`` / ``make reproduce`` profiles point them at
``figures/``. The check runs in a clone of the repository that holds the working tree as it
is (committed or not), so a notebook that wrote into ``figures/`` or ``data/`` shows up in
that clone's ``git status``, or, if it wrote the same bytes, in the files' modification times.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skillgate_lib import paths

ROOT = paths.REPO_ROOT


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def _clone_of_the_working_tree(dest: Path) -> Path:
    """A clone whose HEAD is this working tree: tracked and untracked (not ignored) files as they are now."""
    _git("clone", "-q", "--no-hardlinks", str(ROOT), str(dest), cwd=ROOT)
    files = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).split("\0")
    for rel in filter(None, files):
        src, out = ROOT / rel, dest / rel
        if src.is_file():
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)
        elif out.exists():  # deleted in the working tree
            out.unlink()
    _git("add", "-A", cwd=dest)
    _git("-c", "user.name=test", "-c", "user.email=test@example.invalid", "commit", "-q", "--allow-empty",
         "--no-verify", "-m", "the working tree", cwd=dest)
    assert _git("status", "--porcelain", cwd=dest) == ""
    return dest


@pytest.mark.slow
def test_notebooks_01_02_04_05_and_06_at_their_defaults_leave_the_tracked_tree_unchanged(tmp_path):
    clone = _clone_of_the_working_tree(tmp_path / "clone")
    tracked = [clone / rel for rel in _git("ls-files", "-z", cwd=clone).split("\0") if rel]
    before = {p: p.stat().st_mtime_ns for p in tracked}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLGATE_")}
    env["PYTHONPATH"] = str(clone)  # the clone's library, not the editable install's
    code = ("import sys\nfrom pathlib import Path\nfrom skillgate_lib import notebooks, paths\n"
            "assert paths.REPO_ROOT == Path(sys.argv[1]), paths.REPO_ROOT\n"
            "for name in ('01_credit_starvation_theory', '02_audit_training_logs', '04_paper_figures',\n"
            "             '05_what_starves_the_selector', '06_a_pretrained_model'):\n"
            "    notebooks.run_notebook(notebooks.NOTEBOOK_DIR / f'{name}.ipynb', Path(sys.argv[2]))\n")
    done = subprocess.run([sys.executable, "-c", code, str(clone), str(tmp_path / "executed")], cwd=clone, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _git("status", "--porcelain", "--untracked-files=all", cwd=clone) == "", "a notebook rewrote tracked files"
    touched = sorted(str(p.relative_to(clone)) for p in tracked if p.stat().st_mtime_ns != before[p])
    assert not touched, f"rewritten with the same bytes: {touched}"  # a figure regenerated identically was still written
    written = {p.name for p in (clone / "build" / "figures").glob("*")}
    assert {"theory_share.png", "audit_gradient_share.png", "fig1_teaser.png", "results_table.md",
                       "pretrained_probe.png"} <= written, sorted(written)


def test_the_clean_tree_check_sees_a_rewritten_figure(tmp_path):
    """The check above can fail: a file rewritten in the clone shows in its status."""
    clone = tmp_path / "clone"
    _git("clone", "-q", "--no-hardlinks", "--depth", "1", f"file://{ROOT}", str(clone), cwd=ROOT)
    (clone / "figures" / "results_table.md").write_text("rewritten\n")
    assert "figures/results_table.md" in _git("status", "--porcelain", cwd=clone)

"""The notebooks that run at their defaults, run once for the whole test session in a clone of the working tree.

Two checks read the same run: every such notebook runs headless without an error
(``tests/test_notebooks.py``), and running them leaves every file git tracks as it was
(``tests/test_clean_tree.py``). Running them once, in the clone, serves both and notebook 04's checks of
what it prints and draws; each ran them on its own before (about two minutes of CI).

The clone holds the working tree as it is (committed or not), so a notebook that wrote into ``figures/``
or ``data/`` shows up in the clone's ``git status``, or, if it wrote the same bytes, in the files'
modification times. The notebooks run one after another in one child process on the clone's library; a
notebook that fails is recorded with its error and the next one still runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from skillgate_lib import paths

ROOT = paths.REPO_ROOT

#: The notebooks run at their defaults in the clone (03 trains at its defaults and runs on its own).
AT_DEFAULTS = ("01_credit_starvation_theory", "02_audit_training_logs", "04_paper_figures",
               "05_what_starves_the_selector", "06_a_pretrained_model")

#: What the child process runs: each notebook, the figures it wrote (name -> modification time changed or new) and
#: its error, if any, into a JSON manifest.
_CHILD = """\
import json, sys, traceback
from pathlib import Path
from skillgate_lib import notebooks, paths
clone, executed, names = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[4:]
assert paths.REPO_ROOT == clone, paths.REPO_ROOT
figures = clone / "build" / "figures"
def seen():
    return {p.name: p.stat().st_mtime_ns for p in figures.glob("*")} if figures.is_dir() else {}
manifest = {}
for name in names:
    before, error = seen(), None
    try:
        notebooks.run_notebook(notebooks.NOTEBOOK_DIR / f"{name}.ipynb", executed)
    except Exception:
        error = traceback.format_exc()[-3000:]
    after = seen()
    manifest[name] = {"error": error, "executed": str(executed / f"{name}.ipynb"),
                      "wrote": sorted(n for n, t in after.items() if before.get(n) != t)}
Path(sys.argv[3]).write_text(json.dumps(manifest, indent=1))
"""


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def clone_of_the_working_tree(dest: Path) -> Path:
    """A clone whose HEAD is this working tree: tracked and untracked (not ignored) files as they are now."""
    git("clone", "-q", "--no-hardlinks", str(ROOT), str(dest), cwd=ROOT)
    files = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).split("\0")
    for rel in filter(None, files):
        src, out = ROOT / rel, dest / rel
        if src.is_file():
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)
        elif out.exists():  # deleted in the working tree
            out.unlink()
    git("add", "-A", cwd=dest)
    git("-c", "user.name=test", "-c", "user.email=test@example.invalid", "commit", "-q", "--allow-empty",
        "--no-verify", "-m", "the working tree", cwd=dest)
    assert git("status", "--porcelain", cwd=dest) == ""
    return dest


@dataclass
class CloneRun:
    """What running :data:`AT_DEFAULTS` in a clone left: the child's exit code and stderr, the clone's ``git status``,
    the tracked files rewritten with the same bytes, and per notebook its error (or None), executed copy and the
    figures it wrote under the clone's ``build/figures``."""

    clone: Path
    returncode: int
    stderr: str
    status: str
    touched: list[str]
    notebooks: dict[str, dict]

    def executed(self, name: str) -> dict:
        """The executed copy of notebook ``name`` (its stem), as JSON."""
        return json.loads(Path(self.notebooks[name]["executed"]).read_text())


def run_at_defaults(tmp: Path, names: tuple[str, ...] = AT_DEFAULTS) -> CloneRun:
    """Clone the working tree under ``tmp``, run ``names`` at their defaults there and say what they left."""
    clone = clone_of_the_working_tree(tmp / "clone")
    tracked = [clone / rel for rel in git("ls-files", "-z", cwd=clone).split("\0") if rel]
    before = {p: p.stat().st_mtime_ns for p in tracked}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLGATE_")}
    env["PYTHONPATH"] = str(clone)  # the clone's library, not the editable install's
    manifest = tmp / "manifest.json"
    done = subprocess.run([sys.executable, "-c", _CHILD, str(clone), str(tmp / "executed"), str(manifest), *names],
                          cwd=clone, env=env, capture_output=True, text=True)
    touched = sorted(str(p.relative_to(clone)) for p in tracked if p.stat().st_mtime_ns != before[p])
    return CloneRun(clone=clone, returncode=done.returncode, stderr=done.stderr[-3000:],
                    status=git("status", "--porcelain", "--untracked-files=all", cwd=clone), touched=touched,
                    notebooks=json.loads(manifest.read_text()) if manifest.exists() else {})

"""The notebooks that run at their defaults, run once for the whole test session in a clone of the working tree.

Two checks read the same run: every such notebook runs headless without an error
(``tests/test_notebooks.py``), and running them leaves every file git tracks as it was
(``tests/test_clean_tree.py``). Running them once, in the clone, serves both and notebook 04's checks of
what it prints and draws; each ran them on its own before (about two minutes of CI).

The clone holds the working tree as it is (committed or not, nothing committed on top of this repository's
HEAD), so a notebook that wrote into ``figures/`` or ``data/`` shows up as a change in the clone's ``git status``,
or, if it wrote the same bytes, in the files' modification times. The notebooks run one after another in one child process on the clone's library; a
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

#: Notebooks that train at their defaults: each runs headless on its own, with scratch folders, not in the clone.
TRAINS = ("03_skillgate_lora_finetune",)


def at_defaults() -> tuple[str, ...]:
    """The notebooks run at their defaults in the clone: every notebook of the kit but :data:`TRAINS`."""
    from skillgate_lib import notebooks

    return tuple(p.stem for p in notebooks.notebook_paths() if p.stem not in TRAINS)

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
    """A clone at this repository's HEAD, its history whole, with the working tree's files copied over it (tracked
    and untracked, not ignored, as they are now; deleted ones deleted). Nothing is committed there, so code that
    reads git's history in the clone (which commit added a prediction, which its study) sees what it sees here."""
    git("clone", "-q", "--no-hardlinks", str(ROOT), str(dest), cwd=ROOT)
    files = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).split("\0")
    for rel in filter(None, files):
        src, out = ROOT / rel, dest / rel
        if src.is_file():
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)
        elif out.exists():  # deleted in the working tree
            out.unlink()
    return dest


def _snapshot(clone: Path) -> tuple[str, dict[str, int]]:
    """The clone's ``git status`` and the modification time of every file git sees there (tracked, or untracked and
    not ignored)."""
    files = [rel for rel in git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=clone).split("\0")
             if rel and (clone / rel).is_file()]
    return (git("status", "--porcelain", "--untracked-files=all", cwd=clone),
            {rel: (clone / rel).stat().st_mtime_ns for rel in files})


@dataclass
class CloneRun:
    """What running notebooks at their defaults in a clone left: the child's exit code and stderr, the clone's
    ``git status`` before and after, the files git sees that were rewritten with the same bytes, and per notebook
    its error (or None), executed copy and the figures it wrote under the clone's ``build/figures``."""

    clone: Path
    returncode: int
    stderr: str
    status_before: str
    status_after: str
    touched: list[str]
    notebooks: dict[str, dict]

    def executed(self, name: str) -> dict:
        """The executed copy of notebook ``name`` (its stem), as JSON."""
        return json.loads(Path(self.notebooks[name]["executed"]).read_text())


def run_at_defaults(tmp: Path, names: tuple[str, ...] | None = None) -> CloneRun:
    """Clone the working tree under ``tmp``, run ``names`` (default :func:`at_defaults`) at their defaults there and
    say what they left."""
    names = at_defaults() if names is None else names
    clone = clone_of_the_working_tree(tmp / "clone")
    status_before, before = _snapshot(clone)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLGATE_")}
    env["PYTHONPATH"] = str(clone)  # the clone's library, not the editable install's
    manifest = tmp / "manifest.json"
    done = subprocess.run([sys.executable, "-c", _CHILD, str(clone), str(tmp / "executed"), str(manifest), *names],
                          cwd=clone, env=env, capture_output=True, text=True)
    touched = sorted(rel for rel, t in before.items() if not (clone / rel).is_file()
                     or (clone / rel).stat().st_mtime_ns != t)
    return CloneRun(clone=clone, returncode=done.returncode, stderr=done.stderr[-3000:], status_before=status_before,
                    status_after=git("status", "--porcelain", "--untracked-files=all", cwd=clone), touched=touched,
                    notebooks=json.loads(manifest.read_text()) if manifest.exists() else {})

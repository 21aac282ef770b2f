"""A study's plan precedes its runs, checkably: a study written into the repository starts only from a committed plan.

A study whose records land under ``data/runs/`` (its ``--export`` directory, or its output
directory itself) is a claim the kit reports. Its ``plan.json`` must be in git's ``HEAD`` with
the same content before the first run, so that the commit history shows the protocol was fixed
before the results it judges. ``--dry-run --export DIR`` writes the plan there to commit;
``--uncommitted-plan`` lets a study run anyway, and its README must then say so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from skillgate_lib import paths


class UncommittedPlan(ValueError):
    """The plan of a study that writes under ``data/runs/`` is not committed with the content it runs under."""


def reported_dir(out_dir: Path, export_to: Path | None) -> Path | None:
    """Where a study's records become part of the repository's record: ``export_to`` or ``out_dir`` when under
    ``data/runs/`` (resolved), else None (a scratch study under ``build/`` needs no committed plan)."""
    runs = (paths.DATA_DIR / "runs").resolve()
    for d in (export_to, out_dir):
        if d is not None and Path(d).resolve().is_relative_to(runs):
            return Path(d).resolve()
    return None


def write_plan(plan_json: dict, dest: Path) -> Path:
    """Write ``dest/plan.json`` (refusing to overwrite a different one); returns its path."""
    path = Path(dest) / "plan.json"
    text = json.dumps(plan_json, indent=1) + "\n"
    if path.exists() and json.loads(path.read_text()) != plan_json:
        raise UncommittedPlan(f"{path}: holds another plan; a plan is fixed before its runs: choose another directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def committed_text(path: Path, repo: Path | None = None) -> str | None:
    """``path`` as git's ``HEAD`` holds it in ``repo`` (default: the kit's checkout), or None when it is not committed
    (or ``repo`` is no git checkout)."""
    repo = paths.REPO_ROOT if repo is None else repo
    try:
        rel = Path(path).resolve().relative_to(Path(repo).resolve())
    except ValueError:
        return None
    out = subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{rel.as_posix()}"], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else None


def require_committed(plan_json: dict, dest: Path, command: str, repo: Path | None = None) -> None:
    """Raise :class:`UncommittedPlan` unless ``dest/plan.json`` is committed in ``repo`` with ``plan_json``'s
    content; the message says how to write and commit it (``command``: the study's command line, for the hint)."""
    path = Path(dest) / "plan.json"
    text = committed_text(path, repo)
    if text is None:
        why = "is not committed"
    elif json.loads(text) != plan_json:
        why = "is committed with another plan"
    else:
        return
    raise UncommittedPlan(
        f"{path} {why}: a study reported under data/runs/ runs only from a plan committed before its first run.\n"
        f"  write it:  {command} --dry-run\n  commit it: git add {path} && git commit\n"
        "  or run with --uncommitted-plan, and say so in the study's README")


def add_plan_flags(p: argparse.ArgumentParser) -> None:
    """``--uncommitted-plan``, shared by ``study`` and ``speed`` (:mod:`skillgate_lib.runs.preregister`)."""
    p.add_argument("--uncommitted-plan", action="store_true",
                   help="run although the plan of a study reported under data/runs/ is not committed (its README must "
                        "say so); with --dry-run --export DIR the plan is written to DIR/plan.json to commit")


def preregistration(plan_json: dict, out: Path, export_to: Path | None, dry_run: bool, uncommitted: bool,
                    command: str) -> None:
    """A study reported under ``data/runs/`` starts only from a committed plan; its dry run writes the plan there."""
    dest = reported_dir(out, export_to)
    if dest is None:
        return
    if dry_run:
        path = write_plan(plan_json, dest)
        print(f"plan written to {path}: commit it before the first run")
    elif uncommitted:
        print(f"--uncommitted-plan: {dest / 'plan.json'} is not checked against git; say so in the study's README")
    else:
        require_committed(plan_json, dest, command)

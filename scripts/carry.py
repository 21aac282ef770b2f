"""Carry an unfinished prediction or rate study to a fresh checkout: the files that resume it, staged for a commit.

    python scripts/carry.py data/runs/in_progress/predict/paper_f30.json data/runs/in_progress/speed/paper_f30
    python scripts/carry.py --list data/runs/in_progress/speed/paper_f30    # print them, stage nothing
    python scripts/carry.py --checkpoint-first data/runs/in_progress/speed/paper_f30  # before a machine goes back

A job longer than a machine is lent for (the SmolLM2 lookahead and rate study run for hours to days on
two cores) goes on from the checkout it ran in where that checkout survives, and in a fresh one only through
what is committed. This names what resuming reads:

* a prediction (``predict --out FILE``): the JSON itself, rewritten after every finished run;
* a study (``speed --out-dir DIR``): ``plan.json`` and ``selection.json``; per run ``config.json`` and
  ``metrics.jsonl``; a finished run's ``adapter/`` (what marks it finished, and what its test record is
  evaluated from) and ``test.json``; the step-0 evaluation its runs share (``step0_eval/``,
  :mod:`skillgate_lib.runs.warm_eval`: several minutes of SmolLM2's time; read only while the code, package
  versions, chip and settings are unchanged).

An interrupted run (its ``checkpoint.pt``, ``config.json`` and ``metrics.jsonl``) is carried only with
``--checkpoints``. SmolLM2's checkpoint is 11 MB (LoRA weights and AdamW's two moments), and every carry would add
one to the history for good: about 190 MB over the study. Without it the checkout that trained the run resumes from
the checkpoint on its disk; a fresh clone trains each interrupted run again from step 0, to the same numbers, losing
its time so far (about 2 h a run for SmolLM2 here, where one run trains at a time). And since nothing tracked then
changes while the study trains (new files here are ignored), the study may run on after the commit: the working tree
stays clean. A finished run's checkpoint, the trajectory tables and the sample logs stay behind: resuming never
reads them. Files tracked under a carried study that it no longer carries (an interrupted run carried before, a
finished run's stale checkpoint) are untracked (``git rm --cached``) and stay on disk: commit with no paths
(``git commit -m ...``), since a commit that names paths takes their working-tree files and would add them back. In
the checkout a study runs in, never check out, reset to or bisect a commit that still tracks a run it is training:
git would overwrite that run's files with the committed ones (or delete them on the way back); read old commits with
``git show`` or from another worktree. (A prediction's JSON is rewritten after every run, so it does change while
``predict`` runs.)

``--checkpoint-first`` asks the run training in a study for a checkpoint now (``checkpoint.now``, read by
:func:`skillgate_lib.runs.train.checkpoint_requested`) and waits until it is written (after the step in progress
and its evaluation: minutes for SmolLM2), so that resuming, from this checkout or with ``--checkpoints`` from a
fresh one, trains that step again at most. The files are staged with ``git add -f``
(``data/runs/in_progress/.gitignore`` ignores everything else there), so ``git status`` stays clean while a job
writes. Exits 1, naming the path, where a path is neither.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

STUDY_FILES = ("plan.json", "selection.json")
SHARED_EVAL = "step0_eval"  # skillgate_lib.runs.warm_eval.FOLDER (this script runs without the library)
RUN_FILES = ("config.json", "metrics.jsonl", "test.json")
CHECKPOINT_REQUEST = "checkpoint.now"  # skillgate_lib.runs.train.CHECKPOINT_REQUEST


def carried(path: Path, checkpoints: bool = False) -> list[Path]:
    """The files that resume the prediction (a ``.json`` file) or study (a directory with ``plan.json``) at ``path``;
    an interrupted run's files (its checkpoint, config and log) only with ``checkpoints``: without its checkpoint,
    resuming trains it again from step 0 and its log is rewritten."""
    if path.is_file() and path.suffix == ".json":
        return [path]
    if not (path / "plan.json").is_file():
        raise ValueError(f"{path}: neither a prediction's JSON nor a study's directory (no plan.json)")
    out = [path / name for name in STUDY_FILES if (path / name).is_file()]
    out += sorted((path / SHARED_EVAL).glob("*.pt"))
    for run in sorted(d for d in path.iterdir() if (d / "config.json").is_file()):
        adapter = run / "adapter"
        if (adapter / "adapter_config.json").is_file():
            out += [run / name for name in RUN_FILES if (run / name).is_file()]
            out += sorted(p for p in adapter.rglob("*") if p.is_file())
        elif checkpoints and (run / "checkpoint.pt").is_file():
            out += [run / name for name in RUN_FILES if (run / name).is_file()] + [run / "checkpoint.pt"]
    return out


def untrack_others(path: Path, keep: list[Path]) -> list[str]:
    """Untrack (``git rm --cached``; the files stay on disk) what git tracks under the study ``path`` but ``keep``
    does not hold; returns those paths. Nothing for a prediction's JSON."""
    if not path.is_dir():
        return []
    tracked = subprocess.run(["git", "--literal-pathspecs", "ls-files", "-z", "--", str(path)], capture_output=True,
                             text=True, check=True).stdout.split("\0")
    kept = {Path(k).resolve() for k in keep} | {(path / name).resolve() for name in (".gitignore", "README.md")}
    stale = [t for t in tracked if t and Path(t).resolve() not in kept]
    if stale:
        # -f: a file staged earlier and changed since is untracked too (git refuses that without it); it stays on disk
        subprocess.run(["git", "--literal-pathspecs", "rm", "-q", "--cached", "-f", "--", *stale], check=True)
    return stale


def _newer(path: Path, than: int) -> bool:
    return path.exists() and path.stat().st_mtime_ns > than


def checkpoint_first(study: Path, timeout_s: float, poll_s: float = 5.0) -> list[Path]:
    """Ask the runs training in ``study`` for a checkpoint (touch ``study/checkpoint.now``) and wait until each run
    that logs a step after the request has written one after it too; returns those runs. Empty where every run is
    finished, or none logged a step within ``timeout_s`` (nothing is training there); raises TimeoutError naming a
    run that logged one but wrote no checkpoint in time. The request stays: a served one asks for nothing more, and
    removing it could race a trainer between its ``exists()`` and ``stat()`` of the file
    (``train.checkpoint_requested``); its one cost is that a run starting later, with no checkpoint yet, writes one
    after its first step."""
    request = study / CHECKPOINT_REQUEST
    request.touch()
    asked = request.stat().st_mtime_ns
    deadline = time.monotonic() + timeout_s
    while True:
        unfinished = [d for d in study.iterdir() if (d / "config.json").is_file() and not (d / "adapter").exists()]
        if not unfinished:
            return []
        active = [d for d in unfinished if _newer(d / "metrics.jsonl", asked)]
        waiting = [d for d in active if not _newer(d / "checkpoint.pt", asked)]
        if active and not waiting:
            return sorted(active)
        if time.monotonic() > deadline:
            if waiting:
                raise TimeoutError(f"{', '.join(map(str, waiting))}: logged a step after {request} but wrote no "
                                   f"checkpoint within {timeout_s:.0f} s")
            return []
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", type=Path, help="a prediction's JSON or a study's --out-dir")
    p.add_argument("--list", action="store_true", help="print the files, stage nothing")
    p.add_argument("--checkpoint-first", action="store_true",
                   help="ask each study's training run for a checkpoint now and wait for it before carrying")
    p.add_argument("--checkpoints", action="store_true",
                   help="also carry interrupted runs' checkpoints (a fresh clone then resumes them mid-run; each adds "
                        "its size to the history for good)")
    p.add_argument("--timeout", type=float, default=1200, help="seconds --checkpoint-first waits (default 1200)")
    args = p.parse_args(argv)
    if args.checkpoint_first:
        for path in args.paths:
            if path.is_dir() and (path / "plan.json").is_file():
                print(f"carry: asked {path} for a checkpoint; waiting (at most {args.timeout:.0f} s)", file=sys.stderr)
                try:
                    runs = checkpoint_first(path, args.timeout)
                except TimeoutError as e:
                    print(f"carry: {e}", file=sys.stderr)
                    return 1
                print(f"carry: checkpoint written by {', '.join(d.name for d in runs)}" if runs
                      else f"carry: no run is training in {path}; carrying what is there", file=sys.stderr)
    files = []
    for path in args.paths:
        try:
            files += carried(path, args.checkpoints)
        except ValueError as e:
            print(f"carry: {e}", file=sys.stderr)
            return 1
    size = sum(f.stat().st_size for f in files)
    for f in files:
        print(f)
    print(f"{len(files)} files, {size / 1e6:.1f} MB", file=sys.stderr)
    behind = [c.parent for path in args.paths if path.is_dir() for c in sorted(path.glob("*/config.json"))
              if c not in files]
    for run in behind:
        here = ("this checkout resumes it from its checkpoint" if (run / "checkpoint.pt").is_file()
                else "it has no checkpoint yet, so this checkout too trains it again from step 0")
        print(f"carry: not carried, the interrupted run {run.name}: {here}; a fresh clone trains it again from step 0"
              + ("" if args.checkpoints else " (--checkpoints carries it)"), file=sys.stderr)
    if not args.list:
        if files:
            subprocess.run(["git", "--literal-pathspecs", "add", "-f", "--", *map(str, files)], check=True)
        for path in args.paths:
            if stale := untrack_others(path, files):
                print(f"carry: untracked (kept on disk): {', '.join(stale)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Carry an unfinished prediction or rate study to a fresh checkout: the files that resume it, staged for a commit.

    python scripts/carry.py data/runs/in_progress/predict/paper_f30.json data/runs/in_progress/speed/paper_f30
    python scripts/carry.py --list data/runs/in_progress/speed/paper_f30    # print them, stage nothing

A job longer than a machine is lent for (the SmolLM2 lookahead and rate study run for hours to days on
two cores) goes on in the next checkout only through what is committed. This names what resuming reads:

* a prediction (``predict --out FILE``): the JSON itself, rewritten after every finished run;
* a study (``speed --out-dir DIR``): ``plan.json`` and ``selection.json``; per run ``config.json`` and
  ``metrics.jsonl``; a finished run's ``adapter/`` (what marks it finished, and what its test record is
  evaluated from) and ``test.json``; an interrupted run's ``checkpoint.pt`` (the steps after it are run again,
  to the same numbers); the step-0 evaluation its runs share (``step0_eval/``, :mod:`skillgate_lib.runs.warm_eval`:
  several minutes of SmolLM2's time; read only while the code, package versions, chip and settings are unchanged).
  A finished run's checkpoint, the trajectory tables and the sample logs stay behind: resuming never reads them.

The files are staged with ``git add -f`` (``data/runs/in_progress/.gitignore`` ignores everything else there),
so ``git status`` stays clean while a job writes. Exits 1, naming the path, where a path is neither.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

STUDY_FILES = ("plan.json", "selection.json")
SHARED_EVAL = "step0_eval"  # skillgate_lib.runs.warm_eval.FOLDER (this script runs without the library)
RUN_FILES = ("config.json", "metrics.jsonl", "test.json")


def carried(path: Path) -> list[Path]:
    """The files that resume the prediction (a ``.json`` file) or study (a directory with ``plan.json``) at ``path``."""
    if path.is_file() and path.suffix == ".json":
        return [path]
    if not (path / "plan.json").is_file():
        raise ValueError(f"{path}: neither a prediction's JSON nor a study's directory (no plan.json)")
    out = [path / name for name in STUDY_FILES if (path / name).is_file()]
    out += sorted((path / SHARED_EVAL).glob("*.pt"))
    for run in sorted(d for d in path.iterdir() if (d / "config.json").is_file()):
        out += [run / name for name in RUN_FILES if (run / name).is_file()]
        adapter = run / "adapter"
        if (adapter / "adapter_config.json").is_file():
            out += sorted(p for p in adapter.rglob("*") if p.is_file())
        elif (run / "checkpoint.pt").is_file():
            out.append(run / "checkpoint.pt")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", type=Path, help="a prediction's JSON or a study's --out-dir")
    p.add_argument("--list", action="store_true", help="print the files, stage nothing")
    args = p.parse_args(argv)
    files = []
    for path in args.paths:
        try:
            files += carried(path)
        except ValueError as e:
            print(f"carry: {e}", file=sys.stderr)
            return 1
    size = sum(f.stat().st_size for f in files)
    for f in files:
        print(f)
    print(f"{len(files)} files, {size / 1e6:.1f} MB", file=sys.stderr)
    if not args.list and files:
        subprocess.run(["git", "add", "-f", "--", *map(str, files)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

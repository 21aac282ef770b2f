"""Does a re-run of a rate study reproduce the study it re-runs?

    python scripts/rerun_check.py data/runs/speed/paper_note8 build/rerun/paper_note8    # a committed study, its re-run

Both folders are exports of ``python -m skillgate_lib speed`` (``plan.json``, ``selection.json``, one folder
per run with ``config.json`` and ``metrics.jsonl``). The re-run may add metrics (the choice, ``eval/choice*``)
and config fields (settings the code has gained since, at their defaults), and differ in wall times and in
where it ran (``time/*``, ``run_dir``); every other number the first study logged must be equal, to the last
digit, in the run of the same name. Prints one line per run and a verdict; exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

IGNORED_METRICS = ("time/",)  # wall times: never reproduced
IGNORED_CONFIG = {"run_dir"}  # where the run was written
IGNORED_TEST = {"seconds"}  # the test record's wall time


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def compare_run(old: Path, new: Path) -> list[str]:
    """What differs between two runs of the same name (empty: the re-run reproduces the first): each of
    ``config.json``, ``test.json`` and ``metrics.jsonl`` the first run has must be in the re-run, equal but for
    what is ignored."""
    problems = []
    for name in ("config.json", "test.json", "metrics.jsonl"):
        if (old / name).exists() and not (new / name).exists():
            problems.append(f"{name} missing in the re-run")
    if problems:
        return problems
    for name, ignored in (("config.json", IGNORED_CONFIG), ("test.json", IGNORED_TEST)):
        if not (old / name).exists():
            continue
        a, b = (json.loads((d / name).read_text()) for d in (old, new))
        for key in sorted(set(a) - ignored):
            if key not in b:
                problems.append(f"{name}: {key} missing in the re-run")
            elif a[key] != b[key]:
                problems.append(f"{name}: {key} {a[key]!r} -> {b[key]!r}")
    if not (old / "metrics.jsonl").exists():
        return problems
    old_rows, new_rows = _rows(old / "metrics.jsonl"), _rows(new / "metrics.jsonl")
    if len(old_rows) != len(new_rows):
        problems.append(f"metrics.jsonl: {len(old_rows)} rows -> {len(new_rows)}")
    for i, (a, b) in enumerate(zip(old_rows, new_rows), start=1):
        for key, value in a.items():
            if key.startswith(IGNORED_METRICS):
                continue
            if key not in b:
                problems.append(f"metrics.jsonl line {i}: {key} missing in the re-run")
            elif b[key] != value:
                problems.append(f"metrics.jsonl line {i} (step {a.get('step')}, {a.get('split')}): {key} {value!r} -> {b[key]!r}")
    return problems


def compare_study(old: Path, new: Path) -> tuple[list[str], bool]:
    """``(report lines, reproduced)`` for two exports of the same study."""
    lines, ok = [], True
    old_sel, new_sel = (json.loads((d / "selection.json").read_text()) for d in (old, new))
    for arm in sorted(old_sel):
        before, after = old_sel[arm].get("value"), new_sel.get(arm, {}).get("value")
        if before != after:
            lines.append(f"selection.json: {arm} chose {before} in the study, {after} in the re-run")
            ok = False
    runs = lambda d: {p.name for p in d.iterdir() if (p / "metrics.jsonl").exists() or (p / "test.json").exists()}  # noqa: E731
    old_runs, new_runs = runs(old), runs(new)
    for name in sorted(old_runs - new_runs):
        lines.append(f"{name}: not in the re-run")
        ok = False
    for name in sorted(new_runs - old_runs):
        lines.append(f"{name}: new in the re-run (no run of that name to compare)")
    for name in sorted(old_runs & new_runs):
        problems = compare_run(old / name, new / name)
        ok &= not problems
        keys = lambda d: {k for r in _rows(d / "metrics.jsonl") for k in r} if (d / "metrics.jsonl").exists() else set()  # noqa: E731
        extra = sorted(keys(new / name) - keys(old / name))
        lines.append(f"{name}: " + ("reproduced" + (f" (adds {', '.join(extra)})" if extra else "") if not problems
                                    else f"{len(problems)} differences; first: {problems[0]}"))
    return lines, ok


def difference_summary(old: Path, new: Path) -> list[dict]:
    """Where a re-run differs, by logged number: for each metric (and test field) that differs anywhere, in how many
    records it differs, in which splits, in how many runs, and its largest relative difference. A re-run on another
    CPU differs by rounding first (training diagnostics such as the loss), and only where a rounding flips a sampled
    token does a rollout or an evaluation change; this tells the two apart."""
    seen: dict[str, dict] = {}

    def note(key: str, split: str, run: str, a, b) -> None:
        s = seen.setdefault(key, {"metric": key, "records": 0, "splits": set(), "runs": set(), "max_rel": 0.0})
        s["records"] += 1
        s["splits"].add(split)
        s["runs"].add(run)
        try:
            rel = abs(b - a) / max(abs(a), 1e-12)
        except TypeError:
            rel = math.inf
        s["max_rel"] = max(s["max_rel"], rel)

    for run in sorted(p.name for p in old.iterdir() if p.is_dir() and (new / p.name).is_dir()):
        if (old / run / "metrics.jsonl").exists() and (new / run / "metrics.jsonl").exists():
            for a, b in zip(_rows(old / run / "metrics.jsonl"), _rows(new / run / "metrics.jsonl")):
                for key, value in a.items():
                    if not key.startswith(IGNORED_METRICS) and key in b and b[key] != value:
                        note(key, str(a.get("split")), run, value, b[key])
        if (old / run / "test.json").exists() and (new / run / "test.json").exists():
            a, b = (json.loads((d / run / "test.json").read_text()) for d in (old, new))
            for key in sorted(set(a) - IGNORED_TEST):
                if key in b and a[key] != b[key]:
                    note(key, "test", run, a[key], b[key])
    return [{**s, "splits": sorted(s["splits"]), "runs": len(s["runs"])}
            for s in sorted(seen.values(), key=lambda s: (-s["records"], s["metric"]))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="the committed export (data/runs/speed/<study>)")
    parser.add_argument("rerun", type=Path, help="the re-run's export")
    args = parser.parse_args(argv)
    for d in (args.study, args.rerun):
        if not (d / "selection.json").exists():
            parser.error(f"{d}: no selection.json (not an export of `python -m skillgate_lib speed`)")
    lines, ok = compare_study(args.study, args.rerun)
    print("\n".join(lines))
    print(f"{args.rerun}: " + ("every number the first study logged is reproduced" if ok else "NOT reproduced"))
    if not ok:
        print("where it differs (records, splits, runs, largest relative difference):")
        for s in difference_summary(args.study, args.rerun):
            print(f"  {s['metric']}: {s['records']} records ({', '.join(s['splits'])}) in {s['runs']} runs, "
                  f"up to {s['max_rel']:.2g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

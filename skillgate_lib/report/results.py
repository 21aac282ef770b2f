"""Reading a comparison's results, apart from running it: runs, their configs, final and curve metrics.

A comparison directory (``data/runs/compare/``, ``build/runs/compare/``) holds one folder
per run (``config.json``, ``metrics.jsonl``, ``trajectories/``), plus ``lr_selection.json``
when it searched learning rates. Everything here only reads those files and imports no
trainer, so the figures and the table can be rebuilt on a machine that trains nothing
(``make figures``, notebook 04).

Each run reports two evaluations: its first, labelled ``sft`` (the warm start, since LoRA
starts at zero), and its last, labelled with the run's method. A skill-free run gives no
``sft`` row: runs from before skill-free RL was evaluated on the slate evaluated their step 0
without one (not the reference), and on the slate it repeats the other runs' ``sft`` row.
:func:`reported_evals` is that rule, written once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from skillgate_lib import logs, methods
from skillgate_lib.logs import ArtifactError

method_of = methods.of_config
"""The method name of a run from its ``config.json``."""

SFT = "sft"
"""The results-only row every run's step-0 evaluation stands for (see :data:`skillgate_lib.methods.METHODS`)."""


@dataclass(frozen=True)
class RunDirectory:
    """One run directory and what its ``config.json`` says."""

    path: Path
    config: dict

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def method(self) -> str:
        return method_of(self.config)

    @property
    def seed(self) -> int:
        return int(self.config["seed"])


def _run_dirs(root: str | Path) -> list[Path]:
    runs = sorted(p for p in Path(root).iterdir() if (p / "metrics.jsonl").exists())
    if not runs:
        raise FileNotFoundError(f"{root}: no run directories (with metrics.jsonl) inside")
    return runs


def runs(root: str | Path, selected_only: bool = True) -> list[RunDirectory]:
    """The runs under ``root`` sorted by name; ``selected_only``: only those at each method's selected lr.

    Without ``lr_selection.json`` (no learning-rate search) every run is selected.
    """
    found = [RunDirectory(p, logs.read_config(p)) for p in _run_dirs(root)]
    sel = Path(root) / "lr_selection.json"
    if not selected_only or not sel.exists():
        return found
    chosen = json.loads(sel.read_text())
    return [r for r in found if r.method in chosen and float(r.config["lr"]) == float(chosen[r.method]["lr"])]


def runs_at_selected_lr(root: str | Path) -> list[Path]:
    """The run directories under ``root`` at each method's selected learning rate, sorted by name."""
    return [r.path for r in runs(root)]


def _evals(run: RunDirectory) -> pd.DataFrame:
    """The run's evaluation rows of ``metrics.jsonl``, one per step (a step logged twice is an error)."""
    ev = logs.read_metrics(run.path).query("split == 'eval'")
    twice = sorted(set(ev.loc[ev["step"].duplicated(), "step"].astype(int)))
    if twice:
        raise ArtifactError(f"{run.path / 'metrics.jsonl'}: field 'step': evaluation of step(s) {twice} logged more "
                            "than once; expected one per step (did two processes write this run?)")
    return ev.set_index("step", drop=False).sort_index()


def reported_evals(run: RunDirectory, steps) -> list[tuple[str, int]]:
    """``(row label, step)`` of the evaluations ``run`` reports, given its evaluated ``steps``.

    The first step as ``sft`` unless the run's method is skill-free, then the last step as
    the run's method.
    """
    steps = sorted(set(int(s) for s in steps))
    first = [(SFT, steps[0])] if not methods.get(run.method).skill_free else []
    return [*first, (run.method, steps[-1])]


def final_metrics(root: str | Path, selected_only: bool = True) -> pd.DataFrame:
    """One row per reported evaluation (:func:`reported_evals`) of every run under ``root``.

    Columns: method, seed, step, run and the run's ``eval/*`` metrics.
    """
    rows = []
    for run in runs(root, selected_only):
        ev = _evals(run)
        for label, step in reported_evals(run, ev["step"]):
            rec = ev.loc[step]
            rows.append({"method": label, "seed": run.seed, "step": step, "run": run.name,
                         **{k: rec[k] for k in ev.columns if k.startswith("eval/")}})
    return pd.DataFrame(rows)


def learning_curves(root: str | Path, selected_only: bool = True) -> pd.DataFrame:
    """Held-out evaluation by step for every (selected) run under ``root``: columns method, seed, step, eval/*."""
    frames = []
    for run in runs(root, selected_only):
        frames.append(_evals(run).reset_index(drop=True).assign(method=run.method, seed=run.seed))
    cols = ["method", "seed", "step"] + sorted(c for c in frames[0].columns if c.startswith("eval/") and c.count("/") == 1)
    return pd.concat(frames, ignore_index=True)[cols]


def final_eval_trajectories(root: str | Path) -> pd.DataFrame:
    """Eval trajectories (one row per rollout) of the reported evaluations of every selected run.

    Adds ``method`` (the row label: ``sft`` or the run's method), ``seed``, ``run`` and per
    rollout ``oracle_read`` / ``misleading_read`` (read at least once) and ``reads``. Every
    run's step-0 evaluation is the same warm start, so one ``sft`` copy per seed is kept.
    """
    frames = []
    for run in runs(root):
        ev = logs.read_run(run.path, split="eval")
        for label, step in reported_evals(run, ev["step"]):
            frames.append(ev[ev["step"] == step].assign(method=label, seed=run.seed, run=run.name))
    df = pd.concat(frames, ignore_index=True)
    df["oracle_read"] = df["read_categories"].map(lambda c: "oracle" in c)
    df["misleading_read"] = df["read_categories"].map(lambda c: "misleading" in c)
    df["reads"] = df["read_categories"].map(len)
    sft = df[df["method"] == SFT].drop_duplicates(["seed", "task_id", "rollout"])
    return pd.concat([sft, df[df["method"] != SFT]], ignore_index=True)

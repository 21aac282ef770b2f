"""What the policy writes after reading the oracle: the body's value, or the family's shared one?

In a regime with look-alike agreement (``paper``), each variant of a family takes the family's
shared value at a key with probability sqrt(agreement). A step line that writes the shared
value is right after *any* read of the family whenever the oracle took it too, so outcome
reward can teach execution to ignore the body. This script measures it: for trials whose last
served read is the oracle, each well-formed step line ``step k : s v`` is sorted by whether the
oracle's table agrees with the shared value at ``s``, and by what ``v`` is (the oracle's value,
the shared value, another value). Runs on the test set of the regime the runs were trained in::

    python scripts/execution_diagnosis.py data/runs/study/paper/outcome-lr0.005-seed3 \\
        data/runs/study/paper/skillgate-selector_coef0.2-seed3 --warmstart --tasks 512
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd
import torch

from skillgate_lib.env import regimes
from skillgate_lib.env.domains import family_tables
from skillgate_lib.policy.models import load_policy
from skillgate_lib.runs.evaluate import evaluate, load_adapter

_STEP = re.compile(r"step (\d+) : (\S+) (\S+)")


def step_lines(episodes, env) -> pd.DataFrame:
    """One row per well-formed step line after an oracle-last read: agreement and what was written."""
    rows = []
    for e in episodes:
        last = e.outcome.last_served
        if last is None or last.category != "oracle":
            continue
        oracle = env.tables[e.task.oracle]
        shared = family_tables(e.task.domain, e.task.family)[1]
        after = e.text.rsplit("</body>", 1)[-1]
        for m in _STEP.finditer(after):
            s, v = m.group(2), m.group(3)
            if s not in oracle:
                continue
            agree = oracle[s] == shared[s]
            wrote = "oracle" if v == oracle[s] else "shared" if v == shared[s] else "other"
            rows.append({"key_agrees_with_shared": agree, "wrote": wrote})
    return pd.DataFrame(rows)


def summarize(df: pd.DataFrame) -> dict:
    out = {"lines": len(df)}
    for agree, sub in df.groupby("key_agrees_with_shared"):
        tag = "shared_key" if agree else "own_key"
        out[f"{tag}_lines"] = len(sub)
        for w in ("oracle", "shared", "other"):
            out[f"{tag}_{w}"] = float((sub["wrote"] == w).mean())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="*", type=Path, help="run directories with a final adapter")
    p.add_argument("--warmstart", action="store_true", help="also the warm start (model tiny)")
    p.add_argument("--regime", default="paper")
    p.add_argument("--tasks", type=int, default=512)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    regime = regimes.get(a.regime)
    env = regime.env()
    targets = ([("warm start", None)] if a.warmstart else []) + [(r.name, r) for r in a.runs]
    rows = []
    for name, run in targets:
        model, tokenizer = load_policy("tiny") if run is None else load_adapter(run)[:2]
        eps = evaluate(model, tokenizer, env, a.tasks, regime.max_new_tokens, split="test")
        rows.append({"model": name, **summarize(step_lines(eps, env))})
    table = pd.DataFrame(rows).set_index("model")
    print(table.round(3).to_markdown())


if __name__ == "__main__":
    main()

"""A SYNTHETIC kit run drawn from the theory model: the audit's fixture (tests, benchmark, notebook 02's demo)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from skillgate_lib import theory
from skillgate_lib.logs import TRAJECTORY_SCHEMA, RunWriter


def write_synthetic_log(run_dir: str | Path, n_rows: int, model: theory.StarvationModel | None = None,
                        horizons: Sequence[int] = tuple(range(1, 9)), rows_per_step: int = 4096,
                        extra_read: float = 0.0, seed: int = 0, note: str = "") -> Path:
    """Write a SYNTHETIC kit run of about ``n_rows`` rollouts drawn from the theory model's process.

    Per prompt group (``model.group_size`` rollouts, horizon H uniform over ``horizons``):
    each rollout reads the oracle with probability ``p_oracle``, else a misleading /
    relevant / irrelevant skill (probabilities 0.5 / 0.3 / 0.2); with probability
    ``extra_read`` it adds a second, non-oracle read. It succeeds with probability
    ``q_step**H`` after an oracle read and ``s_wrong`` otherwise (reward = success).
    Each read's name spans ``selector_tokens`` tokens; L = reads*k + base + tps*H. Advantages
    are broadcast GRPO ``(R - mean) / (std + 1e-4)`` (unbiased std), ``sel_weight = k_total / L``.
    Parts are written one step at a time, so memory stays bounded whatever ``n_rows``.
    """
    model = model or theory.StarvationModel()
    run_dir = Path(run_dir)
    writer = RunWriter(run_dir)
    G, k = model.group_size, model.selector_tokens
    rng = np.random.default_rng(seed)
    groups_per_step = max(1, rows_per_step // G)
    n_groups = max(1, -(-n_rows // G))
    other_cats = np.array(["misleading", "relevant", "irrelevant"])
    hs = np.asarray(horizons, dtype=np.int64)
    writer.write_config({"synthetic": True, "note": note or "SYNTHETIC log drawn from theory.StarvationModel",
                         "generator": "skillgate_lib.audit.write_synthetic_log", "n_rows": n_groups * G, "seed": seed,
                         "horizons": hs.tolist(), "extra_read": extra_read, "model": model.__dict__, "credit": "outcome"})
    for step, g0 in enumerate(range(0, n_groups, groups_per_step)):
        ng = min(groups_per_step, n_groups - g0)
        n = ng * G
        H = np.repeat(rng.choice(hs, size=ng), G)
        oracle = rng.random(n) < model.p_oracle
        success = rng.random(n) < np.where(oracle, model.q_step ** H.astype(float), model.s_wrong)
        reward = success.astype(float).reshape(ng, G)
        sd = reward.std(axis=1, ddof=1, keepdims=True)
        adv = ((reward - reward.mean(axis=1, keepdims=True)) / (sd + 1e-4)).ravel()
        n_reads = 1 + (rng.random(n) < extra_read)
        first_cat = np.where(oracle, "oracle", other_cats[rng.choice(3, size=n, p=[0.5, 0.3, 0.2])])
        second_cat = other_cats[rng.choice(3, size=n, p=[0.5, 0.3, 0.2])]
        two = n_reads == 2
        offsets = np.concatenate([[0], np.cumsum(n_reads)])
        total = int(offsets[-1])
        cats = np.empty(total, dtype=object)
        cats[offsets[:-1]] = first_cat
        cats[offsets[:-1][two] + 1] = second_cat[two]
        skill_id = rng.integers(0, 5, size=total)
        names = np.char.add(np.char.add(np.asarray(cats, dtype=str), "-"), skill_id.astype(str))
        pos = np.arange(total) - np.repeat(offsets[:-1], n_reads)  # read index within its row
        starts = 2 + pos * (k + 4)
        L = n_reads * k + model.base_tokens + model.tokens_per_step * H
        ref = lambda values, typ: pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, typ))
        table = pa.table({
            "step": pa.array(np.full(n, step, np.int64)), "split": pa.array(["train"] * n),
            "group_id": pa.array(np.char.add("g", np.repeat(np.arange(g0, g0 + ng), G).astype(str))),
            "rollout": pa.array(np.tile(np.arange(G, dtype=np.int64), ng)),
            "task_id": pa.array(np.char.add("task-", np.repeat(np.arange(g0, g0 + ng), G).astype(str))),
            "domain": pa.array(np.array(["ledger", "recipes", "routing", "inventory", "calendar"])[H % 5]),
            "horizon": pa.array(H), "response_tokens": pa.array(L.astype(np.int64)),
            "reward": pa.array(reward.ravel()), "success": pa.array(success),
            "read_skills": ref(names, pa.string()), "read_categories": ref(cats.astype(str), pa.string()),
            "read_tok_start": ref(starts.astype(np.int64), pa.int64()),
            "read_tok_end": ref((starts + k).astype(np.int64), pa.int64()),
            "adv_exec": pa.array(adv), "read_adv": ref(np.repeat(adv, n_reads), pa.float64()),
            "sel_weight": pa.array(n_reads * k / L), "credit": pa.array(["outcome"] * n),
            "grad_weight_sel": pa.nulls(n, pa.float64()), "grad_weight_all": pa.nulls(n, pa.float64()),
        }, schema=TRAJECTORY_SCHEMA)
        pq.write_table(table, run_dir / "trajectories" / f"step-{step:06d}-train.parquet", compression="zstd",
                       write_page_checksum=True)
    return run_dir

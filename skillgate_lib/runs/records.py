"""Episodes as run artifacts: trajectory-table rows (:mod:`skillgate_lib.logs`) and whole-group samples."""

from __future__ import annotations

import dataclasses

import torch

from skillgate_lib import credit as credit_lib
from skillgate_lib.policy.rollout import Episode


def credit_inputs(episodes: list[Episode], batch: dict, skill_values=None) -> credit_lib.CreditInputs:
    """What a credit assigner reads about ``episodes``, packed as ``batch`` (:func:`~skillgate_lib.policy.batching.pack`)."""
    return credit_lib.CreditInputs(
        rewards=torch.tensor([float(e.outcome.reward) for e in episodes], dtype=torch.float64),
        group=torch.tensor([e.group for e in episodes], dtype=torch.long),
        response_mask=batch["response_mask"],
        reads=[e.read_spans for e in episodes],
        read_names=[list(e.read_names) for e in episodes],
        skill_values=skill_values,
    )


def episode_rows(episodes: list[Episode], step: int, split: str, credit_name: str,
                 cr: credit_lib.Credit | None = None, share: torch.Tensor | None = None) -> list[dict]:
    """Trajectory-table rows (the schema of :mod:`skillgate_lib.logs`) for ``episodes``."""
    rows = []
    for i, e in enumerate(episodes):
        spans = e.read_spans
        o = e.outcome
        L = max(1, e.policy_tokens)
        k = sum(r.name_end - r.name_start for r in spans)
        gw = e.grad_weights()
        rows.append(dict(
            step=step, split=split, group_id=f"{step}-{split}-{e.group}", rollout=i, task_id=e.task.task_id,
            domain=e.task.domain, horizon=e.task.horizon, response_tokens=L, reward=float(o.reward),
            success=bool(o.success), read_skills=list(e.read_names),
            read_categories=[r.category for r in spans], read_tok_start=[r.name_start for r in spans],
            read_tok_end=[r.name_end for r in spans],
            adv_exec=float(cr.adv_exec[i]) if cr is not None else 0.0,
            read_adv=[float(x) for x in cr.read_adv[i]] if cr is not None else [0.0] * len(spans),
            sel_weight=float(share[i]) if share is not None else min(1.0, k / L), credit=credit_name,
            grad_weight_sel=gw[0] if gw else None, grad_weight_all=gw[1] if gw else None,
        ))
    return rows


def group_sample(episodes: list[Episode], tokenizer, step: int, group: int) -> dict:
    """One prompt group token by token, enough to recompute any credit assigner on it."""
    members = [e for e in episodes if e.group == group]
    return {
        "step": step, "group": group, "task_id": members[0].task.task_id, "horizon": members[0].task.horizon,
        "oracle": members[0].slate.oracle,
        "tokens": [tokenizer.convert_ids_to_tokens(e.response_ids) for e in members],
        "policy_mask": [[int(m) for m in e.policy_mask] for e in members],
        "reads": [[dataclasses.asdict(r) for r in e.read_spans] for e in members],
        "read_names": [list(e.read_names) for e in members],
        "rewards": [float(e.outcome.reward) for e in members],
    }



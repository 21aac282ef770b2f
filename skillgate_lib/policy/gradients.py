"""What the update sees: each token's gradient weight, and the check of that proxy against the parameters.

The loss-weight Share (``k / L``) counts every policy token alike. The update does not: a
token's loss ``-log p(y)`` pulls on its logits with the gradient ``e_y - p`` (softmax), whose
norm ::

    g = |d(-log p(y)) / d logits|_2 = sqrt((1 - p_y)^2 + sum_{j != y} p_j^2)

is 0 for a token the policy is sure of and near 1 for one it spreads over many. Summed over
the name tokens and over all policy tokens it gives the **Gradient Share** that the audit
reports beside the Share (:mod:`skillgate_lib.logs`, columns ``grad_weight_sel`` /
``grad_weight_all``); generation reads ``g`` off the logits it samples from
(:func:`skillgate_lib.policy.rollout.generate`), so it costs no extra forward.

``g`` is a proxy: the parameters see ``J^T (e_y - p)`` through the network's Jacobian ``J``.
:func:`parameter_gradients` measures what it stands for, with one backward pass per token
over the LoRA parameters: per-token parameter-gradient norms, and per rollout the norm of
the *summed* gradient of the name tokens and of the other tokens (coherent small gradients
add up there, incoherent large ones cancel). :func:`proxy_summary` sets the three name
shares side by side (``scripts/gradient_proxy_check.py`` runs it on warm starts).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch


def logit_grad_norm(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``g = sqrt((1 - p_y)^2 + sum_{j != y} p_j^2)`` for each row: the norm of ``d(-log p(y)) / d logits``.

    ``logits``: (..., V), the policy's logits at temperature 1; ``tokens``: (...) the ids y.
    Returns float32 of the tokens' shape, in [0, sqrt(2)).
    """
    p = torch.softmax(logits.float(), dim=-1)
    p_y = p.gather(-1, tokens[..., None].to(p.device)).squeeze(-1)
    return ((p * p).sum(-1) - 2 * p_y + 1).clamp_min(0).sqrt()


def name_token_mask(episode) -> list[bool]:
    """Per response token of ``episode``: whether it names a skill in one of its reads (the selector span)."""
    mask = [False] * len(episode.response_ids)
    for r in episode.read_spans:
        for t in range(r.name_start, min(r.name_end, len(mask))):
            mask[t] = True
    return mask


def parameter_gradients(model, params: list[torch.nn.Parameter], episodes, pad: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-token and per-rollout gradients of ``-log p(y_t)`` with respect to ``params`` (one backward per token).

    ``model``: the policy (e.g. the base with fresh LoRA adapters); ``params``: the parameters the
    update trains; ``episodes``: scored :class:`~skillgate_lib.policy.rollout.Episode` s.
    Returns ``(tokens, rollouts)``:

    * ``tokens``: one row per policy token: ``rollout``, ``t`` (response position), ``name``
      (a selector token), ``g`` (the logit proxy, from this teacher-forced forward),
      ``g_sampled`` (the proxy generation logged, nan if none), ``param_norm`` (the norm of the
      token's parameter gradient);
    * ``rollouts``: one row per rollout: ``horizon``, ``k`` (name tokens), ``L`` (policy tokens),
      ``proxy_sel`` / ``proxy_all`` (sums of ``g``), ``pnorm_sel`` / ``pnorm_all`` (sums of
      per-token parameter-gradient norms), ``sum_sel`` / ``sum_rest`` (norms of the summed
      parameter gradient of the name tokens and of the other policy tokens).
    """
    from skillgate_lib.policy.batching import pack, response_logits

    model.eval()
    tok_rows, roll_rows = [], []
    for i, e in enumerate(episodes):
        batch = pack([e], pad)
        logits = response_logits(model, batch, share_prompts=False)[0]  # (T, V), with grad
        ids = batch["response_ids"][0]
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, None]).squeeze(-1)
        g = logit_grad_norm(logits.detach(), ids)
        names = name_token_mask(e)
        summed = {True: [torch.zeros_like(p) for p in params], False: [torch.zeros_like(p) for p in params]}
        policy = [t for t, m in enumerate(e.policy_mask) if m]
        for n, t in enumerate(policy):
            grads = torch.autograd.grad(-logp[t], params, retain_graph=n + 1 < len(policy), allow_unused=True)
            grads = [torch.zeros_like(p) if gr is None else gr for p, gr in zip(params, grads)]
            norm = float(torch.sqrt(sum((gr.double() ** 2).sum() for gr in grads)))
            for acc, gr in zip(summed[names[t]], grads):
                acc += gr
            tok_rows.append({"rollout": i, "t": t, "name": names[t], "g": float(g[t]),
                             "g_sampled": e.grad_norms[t] if len(e.grad_norms) == len(e.response_ids) else np.nan,
                             "param_norm": norm})
        tr = pd.DataFrame(tok_rows[len(tok_rows) - len(policy):])
        sel = tr[tr["name"]]
        roll_rows.append({
            "rollout": i, "horizon": e.task.horizon, "k": len(sel), "L": len(tr),
            "proxy_sel": sel["g"].sum(), "proxy_all": tr["g"].sum(),
            "pnorm_sel": sel["param_norm"].sum(), "pnorm_all": tr["param_norm"].sum(),
            "sum_sel": float(torch.sqrt(sum((a.double() ** 2).sum() for a in summed[True]))),
            "sum_rest": float(torch.sqrt(sum((a.double() ** 2).sum() for a in summed[False]))),
        })
    return pd.DataFrame(tok_rows), pd.DataFrame(roll_rows)


def proxy_summary(tokens: pd.DataFrame, rollouts: pd.DataFrame) -> dict[str, float]:
    """The proxy against the parameters, and the name's share three ways (medians over rollouts with a read).

    ``rank_corr``: Spearman correlation of ``g`` and the per-token parameter-gradient norm over all
    policy tokens; ``share_loss`` = k / L; ``share_proxy`` = proxy_sel / proxy_all;
    ``share_pnorm`` = pnorm_sel / pnorm_all; ``share_summed`` = sum_sel / (sum_sel + sum_rest);
    ``summed_ratio`` = sum_sel / sum_rest (the name's summed gradient against the rest's).
    """
    from scipy.stats import spearmanr

    r = rollouts[rollouts["k"] > 0]
    shares = pd.DataFrame({
        "share_loss": r["k"] / r["L"], "share_proxy": r["proxy_sel"] / r["proxy_all"],
        "share_pnorm": r["pnorm_sel"] / r["pnorm_all"], "share_summed": r["sum_sel"] / (r["sum_sel"] + r["sum_rest"]),
        "summed_ratio": r["sum_sel"] / r["sum_rest"],
    })
    out = {"tokens": int(len(tokens)), "rollouts": int(len(rollouts)), "rollouts_with_read": int(len(r)),
           "rank_corr": float(spearmanr(tokens["g"], tokens["param_norm"]).statistic),
           "name_mean_g": float(tokens.loc[tokens["name"], "g"].mean()),
           "other_mean_g": float(tokens.loc[~tokens["name"], "g"].mean())}
    if tokens["g_sampled"].notna().all():
        out["max_abs_g_vs_sampled"] = float((tokens["g"] - tokens["g_sampled"]).abs().max())
    out.update({f"median_{c}": float(shares[c].median()) for c in shares})
    return out

"""The choice alone: the teacher-forced probability that a read names the oracle, against the slate's other names.

"The trial read the oracle at all" (``oracle_read``) counts a trial that reads twice as often as one
that reads once, so where training changes the read count it moves without the choice moving. This
measure asks only which name the policy puts in a read: after each held-out prompt and the read
opener, the log-probability of every slate name's words and the closer (teacher-forced, no
sampling), normalised over the slate's names::

    P(oracle | slate) = exp(s_oracle) / sum_i exp(s_i),   s_i = log p(name_i words, closer | prompt, opener)

The call is written as ``env`` writes it (``env.read_call``: the word format's ``<read> words </read>``
or the chat rendering's JSON tool call, :mod:`skillgate_lib.env.chat`). What closes the call is scored so that a name that is a prefix of another ("ledger credit" beside "ledger
credit ruby") is not favoured. Reported per prompt and as two summaries, the mean over prompts
(``choice``) and its logit (``choice_logit``, the scale the rate study's slopes use).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from skillgate_lib.env import SkillSlateEnv, token_spans
from skillgate_lib.policy.rollout import Episode


def call_episode(env, tokenizer, prompt_ids: list[int], task, slate, group: int, name: str, scored: str) -> Episode:
    """A teacher sequence: ``prompt_ids`` then the read call of ``name`` as ``env`` writes it (``env.read_call``: the
    word format's or the chat rendering's), with the policy mask on ``scored``: ``"name"`` (its words),
    ``"name+close"`` (its words and what closes the call) or ``"call"`` (the whole call)."""
    call, (s, e) = env.read_call(name)
    ids = tokenizer(call, add_special_tokens=False)["input_ids"]
    (ns, ne), = token_spans(tokenizer, call, [(s, e)])
    if scored == "name":
        mask = [ns <= t < ne for t in range(len(ids))]
    elif scored == "name+close":
        mask = [t >= ns for t in range(len(ids))]
    elif scored == "call":
        mask = [True] * len(ids)
    else:
        raise ValueError(f"scored must be 'name', 'name+close' or 'call', got {scored!r}")
    return Episode(task, slate, group, prompt_ids, response_ids=list(ids), policy_mask=mask)


def scored_suffix(episode: Episode) -> Episode:
    """``episode`` with its unscored response head (a call's opener) moved into the prompt: the rows of one prompt
    then share everything up to the first scored token, which :func:`tree_scores` runs once, and only the scored
    tokens pass the vocabulary head. The scored tokens' log-probabilities are those of the whole episode (same
    context), up to rounding."""
    mask = list(episode.policy_mask)
    if not any(mask):
        raise ValueError("the episode scores no token")
    first = mask.index(True)
    return Episode(episode.task, episode.slate, episode.group, list(episode.prompt_ids) + list(episode.response_ids[:first]),
                   response_ids=list(episode.response_ids[first:]), policy_mask=mask[first:])


def tree_scores(model, rows: list[Episode], pad: int) -> torch.Tensor:
    """The summed log-probability of each row's response (all of it scored), rows that share a prompt run as one
    sequence: the prompt once, then every row's response after it, each attending to the prompt and to itself
    only (a tree attention mask, positions restarting after the prompt for each response). The same numbers as
    one forward a row, up to rounding, for the cost of one prompt and its responses: no key/value cache is
    copied per row. Returns a (len(rows),) float32 tensor."""
    device = next(model.parameters()).device
    trees: dict[tuple[int, ...], list[int]] = {}
    for i, r in enumerate(rows):
        if not all(r.policy_mask):
            raise ValueError("tree_scores scores whole responses: move the unscored head into the prompt (scored_suffix)")
        trees.setdefault(tuple(r.prompt_ids), []).append(i)
    P = max(len(k) for k in trees)
    W = max(sum(len(rows[i].response_ids) for i in members) for members in trees.values())
    B, L = len(trees), P + W
    ids = torch.full((B, L), pad, dtype=torch.long)
    pos = torch.zeros((B, L), dtype=torch.long)
    keep = torch.zeros((B, L, L), dtype=torch.bool)
    where = []  # (row index, tree, columns whose logits predict its tokens, its tokens)
    for b, (prefix, members) in enumerate(trees.items()):
        p = len(prefix)
        ids[b, P - p: P] = torch.tensor(prefix)
        pos[b, P - p: P] = torch.arange(p)
        keep[b, P - p: P, P - p: P] = torch.tril(torch.ones(p, p, dtype=torch.bool))
        at = P
        for i in members:
            resp = rows[i].response_ids
            n = len(resp)
            ids[b, at: at + n] = torch.tensor(resp)
            pos[b, at: at + n] = torch.arange(p, p + n)
            keep[b, at: at + n, P - p: P] = True
            keep[b, at: at + n, at: at + n] = torch.tril(torch.ones(n, n, dtype=torch.bool))
            where.append((i, b, [P - 1] + list(range(at, at + n - 1)), resp))
            at += n
    rows_idle, cols_idle = (~keep.any(-1)).nonzero(as_tuple=True)  # padding columns: attend to themselves
    keep[rows_idle, cols_idle, cols_idle] = True  # (no empty softmax)
    if getattr(model.config, "_attn_implementation", "sdpa") == "eager":
        mask = torch.zeros((B, 1, L, L)).masked_fill(~keep[:, None], torch.finfo(torch.float32).min)
    else:
        mask = keep[:, None]
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device),
                   logits_to_keep=W + 1).logits.float()  # columns P-1 .. L-1
    logp = torch.log_softmax(logits, -1)
    out = torch.zeros(len(rows))
    for i, b, cols, resp in where:
        c = torch.tensor(cols, device=logp.device) - (P - 1)
        out[i] = logp[b, c, torch.tensor(resp, device=logp.device)].sum().cpu()
    return out


@torch.no_grad()
def oracle_choice(model, tokenizer, env: SkillSlateEnv, pairs: list[tuple], batch: int = 4) -> np.ndarray:
    """P(oracle | slate) (module docstring) after each ``(task, slate)`` prompt of ``pairs``, as an array.

    ``batch`` prompts run in one forward, each as one row holding its prompt, the call's opener and every slate
    name after them (:func:`tree_scores`)."""
    was_training = model.training
    model.eval()
    out = []
    try:
        for start in range(0, len(pairs), batch):
            rows, sizes = [], []
            for g, (task, slate) in enumerate(pairs[start: start + batch]):
                if slate.oracle not in slate.names:
                    raise ValueError(f"the slate of task {g + start} does not hold its oracle {slate.oracle!r}")
                prompt = tokenizer(env.prompt(task, slate), add_special_tokens=False)["input_ids"]
                rows += [scored_suffix(call_episode(env, tokenizer, prompt, task, slate, g, n, "name+close"))
                         for n in slate.names]
                sizes.append(len(slate.names))
            scores = tree_scores(model, rows, tokenizer.pad_token_id).double().cpu()
            at = 0
            for (task, slate), k in zip(pairs[start: start + batch], sizes):
                s = scores[at: at + k]
                out.append(float(torch.softmax(s, 0)[slate.names.index(slate.oracle)]))
                at += k
    finally:
        model.train(was_training)
    return np.asarray(out)


def logit(p: float) -> float:
    """log(p / (1 - p)), kept finite: p is clipped to [1e-6, 1 - 1e-6]."""
    p = min(max(float(p), 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def choice_summary(probs: np.ndarray, prefix: str = "eval") -> dict[str, float]:
    """``{prefix}/choice``: the mean of P(oracle | slate) over prompts; ``{prefix}/choice_logit``: its logit."""
    mean = float(np.mean(probs))
    return {f"{prefix}/choice": mean, f"{prefix}/choice_logit": logit(mean)}

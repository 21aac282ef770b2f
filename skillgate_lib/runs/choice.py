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
from skillgate_lib.policy.batching import pack, response_logprobs
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


@torch.no_grad()
def oracle_choice(model, tokenizer, env: SkillSlateEnv, pairs: list[tuple], batch: int = 32) -> np.ndarray:
    """P(oracle | slate) (module docstring) after each ``(task, slate)`` prompt of ``pairs``, as an array."""
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
                rows += [call_episode(env, tokenizer, prompt, task, slate, g, n, "name+close") for n in slate.names]
                sizes.append(len(slate.names))
            packed = pack(rows, tokenizer.pad_token_id)
            logp = response_logprobs(model, packed)
            scores = (logp * packed["response_mask"].to(logp.device)).sum(1).double().cpu()
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

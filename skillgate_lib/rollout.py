"""Batched multi-turn sampling: the policy writes, the environment answers read actions.

One decode loop serves every sequence in the batch with a KV cache. When a
sequence closes a read action, the environment's reply (the skill body) is
tokenised and queued; the sequence then consumes its queued tokens one per step
instead of sampling (they are marked as environment tokens and carry no loss),
while the other sequences keep sampling. That keeps one forward per step for
the whole batch, whatever each sequence is doing.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

import torch

from skillgate_lib.credit import ReadSpan
from skillgate_lib.env import Outcome, SkillSlateEnv, Task, token_spans
from skillgate_lib.skills import Slate

_READ_CALL = re.compile(r"<read>.*?</read>", re.S)


@dataclass
class Episode:
    """One rollout: prompt, response tokens (policy and environment), verdict and read spans."""

    task: Task
    slate: Slate
    group: int
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    policy_mask: list[bool] = field(default_factory=list)
    text: str = ""
    outcome: Outcome | None = None
    read_spans: list[ReadSpan] = field(default_factory=list)
    read_names: list[str] = field(default_factory=list)

    @property
    def policy_tokens(self) -> int:
        return int(sum(self.policy_mask))


def _close_token_ids(tokenizer) -> torch.Tensor:
    """Ids of every token whose text ends with ``>``: only those can close a read action."""
    vocab = tokenizer.get_vocab()
    ids = [i for tok, i in vocab.items() if tokenizer.convert_tokens_to_string([tok]).rstrip().endswith(">")]
    return torch.tensor(sorted(ids), dtype=torch.long)


def annotate(episode: Episode, env: SkillSlateEnv, tokenizer, rng=None) -> None:
    """Score the episode and turn its reads' character spans into token spans.

    The response text is the tokenizer's decoding of the response ids; the token
    spans index into the response ids. A word-level tokenizer round-trips exactly;
    for sub-word tokenizers a span covers every token that overlaps the name.
    """
    episode.text = tokenizer.decode(episode.response_ids, skip_special_tokens=True)
    episode.outcome = env.score(episode.task, episode.slate, episode.text, rng=rng)
    calls = [(m.start(), m.end()) for m in _READ_CALL.finditer(episode.text)]
    spans, names = [], []
    for read in episode.outcome.reads:
        call = next(((s, e) for s, e in calls if s <= read.char_start and read.char_end <= e), (read.char_start, read.char_end))
        (ns, ne), (cs, ce) = token_spans(tokenizer, episode.text, [(read.char_start, read.char_end), call])
        ne, ce = min(ne, len(episode.response_ids)), min(ce, len(episode.response_ids))
        if ns < ne:
            spans.append(ReadSpan(read.category, ns, ne, min(cs, ns), max(ce, ne)))
            names.append(read.name)
    episode.read_spans, episode.read_names = spans, names


@torch.no_grad()
def generate(
    model,
    tokenizer,
    env: SkillSlateEnv,
    items: list[tuple[Task, Slate, int]],
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator,
    score_rng=None,
) -> list[Episode]:
    """Roll out one episode per ``(task, slate, group)`` item; returns scored episodes.

    Sampling draws from ``generator`` only, so a seeded generator gives the same
    episodes on CPU. ``max_new_tokens`` caps the whole response (policy and
    environment tokens), which ends runaway episodes.
    """
    model.eval()
    device = next(model.parameters()).device
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    episodes = [Episode(t, s, g, tokenizer(env.prompt(t, s), add_special_tokens=False)["input_ids"]) for t, s, g in items]
    n = len(episodes)
    width = max(len(e.prompt_ids) for e in episodes)
    ids = torch.full((n, width), pad, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    for i, e in enumerate(episodes):  # left padding: every prompt ends at the same column
        ids[i, width - len(e.prompt_ids):] = torch.tensor(e.prompt_ids)
        attn[i, width - len(e.prompt_ids):] = 1
    pos = (attn.cumsum(-1) - 1).clamp_min(0)
    out = model(input_ids=ids.to(device), attention_mask=attn.to(device), position_ids=pos.to(device), use_cache=True,
                logits_to_keep=1)
    cache, logits = out.cache, out.logits[:, -1].float().cpu()
    closers = _close_token_ids(tokenizer)
    queues: list[deque[int]] = [deque() for _ in range(n)]
    done = torch.zeros(n, dtype=torch.bool)
    last_pos = pos[:, -1]
    for _ in range(max_new_tokens):
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            sampled = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:
            sampled = logits.argmax(-1)
        step = torch.full((n,), pad, dtype=torch.long)
        for i in range(n):
            if done[i]:
                continue
            e = episodes[i]
            forced = bool(queues[i])
            tok = queues[i].popleft() if forced else int(sampled[i])
            step[i] = tok
            e.response_ids.append(tok)
            e.policy_mask.append(not forced)
            if not forced and tok == eos:
                done[i] = True
            elif not forced and bool((closers == tok).any()):
                reply = env.tool_response(e.task, e.slate, tokenizer.decode(e.response_ids, skip_special_tokens=True))
                if reply:
                    queues[i].extend(tokenizer(reply, add_special_tokens=False)["input_ids"])
        if bool(done.all()):
            break
        attn = torch.cat([attn, (~done).long()[:, None]], dim=1)
        last_pos = last_pos + 1
        out = model(input_ids=step[:, None].to(device), attention_mask=attn.to(device),
                    position_ids=last_pos[:, None].to(device), cache=cache, use_cache=True)
        cache, logits = out.cache, out.logits[:, -1].float().cpu()
    for e in episodes:
        annotate(e, env, tokenizer, rng=score_rng)
    return episodes

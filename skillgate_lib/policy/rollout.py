"""Batched multi-turn sampling: the policy writes, the environment answers read actions.

One decode loop serves every sequence in the batch with a KV cache:

* Each distinct prompt is run once and its cache copied to the G rollouts that share it.
* Sampling uses the LoRA update folded into the base weights (``merged_lora``): one matmul
  per projection instead of three; the original weights are put back bit for bit after.
* When a sequence closes a read action, the environment's reply (the skill body) is
  tokenised (once per distinct reply) and fed *in the same forward* as the closing token:
  each step feeds every live sequence a chunk (one sampled token, or that token plus the
  inserted text), right-padded with masked columns to the widest chunk. Inserted tokens are
  marked as environment tokens and carry no loss.
* Sequences that have ended leave the batch (their cache rows are dropped) once a quarter of
  the batch has ended, so the last long episodes do not drag finished ones along.
* Each policy token's gradient weight ``g`` (:func:`skillgate_lib.policy.gradients.logit_grad_norm`) is read off the logits the
  token was sampled from, so the audit's Gradient Share costs no extra forward.
* The forward passes run in :mod:`skillgate_lib.policy.decoder`: for the embedded Llama a lean
  decoder (preallocated cache, no per-module overhead) whose logits equal the model's own bit
  for bit, for any other model the model's own forward.

Bookkeeping crosses from tensors to Python once per step (the sampled ids), not per token.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from skillgate_lib.credit import ReadSpan
from skillgate_lib.env import Outcome, SkillSlateEnv, Task, token_spans
from skillgate_lib.env.skills import Slate
from skillgate_lib.policy.decoder import make_decoder
from skillgate_lib.policy.gradients import logit_grad_norm

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
    grad_norms: list[float] = field(default_factory=list)
    """Per response token: :func:`~skillgate_lib.policy.gradients.logit_grad_norm` of a policy token (from the logits it
    was sampled from), 0.0 for an environment token."""
    sample_logps: list[float] = field(default_factory=list)
    """Per response token: the log-probability the sampler gave a policy token (temperature 1, the logits it was drawn
    from), 0.0 for an environment token; the update compares its own with it (``logp_gap``)."""

    @property
    def policy_tokens(self) -> int:
        return int(sum(self.policy_mask))

    def grad_weights(self) -> tuple[float, float] | None:
        """``(sum of g over the reads' name tokens, sum of g over every policy token)``; None when not recorded."""
        if len(self.grad_norms) != len(self.response_ids):
            return None
        sel = sum(self.grad_norms[t] for r in self.read_spans for t in range(r.name_start, r.name_end))
        return float(sel), float(sum(self.grad_norms))


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
    read_format = getattr(env, "read_format", None)  # the chat rendering's JSON calls, else the word format's tags
    calls = ([(c.call_start, c.call_end) for c in read_format.calls(episode.text)] if read_format is not None
             else [(m.start(), m.end()) for m in _READ_CALL.finditer(episode.text)])
    spans, names = [], []
    for read in episode.outcome.reads:
        call = next(((s, e) for s, e in calls if s <= read.char_start and read.char_end <= e), (read.char_start, read.char_end))
        (ns, ne), (cs, ce) = token_spans(tokenizer, episode.text, [(read.char_start, read.char_end), call])
        ne, ce = min(ne, len(episode.response_ids)), min(ce, len(episode.response_ids))
        if ns < ne:
            spans.append(ReadSpan(read.category, ns, ne, min(cs, ns), max(ce, ne), served=read.served))
            names.append(read.name)
    episode.read_spans, episode.read_names = spans, names


@contextmanager
def merged_lora(model):
    """Run ``model`` with each active LoRA update folded into its base weight (W + scale * B A).

    For sampling only (no gradients flow through the folded weights). The base weights are
    swapped for merged copies and the originals put back on exit, bit for bit: merging
    and unmerging in place (peft's ``merge_adapter``) would drift the frozen base by rounding.
    A model without LoRA adapters is used as it is.
    """
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    if not isinstance(model, PeftModel) or getattr(model, "_adapters_disabled", False):
        yield model
        return
    swapped = []
    try:
        with torch.no_grad():
            for module in model.modules():
                if not isinstance(module, LoraLayer) or module.merged or module.disable_adapters:
                    continue
                deltas = [module.get_delta_weight(a) for a in module.active_adapters if a in module.lora_A]
                if not deltas:
                    continue
                weight = module.get_base_layer().weight
                swapped.append((weight, weight.data))
                weight.data = weight.data + sum(deltas).to(weight.dtype)
        with model.disable_adapter():
            yield model
    finally:
        for weight, data in swapped:
            weight.data = data


def _left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded ids, attention mask and position ids: every row ends at the same column."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        attn[i, width - len(r):] = 1
    return ids, attn, (attn.cumsum(-1) - 1).clamp_min(0)


def _sample(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> torch.Tensor:
    """Next tokens (B,) on the CPU, drawn from the CPU ``generator`` whatever device the logits are on."""
    if temperature > 0:
        probs = torch.softmax(logits.float() / temperature, dim=-1).cpu()
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return logits.argmax(-1).cpu()


@torch.inference_mode()
def generate(
    model,
    tokenizer,
    env: SkillSlateEnv,
    items: list[tuple[Task, Slate, int]],
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator,
    score_rng=None,
    stats: dict | None = None,
    lean: bool = True,
    min_new_tokens: int = 0,
) -> list[Episode]:
    """Roll out one episode per ``(task, slate, group)`` item; returns scored episodes.

    Sampling draws from ``generator`` only, so a seeded generator gives the same
    episodes on CPU. ``max_new_tokens`` caps the whole response (policy and
    environment tokens; an insertion is cut at the cap), which ends runaway episodes.
    ``lean`` runs the forward passes with :class:`~skillgate_lib.policy.decoder.LeanLlama` when the
    model is one it reproduces bit for bit (the embedded Llama), else with the model's own
    forward; both give the same episodes. ``stats``, when given, receives ``prefill_rows``
    (distinct prompts run), ``decode_forwards`` (forward passes after the prefill) and
    ``decoder`` (the class that ran them). ``min_new_tokens`` forbids EOS until a response holds
    that many tokens, as ``generate``'s option of that name in ``transformers`` does (a benchmark
    of long responses; the episodes then run on past their answer).
    """
    model.eval()
    if not items:
        return []
    max_new_tokens = response_limit(env, max_new_tokens)
    with merged_lora(model) as policy:
        return decode(lambda runs: make_decoder(policy, lean, room=max_new_tokens), tokenizer,
                      [Segment(env, items, generator, score_rng)], max_new_tokens, temperature, stats, min_new_tokens)[0]


def response_limit(env, max_new_tokens: int) -> int:
    """``max_new_tokens``, raised to the rendering's own cap where it has one (the chat rendering: a regime's cap is
    counted in the word tokenizer's tokens, :meth:`~skillgate_lib.env.chat.ChatEnv.response_cap`)."""
    cap = getattr(env, "response_cap", None)
    return max(max_new_tokens, cap()) if cap is not None else max_new_tokens


@dataclass
class Segment:
    """One run's share of a rollout batch (:func:`decode`): its environment, items and random streams."""

    env: SkillSlateEnv
    items: list[tuple[Task, Slate, int]]
    generator: torch.Generator
    """Draws this segment's tokens, from its own rows' logits only, in the order a batch of its own would."""
    score_rng: object = None
    """Scores its episodes (``env.score``), in item order."""


def decode(open_decoder, tokenizer, segments: list[Segment], max_new_tokens: int, temperature: float,
           stats: dict | None = None, min_new_tokens: int = 0) -> list[list[Episode]]:
    """The decode loop of :func:`generate` over one batch that holds several segments; scored episodes per segment.

    ``open_decoder(runs)`` gives the decoder (:mod:`skillgate_lib.policy.decoder`) of the batch, where
    ``runs`` (one entry per distinct prompt) names the segment each prompt belongs to. A
    distinct prompt is one prompt text of one segment: segments never share a cache row, as
    each may sample with other weights (:class:`~skillgate_lib.policy.decoder.MultiLlama`).

    A segment's tokens come from its own generator, sampled from the logits of its own rows in
    the order and number a batch of that segment alone would hold: its rows leave its sample
    when a quarter of them has ended, as they leave a batch of its own; a row the batch has
    already dropped is sampled from a placeholder (the draws of the others do not depend on its
    logits). So each segment's episodes are those of :func:`generate` up to the rounding of its
    logits, and bit for bit the same when it is the only segment.
    """
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    prompts: dict[tuple[int, str], list[int]] = {}  # (segment, distinct prompt text) -> ids, in order of first use
    episodes, keys, spans = [], [], []
    for s, seg in enumerate(segments):
        first = len(episodes)
        for task, slate, group in seg.items:
            key = (s, seg.env.prompt(task, slate))
            if key not in prompts:
                prompts[key] = tokenizer(key[1], add_special_tokens=False)["input_ids"]
            episodes.append(Episode(task, slate, group, prompts[key]))
            keys.append(key)
        spans.append(range(first, len(episodes)))
    n = len(episodes)
    if n == 0:
        return [[] for _ in segments]
    closer_ids = _close_token_ids(tokenizer)  # a walk over the vocabulary: once per call
    closers = torch.zeros(max(len(tokenizer), int(closer_ids.max()) + 1), dtype=torch.bool)
    closers[closer_ids] = True
    replies: dict[str, list[int]] = {}  # each distinct inserted text is tokenised once

    # Each distinct prompt once, then its cache row copied to every rollout of it.
    order = list(prompts)
    position = {key: k for k, key in enumerate(order)}
    decoder = open_decoder(torch.tensor([s for s, _ in order]))
    source = torch.tensor([position[k] for k in keys]) if len(order) < n else None
    ids, attn, pos = _left_pad([prompts[k] for k in order], pad)
    logits = decoder.prefill(ids, attn, pos)
    last_pos = pos[:, -1]
    if source is not None:
        decoder.select(source)
        logits, last_pos = logits[source.to(logits.device)], last_pos[source]
    batch = list(range(n))  # decoder row -> episode index
    sampled_rows = [list(span) for span in spans]  # per segment: the episodes its sample holds, in order
    ended = [False] * n
    forwards = 0
    for _ in range(max_new_tokens):
        chunks: dict[int, list[int]] = {}  # episode -> what it feeds next (nothing once ended)
        at = None if len(segments) == 1 else {i: b for b, i in enumerate(batch)}
        for seg, rows in zip(segments, sampled_rows):
            if not rows:
                continue
            seg_logits = logits if at is None else _rows(logits, [at.get(i, -1) for i in rows])
            if min_new_tokens > 0 and eos is not None:
                short = torch.tensor([len(episodes[i].response_ids) < min_new_tokens for i in rows],
                                     device=seg_logits.device)
                seg_logits[short, eos] = float("-inf")
            sampled = _sample(seg_logits, temperature, seg.generator)
            g_rows = logit_grad_norm(seg_logits, sampled).tolist()
            lp_rows = torch.log_softmax(seg_logits.float(), -1).gather(
                1, sampled.view(-1, 1).to(seg_logits.device)).squeeze(1).tolist()
            closing = closers[sampled].tolist()
            for b, (i, tok) in enumerate(zip(rows, sampled.tolist())):
                if ended[i]:  # still in the sample until its next compaction: fed nothing, keeps nothing
                    continue
                e = episodes[i]
                e.response_ids.append(tok)
                e.policy_mask.append(True)
                e.grad_norms.append(g_rows[b])
                e.sample_logps.append(lp_rows[b])
                chunk = [tok]
                if tok == eos:
                    ended[i] = True
                elif closing[b]:
                    reply = seg.env.tool_response(e.task, e.slate, tokenizer.decode(e.response_ids, skip_special_tokens=True))
                    if reply:
                        if reply not in replies:
                            replies[reply] = tokenizer(reply, add_special_tokens=False)["input_ids"]
                        inserted = replies[reply][: max_new_tokens - len(e.response_ids)]
                        e.response_ids.extend(inserted)
                        e.policy_mask.extend([False] * len(inserted))
                        e.grad_norms.extend([0.0] * len(inserted))
                        e.sample_logps.extend([0.0] * len(inserted))
                        chunk += inserted
                if len(e.response_ids) >= max_new_tokens:
                    ended[i] = True
                chunks[i] = chunk
            live = [i for i in rows if not ended[i]]
            if not live or len(rows) - len(live) >= max(1, len(rows) // 4):
                rows[:] = live
        live = [b for b, i in enumerate(batch) if not ended[i]]
        if not live:
            break
        if len(batch) - len(live) >= max(1, len(batch) // 4):  # drop ended rows from the batch
            keep = torch.tensor(live)
            decoder.select(keep)
            last_pos = last_pos[keep]
            batch = [batch[b] for b in live]
        fed = [chunks.get(i, []) for i in batch]
        width = max(len(c) for c in fed)
        step = torch.tensor([c + [pad] * (width - len(c)) for c in fed], dtype=torch.long)
        real = torch.tensor([0 if ended[i] else len(c) for i, c in zip(batch, fed)])  # an ended row feeds nothing
        new_attn = (torch.arange(width)[None] < real[:, None]).long()
        lengths = new_attn.sum(1)
        positions = last_pos[:, None] + 1 + torch.arange(width)
        logits = decoder.step(step, new_attn, positions, lengths)
        forwards += 1
        last_pos = last_pos + lengths
    if stats is not None:
        stats.update(prefill_rows=len(order), decode_forwards=forwards, decoder=type(decoder).__name__)
    out = []
    for seg, span in zip(segments, spans):
        for i in span:
            annotate(episodes[i], seg.env, tokenizer, rng=seg.score_rng)
        out.append([episodes[i] for i in span])
    return out


def _rows(logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """``logits[rows]``, a row of zeros where ``rows`` holds -1 (a row the batch no longer holds)."""
    return torch.cat([logits, logits.new_zeros(1, logits.shape[1])])[torch.tensor(rows, device=logits.device)]

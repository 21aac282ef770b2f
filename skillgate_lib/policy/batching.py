"""Packing episodes into padded tensors, and response log-probabilities under a model."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from skillgate_lib.policy.hf_compat import output_cache, with_cache


def pack(episodes, pad: int) -> dict[str, torch.Tensor]:
    """Prompt+response batch of :class:`~skillgate_lib.policy.rollout.Episode` s, responses aligned.

    Prompts are left-padded to the longest prompt P and responses right-padded to the
    longest response T, so every response starts at column P and the logits that predict
    response tokens are the same T columns for every row (the model computes no logits for
    the prompt). Returns input_ids (B, P+T), attention_mask (B, P+T), position_ids (B, P+T),
    response_ids (B, T), response_mask (B, T) bool (policy tokens), for prompt sharing
    ``unique`` (rows with distinct prompts) and ``source`` (B,): each row's index in ``unique``, and
    ``sample_logp`` (B, T), the sampler's log-probabilities, where every episode recorded them.
    """
    B = len(episodes)
    P = max(len(e.prompt_ids) for e in episodes)
    T = max(len(e.response_ids) for e in episodes)
    input_ids = torch.full((B, P + T), pad, dtype=torch.long)
    attention = torch.zeros((B, P + T), dtype=torch.long)
    response_ids = torch.full((B, T), pad, dtype=torch.long)
    response_mask = torch.zeros((B, T), dtype=torch.bool)
    for i, e in enumerate(episodes):
        p, r = len(e.prompt_ids), len(e.response_ids)
        input_ids[i, P - p : P + r] = torch.tensor(e.prompt_ids + e.response_ids)
        attention[i, P - p : P + r] = 1
        response_ids[i, :r] = torch.tensor(e.response_ids)
        response_mask[i, :r] = torch.tensor(e.policy_mask, dtype=torch.bool)
    positions = (attention.cumsum(-1) - 1).clamp_min(0)
    unique, source = _prompt_groups(episodes)
    out = dict(input_ids=input_ids, attention_mask=attention, position_ids=positions, response_ids=response_ids,
               response_mask=response_mask, unique=unique, source=source)
    if all(len(e.sample_logps) == len(e.response_ids) for e in episodes):
        out["sample_logp"] = torch.zeros((B, T))
        for i, e in enumerate(episodes):
            out["sample_logp"][i, : len(e.sample_logps)] = torch.tensor(e.sample_logps)
    return out


def _prompt_groups(episodes) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows with distinct prompts (``unique``, first occurrence) and each row's index among them (``source``)."""
    index: dict[tuple[int, ...], int] = {}  # prompt -> its position in ``unique``
    unique, source = [], []
    for i, e in enumerate(episodes):
        key = tuple(e.prompt_ids)
        if key not in index:
            index[key] = len(unique)
            unique.append(i)
        source.append(index[key])
    return torch.tensor(unique, dtype=torch.long), torch.tensor(source, dtype=torch.long)


def response_logits(model, batch: dict[str, torch.Tensor], share_prompts: bool = True) -> torch.Tensor:
    """(B, T, V) float32 logits that predict each response token.

    With ``share_prompts`` (and rows sharing a prompt, as GRPO groups do) each distinct
    prompt runs once and its key/value cache is copied to the rows that share it, under
    autograd: the response forward attends to it and gradients flow back through the copy.
    The same numbers as one forward over every row (up to rounding), with the prompt
    computed once per group instead of G times. No logits are computed for prompt tokens.
    """
    device = next(model.parameters()).device
    ids, attn, pos = (batch[k].to(device) for k in ("input_ids", "attention_mask", "position_ids"))
    T = batch["response_ids"].shape[1]
    P = ids.shape[1] - T
    unique, source = batch["unique"].to(device), batch["source"].to(device)
    if not share_prompts or len(unique) == len(source):
        return model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=T + 1).logits[:, :T].float()
    pre = model(input_ids=ids[unique, :P], attention_mask=attn[unique, :P], position_ids=pos[unique, :P],
                use_cache=True, logits_to_keep=1)
    first = pre.logits[source, -1:].float()  # column P-1 predicts response token 0
    if T == 1:
        return first
    cache = output_cache(pre)
    cache.batch_select_indices(source)
    out = model(input_ids=ids[:, P : P + T - 1], attention_mask=attn[:, : P + T - 1], position_ids=pos[:, P : P + T - 1],
                **with_cache(cache), use_cache=True)
    return torch.cat([first, out.logits.float()], dim=1)


def response_logprobs(model, batch: dict[str, torch.Tensor], share_prompts: bool = True, buckets: int = 1) -> torch.Tensor:
    """(B, T) log-probabilities of the response tokens under ``model`` (use them under ``response_mask``).

    ``buckets > 1`` sorts the rows by response length and runs them in that many groups, each
    right-padded to its own longest response instead of the batch's: one runaway episode no
    longer makes every row pay for its length. The prompts still run once per distinct prompt
    (``share_prompts``), their cache copied to each group's rows under autograd. The same
    numbers as one padded batch up to rounding (other matmul shapes), so a run records the
    setting (``TrainConfig.length_buckets``).
    """
    if buckets <= 1:
        picked = response_logits(model, batch, share_prompts)
        return torch.gather(F.log_softmax(picked, -1), 2, batch["response_ids"].to(picked.device)[..., None]).squeeze(-1)
    return _bucketed_logprobs(model, batch, share_prompts, buckets)


def _bucketed_logprobs(model, batch: dict[str, torch.Tensor], share_prompts: bool, buckets: int) -> torch.Tensor:
    """:func:`response_logprobs` over groups of rows of similar response length."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    ids, attn, pos = (batch[k].to(device) for k in ("input_ids", "attention_mask", "position_ids"))
    targets = batch["response_ids"].to(device)
    B, T = targets.shape
    P = ids.shape[1] - T
    unique, source = batch["unique"].to(device), batch["source"].to(device)
    lengths = attn[:, P:].sum(1).clamp_min(1)  # real response columns of each row
    share = share_prompts and len(unique) < len(source)
    if share:
        pre = model(input_ids=ids[unique, :P], attention_mask=attn[unique, :P], position_ids=pos[unique, :P],
                    use_cache=True, logits_to_keep=1)
        first = pre.logits[:, -1].float()  # column P-1 of each distinct prompt predicts response token 0
        prompt_kv = [(layer.keys, layer.values) for layer in output_cache(pre).layers]
    out = torch.zeros(B, T, device=device)
    for rows in torch.tensor_split(torch.argsort(lengths.cpu(), stable=True).to(device), buckets):
        if len(rows) == 0:
            continue
        width = int(lengths[rows].max())
        if not share:
            logits = model(input_ids=ids[rows, : P + width], attention_mask=attn[rows, : P + width],
                           position_ids=pos[rows, : P + width], logits_to_keep=width + 1).logits[:, :width].float()
        else:
            src = source[rows]
            logits = first[src, None]
            if width > 1:
                cache = DynamicCache()
                for i, (keys, values) in enumerate(prompt_kv):
                    cache.update(keys[src], values[src], i)
                rest = model(input_ids=ids[rows, P : P + width - 1], attention_mask=attn[rows, : P + width - 1],
                             position_ids=pos[rows, P : P + width - 1], **with_cache(cache), use_cache=True).logits.float()
                logits = torch.cat([logits, rest], dim=1)
        picked = torch.gather(F.log_softmax(logits, -1), 2, targets[rows, :width, None]).squeeze(-1)
        out = out.index_put((rows,), F.pad(picked, (0, T - width)))
    return out

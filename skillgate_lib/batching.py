"""Packing episodes into padded tensors, and response log-probabilities under a model."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def pack(episodes, pad: int) -> dict[str, torch.Tensor]:
    """Right-padded prompt+response batch of :class:`~skillgate_lib.rollout.Episode` s.

    Returns input_ids (B, S), attention_mask (B, S), response_mask (B, T) bool (policy
    tokens), response_ids (B, T) and ``columns`` (B, T): the column of ``input_ids`` whose
    logits predict each response token.
    """
    B = len(episodes)
    S = max(len(e.prompt_ids) + len(e.response_ids) for e in episodes)
    T = max(len(e.response_ids) for e in episodes)
    input_ids = torch.full((B, S), pad, dtype=torch.long)
    attention = torch.zeros((B, S), dtype=torch.long)
    response_ids = torch.full((B, T), pad, dtype=torch.long)
    response_mask = torch.zeros((B, T), dtype=torch.bool)
    columns = torch.zeros((B, T), dtype=torch.long)
    for i, e in enumerate(episodes):
        P, R = len(e.prompt_ids), len(e.response_ids)
        input_ids[i, : P + R] = torch.tensor(e.prompt_ids + e.response_ids)
        attention[i, : P + R] = 1
        response_ids[i, :R] = torch.tensor(e.response_ids)
        response_mask[i, :R] = torch.tensor(e.policy_mask, dtype=torch.bool)
        columns[i] = torch.arange(P - 1, P - 1 + T).clamp(max=S - 1)  # logits at column c predict token c+1
    return dict(input_ids=input_ids, attention_mask=attention, response_ids=response_ids, response_mask=response_mask,
                columns=columns)


def response_logits(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, T, V) float32 logits that predict each response token."""
    device = next(model.parameters()).device
    logits = model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)).logits
    cols = batch["columns"].to(device)
    return torch.gather(logits, 1, cols[..., None].expand(-1, -1, logits.shape[-1])).float()


def response_logprobs(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, T) log-probabilities of the response tokens under ``model``."""
    picked = response_logits(model, batch)
    return torch.gather(F.log_softmax(picked, -1), 2, batch["response_ids"].to(picked.device)[..., None]).squeeze(-1)

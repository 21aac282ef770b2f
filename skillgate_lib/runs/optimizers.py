"""The optimizers a run can update its LoRA weights with: AdamW (the recipe), plain SGD, normalised SGD.

The optimizer control of the rate study asks whether Adam's per-parameter scaling is what
undoes a diluted loss weight. Plain SGD follows the raw gradient, so a token's pull on the
update is its gradient's size; normalised SGD takes a step of fixed length ``lr`` along the
whole gradient (one norm over every trainable parameter, not per parameter), so it is
invariant to a global rescale of the loss but keeps the gradient's direction, the mix of
every token's pull.
"""

from __future__ import annotations

import torch

#: The names :func:`build` accepts (``TrainConfig.optimizer``).
OPTIMIZERS = ("adamw", "sgd", "nsgd")


class NormalizedSGD(torch.optim.Optimizer):
    """SGD whose step has length ``lr`` in the joint norm of every parameter's gradient (no step on a zero gradient)."""

    def __init__(self, params, lr: float):
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        if not grads:
            return loss
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        if float(norm) == 0.0:
            return loss
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"] / float(norm))
        return loss


def build(name: str, params, lr: float) -> torch.optim.Optimizer:
    """The optimizer ``name`` (one of :data:`OPTIMIZERS`) over ``params`` at step size ``lr``; no weight decay."""
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "nsgd":
        return NormalizedSGD(params, lr=lr)
    raise ValueError(f"optimizer: unknown {name!r}; choose one of {', '.join(OPTIMIZERS)}")

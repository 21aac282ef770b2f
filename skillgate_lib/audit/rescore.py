"""Gradient weights for a log that does not hold them: the policy's per-token distributions recomputed (``audit --rescore``).

Gradient Share needs, for every response token, ``g = |d(-log p(y)) / d logits|``
(:func:`~skillgate_lib.policy.gradients.logit_grad_norm`), which a kit run logs from its sampling
logits and an external log (TRL, verl) lacks. Where the log holds each rollout's prompt and
response text, :class:`Rescorer` rebuilds the tokens with the model's own tokenizer, runs the
model once per rollout (teacher-forced, temperature 1) and returns ``g`` per response token; the
readers sum it over each read's name tokens and over every response token (``grad_weight_sel``,
``grad_weight_all``), so the audit reports Gradient Share as for a kit run.

What it assumes, and says where it fails: the model given is the policy that sampled the log
(or the checkpoint whose starvation you want to measure: a later one gives the distributions
of that one), the prompt field is the rendered prompt text (or chat messages, rendered with the
model's chat template), and the response text re-tokenises to the tokens the audit counts (the
readers use this model's tokenizer; a log whose reads were logged in other tokens is refused,
naming the row).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class Rescorer:
    """``rescorer(prompt, response) -> g`` per response token, under ``model`` (a name :func:`~skillgate_lib.policy.models.load_policy`
    takes: an embedded model, ``smollm2-sft``, a Hugging Face id or path), on the CPU with ``threads`` threads."""

    def __init__(self, model: str, threads: int = 2, device: str = "cpu", progress: bool = True):
        from skillgate_lib.policy import devices
        from skillgate_lib.policy.models import load_policy

        torch.set_num_threads(threads)
        self.device = devices.resolve(device)
        self.model, self.tokenizer = load_policy(model)
        self.model.to(self.device).eval()
        self.name = model
        self.rows = 0
        self._bar = None
        if progress:
            from tqdm.auto import tqdm

            self._bar = tqdm(desc=f"rescore with {model}", unit=" rollouts")

    def prompt_ids(self, prompt: Any) -> list[int]:
        """The prompt's tokens: chat messages rendered with the model's chat template (generation prompt added),
        text tokenised as it is (its template markup, if any, already in it)."""
        if isinstance(prompt, np.ndarray):
            prompt = prompt.tolist()
        if isinstance(prompt, (list, tuple)):
            if not getattr(self.tokenizer, "chat_template", None):
                raise ValueError(f"the prompt is chat messages but {self.name}'s tokenizer has no chat template")
            messages = [dict(m) for m in prompt]
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        return list(self.tokenizer(str(prompt or ""), add_special_tokens=False)["input_ids"])

    @torch.no_grad()
    def __call__(self, prompt: Any, response: str) -> np.ndarray:
        from skillgate_lib.policy.gradients import logit_grad_norm

        p = self.prompt_ids(prompt)
        r = list(self.tokenizer(response, add_special_tokens=False)["input_ids"])
        if not r:
            return np.zeros(0)
        if not p and self.tokenizer.bos_token_id is not None:  # no prompt: the response follows a BOS
            p = [self.tokenizer.bos_token_id]
        ids = torch.tensor([p + r], device=self.device)
        if p:  # the last len(r) + 1 positions: the prompt's last predicts the first response token
            logits = self.model(input_ids=ids, logits_to_keep=len(r) + 1).logits[0, :-1].float()
        else:  # nothing before the first token: its g is that of a uniform guess
            out = self.model(input_ids=ids).logits[0].float()
            logits = torch.cat([torch.zeros_like(out[:1]), out[:-1]])
        g = logit_grad_norm(logits, ids[0, len(p):]).cpu().numpy().astype(float)
        self.rows += 1
        if self._bar is not None:
            self._bar.update(1)
        return g

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

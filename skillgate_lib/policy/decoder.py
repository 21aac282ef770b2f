"""The forward passes of :func:`skillgate_lib.policy.rollout.generate`: the model's own, and a lean one.

``generate`` asks three things of a decoder: run the left-padded distinct prompts
(``prefill``), keep or copy batch rows (``select``), and run one step of chunks, one per row,
right-padded with masked columns (``step``); each returns the logits the next tokens are
sampled from. Three decoders answer:

* :class:`HFDecoder` calls the model's forward with the cache it returns (a ``DynamicCache``
  that grows by concatenation). It serves any causal LM.
* :class:`LeanLlama` runs the same arithmetic for a ``LlamaForCausalLM`` without the module
  machinery around it: the weights are read directly (LoRA wrappers unwrapped), keys and
  values go into a preallocated cache per layer, RoPE comes from a table, and the 4-D mask
  is built from a 2-D padding buffer. Its ops, their order and the shapes they run on are
  those of ``transformers``' Llama, so its logits equal the model's own bit for bit (the
  tests check this with ``torch.equal``); a model it cannot reproduce exactly raises
  :class:`Unsupported`, and :func:`make_decoder` falls back to :class:`HFDecoder`.
* :class:`MultiLlama` decodes several LoRA runs of one such Llama in one batch, each row with
  its own run's adapter (:mod:`skillgate_lib.runs.multirun`); equal to each run's own logits up to
  rounding, not bit for bit.

What the lean path leaves out is the growing cache's ``torch.cat`` (a copy of every key and
value at every step: most of the general path's time, more so as the context grows) and the
per-module overhead (hooks, peft's wrappers, mask building, RoPE). What it keeps is the
arithmetic and sdpa's CPU kernel, which it has to share with the model's own forward to stay
exact.

One module on purpose: the three decoders share the weight readers, the norm and
RoPE helpers, and must stay exact against one another; apart, those helpers would cross modules.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from skillgate_lib.policy.hf_compat import output_cache, with_cache


class Unsupported(ValueError):
    """The model is not one :class:`LeanLlama` reproduces exactly; its own forward has to serve."""


def _pick_last(logits: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each row's float logits at its last real column (``lengths`` real columns, at least one column)."""
    width, device = logits.shape[1], logits.device
    at = (lengths - 1).clamp_min(0).to(device)
    return logits[torch.arange(len(lengths), device=device), at if width > 1 else 0].float()


class HFDecoder:
    """Any causal LM through its own forward; the 2-D attention mask of every column is kept here."""

    def __init__(self, model):
        self.model = model
        self.device = next(model.parameters()).device
        self.cache = None
        self.attn: torch.Tensor | None = None

    def prefill(self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Run the left-padded prompts; the logits after each prompt's last token."""
        dev = self.device
        out = self.model(input_ids=ids.to(dev), attention_mask=attn.to(dev), position_ids=pos.to(dev),
                         use_cache=True, logits_to_keep=1)
        self.cache, self.attn = output_cache(out), attn
        return out.logits[:, -1].float()

    def select(self, rows: torch.Tensor) -> None:
        """Keep (or repeat) the batch rows ``rows``, in that order."""
        self.cache.batch_select_indices(rows.to(self.device))
        self.attn = self.attn[rows]

    def step(self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Feed one chunk per row (``lengths`` real columns, then masked padding); each row's next-token logits."""
        dev, width = self.device, ids.shape[1]
        self.attn = torch.cat([self.attn, attn], dim=1)
        out = self.model(input_ids=ids.to(dev), attention_mask=self.attn.to(dev), position_ids=pos.to(dev),
                         **with_cache(self.cache), use_cache=True, logits_to_keep=1 if width == 1 else 0)
        self.cache = output_cache(out)
        return _pick_last(out.logits, lengths)


@dataclass
class _Layer:
    """One decoder layer's weights (the parameters themselves, read at call time) and norm epsilons."""

    input_norm: torch.Tensor
    input_eps: float
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    post_norm: torch.Tensor
    post_eps: float
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor

    @classmethod
    def of(cls, layer) -> _Layer:
        """The weights of a ``LlamaDecoderLayer`` (LoRA wrappers looked through, see :func:`_weight`)."""
        attn, mlp, pre, post = layer.self_attn, layer.mlp, layer.input_layernorm, layer.post_attention_layernorm
        q, k, v, o, gate, up, down = (_weight(m, torch.nn.Linear) for m in (
            attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj))
        return cls(pre.weight, pre.variance_epsilon, q, k, v, o, post.weight, post.variance_epsilon, gate, up, down)

    def cast(self, dtype: torch.dtype) -> _Layer:
        """The projections as ``dtype`` copies (the norms' weights as they are): what autocast would cast
        them to in every call, cast once."""
        return replace(self, **{name: getattr(self, name).to(dtype) for name in _MATMUL_WEIGHTS})


#: The :class:`_Layer` fields that enter matmuls (cast under autocast); the norms' weights do not.
_MATMUL_WEIGHTS = ("q", "k", "v", "o", "gate", "up", "down")


def _base_llama(model):
    """The ``LlamaForCausalLM`` under ``model`` (a peft wrapper is looked through); Unsupported otherwise."""
    from peft import PeftModel
    from transformers import LlamaForCausalLM

    base = model.get_base_model() if isinstance(model, PeftModel) else model
    if type(base) is not LlamaForCausalLM:
        raise Unsupported(f"{type(base).__name__} is not a LlamaForCausalLM")
    return base


def _check_model(llama) -> None:
    """Raise Unsupported unless the model is transformers' own Llama using only the features LeanLlama replicates."""
    from transformers.models.llama import modeling_llama as hf

    cfg, inner = llama.config, llama.model
    parts = [(inner, hf.LlamaModel), (inner.norm, hf.LlamaRMSNorm)]
    for layer in inner.layers[: cfg.num_hidden_layers]:
        parts += [(layer, hf.LlamaDecoderLayer), (layer.self_attn, hf.LlamaAttention), (layer.mlp, hf.LlamaMLP),
                  (layer.input_layernorm, hf.LlamaRMSNorm), (layer.post_attention_layernorm, hf.LlamaRMSNorm)]
    checks = {
        "a module is not transformers' Llama module": any(type(m) is not kind for m, kind in parts),
        "attention is neither sdpa nor eager": cfg._attn_implementation not in ("sdpa", "eager"),
        "RoPE is not the default kind (rope scaling)": inner.rotary_emb.rope_type != "default",
        "attention or MLP projections have biases": bool(cfg.attention_bias or cfg.mlp_bias),
        "the MLP activation is not silu": cfg.hidden_act != "silu",
        "attention heads are not a multiple of key/value heads": cfg.num_attention_heads % cfg.num_key_value_heads != 0,
        "attention is not causal": not getattr(cfg, "is_causal", True),
        "hub kernels replace some forwards": bool(getattr(llama, "use_kernels", False)),
        "the model is in training mode (dropout)": llama.training,
        "a module has forward hooks": any(m._forward_hooks or m._forward_pre_hooks for m in llama.modules()),
    }
    failed = [reason for reason, bad in checks.items() if bad]
    if failed:
        raise Unsupported("; ".join(failed))


def _weight(module, kind: type) -> torch.Tensor:
    """The weight parameter of a bias-free ``kind`` module, or of the base layer of a LoRA wrapper that
    adds nothing to it (adapters disabled, as under ``rollout.merged_lora``, and not merged in place)."""
    from peft.tuners.lora import LoraLayer

    if isinstance(module, LoraLayer):
        active = [a for a in module.active_adapters if a in module.lora_A or a in module.lora_embedding_A]
        if module.merged or (active and not module.disable_adapters):
            raise Unsupported("LoRA adapters are active; build the decoder inside rollout.merged_lora")
        module = module.get_base_layer()
    if type(module) is not kind or getattr(module, "bias", None) is not None:
        raise Unsupported(f"{type(module).__name__} is not a bias-free {kind.__name__}")
    return module.weight


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm: normalise in float32, cast back, then scale."""
    dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    return weight * x.to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE as transformers applies it: ``x cos + rotate_half(x) sin``."""
    half = x.shape[-1] // 2
    return (x * cos) + (torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin)


def _repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Keys or values ``(rows, kv_heads, columns, head_dim)`` with each head repeated ``groups`` times, as
    transformers' ``repeat_kv`` lays them out."""
    if groups == 1:
        return x
    rows, heads, columns, dim = x.shape
    return x[:, :, None].expand(rows, heads, groups, columns, dim).reshape(rows, heads * groups, columns, dim)


def _autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype autocast computes matmuls in on ``device`` at this moment, or None where autocast is off."""
    return torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None


class LeanLlama:
    """Prefill and decode steps of a ``LlamaForCausalLM``, equal bit for bit to its own forward.

    Build it where the weights to sample with are in place: under ``rollout.merged_lora`` the
    LoRA update is folded into the base weights, and the parameters read here are those base
    weights. It reads them at call time, so it must be used inside the same context.

    The cache keeps, per layer, keys and values of shape ``(rows, kv_heads, capacity, head_dim)``
    and a boolean padding row per batch row; a step writes its columns after the used ones and
    attends over exactly the used columns, as the model's growing cache would. ``room`` is the
    number of columns reserved after the prompt; the cache doubles when a step needs more.

    Grouped key/value heads (GQA, as in SmolLM2) take the path transformers' sdpa attention takes
    for the same call (``enable_gqa`` without a mask, the query heads packed for a one-column step
    with a mask, repeated keys and values otherwise; repeated keys and values for eager).

    Built inside a bf16 autocast (``--bf16``), it casts the projections' weights and the head to
    bf16 once, where autocast would cast them in every call, and holds the cache in bf16, which is
    what autocast casts the keys and values to before attention reads them. The arithmetic is
    unchanged, so the logits still equal the model's own under the same autocast; a pretrained
    model's decode step otherwise spends a quarter of its time casting weights.
    """

    def __init__(self, model, room: int = 256):
        llama = _base_llama(model)
        _check_model(llama)
        cfg, inner = llama.config, llama.model
        self.embed = _weight(inner.embed_tokens, torch.nn.Embedding)
        self.layers = [_Layer.of(layer) for layer in inner.layers[: cfg.num_hidden_layers]]
        self.norm, self.norm_eps = inner.norm.weight, inner.norm.variance_epsilon
        self.lm_head = _weight(llama.lm_head, torch.nn.Linear)
        self.eager = cfg._attn_implementation == "eager"
        self.heads, self.head_dim = cfg.num_attention_heads, inner.layers[0].self_attn.head_dim
        self.kv_heads = cfg.num_key_value_heads
        self.groups = self.heads // self.kv_heads
        self.scaling = inner.layers[0].self_attn.scaling
        self.inv_freq, self.rope_scale = inner.rotary_emb.inv_freq, inner.rotary_emb.attention_scaling
        self.device, self.dtype = self.embed.device, self.embed.dtype
        # under autocast: the matmuls' weights cast once, the cache in the dtype attention reads it in
        self.cache_dtype = _autocast_dtype(self.device) or self.dtype
        if self.cache_dtype != self.dtype:
            self.layers = [layer.cast(self.cache_dtype) for layer in self.layers]
            self.lm_head = self.lm_head.to(self.cache_dtype)
        self.room = room
        self.cos = self.sin = torch.empty(0, self.head_dim, device=self.device, dtype=self.dtype)
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.padding = torch.empty(0, 0, dtype=torch.bool, device=self.device)
        self.used = 0  # columns of the cache in use

    # -- the decoder interface of rollout.generate -------------------------------------------

    def prefill(self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Run the left-padded prompts into a fresh cache; the logits after each prompt's last token."""
        rows, width = ids.shape
        shape = (rows, self.kv_heads, width + self.room, self.head_dim)
        self.keys = [torch.empty(shape, device=self.device, dtype=self.cache_dtype) for _ in self.layers]
        self.values = [torch.empty(shape, device=self.device, dtype=self.cache_dtype) for _ in self.layers]
        self.padding = torch.zeros(rows, width + self.room, dtype=torch.bool, device=self.device)
        self.used = 0
        return self._forward(ids, attn, pos, logits_to_keep=1)[:, -1].float()

    def select(self, rows: torch.Tensor) -> None:
        """Keep (or repeat) the batch rows ``rows``, in that order."""
        rows = rows.to(self.device)
        self.keys = [self._take(k, rows) for k in self.keys]
        self.values = [self._take(v, rows) for v in self.values]
        self.padding = self.padding[rows]

    def step(self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Feed one chunk per row (``lengths`` real columns, then masked padding); each row's next-token logits."""
        width = ids.shape[1]
        return _pick_last(self._forward(ids, attn, pos, logits_to_keep=1 if width == 1 else 0), lengths)

    # -- the forward pass -----------------------------------------------------------------------

    def _forward(self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
        """LlamaForCausalLM.forward on new columns ``ids`` after the cached ones: logits of the last
        ``logits_to_keep`` columns (all of them for 0), the new keys and values left in the cache."""
        start, width = self.used, ids.shape[1]
        self._reserve(start + width)
        self.padding[:, start: start + width] = attn.to(self.device, torch.bool)
        self.used = start + width
        mask = self._mask(start, width)
        cos, sin = self._rope(pos)
        x = F.embedding(ids.to(self.device), self.embed)
        for i, layer in enumerate(self.layers):
            x = x + self._attention(i, _rms_norm(x, layer.input_norm, layer.input_eps), cos, sin, mask)
            h = _rms_norm(x, layer.post_norm, layer.post_eps)
            x = x + F.linear(F.silu(F.linear(h, layer.gate)) * F.linear(h, layer.up), layer.down)
        x = _rms_norm(x, self.norm, self.norm_eps)
        return F.linear(x[:, -logits_to_keep:, :], self.lm_head)

    def _attention(self, i: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask) -> torch.Tensor:
        """LlamaAttention of layer ``i``: project, rotate, write the new keys/values, attend over the used columns."""
        layer, (rows, width, _) = self.layers[i], x.shape
        shape = (rows, width, -1, self.head_dim)
        q = F.linear(x, layer.q).view(shape).transpose(1, 2)
        k = F.linear(x, layer.k).view(shape).transpose(1, 2)
        v = F.linear(x, layer.v).view(shape).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        end, start = self.used, self.used - width
        self.keys[i][:, :, start:end] = k
        self.values[i][:, :, start:end] = v
        keys, values = self.keys[i][:, :, :end], self.values[i][:, :, :end]
        gqa = {}
        if self.eager:
            keys, values = _repeat_kv(keys, self.groups), _repeat_kv(values, self.groups)
            weights = torch.matmul(q, keys.transpose(2, 3)) * self.scaling + mask
            weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(weights, values)
        else:
            if self.groups > 1 and mask is None:
                gqa = {"enable_gqa": True}
            elif self.groups > 1 and width == 1:  # a query head's group as columns of its key/value head
                q = q.reshape(rows, self.kv_heads, self.groups, self.head_dim)
            else:
                keys, values = _repeat_kv(keys, self.groups), _repeat_kv(values, self.groups)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, dropout_p=0.0, scale=self.scaling,
                                                 is_causal=mask is None and width > 1, **gqa)
            out = out.reshape(rows, -1, width, self.head_dim)
        out = out.transpose(1, 2).contiguous().reshape(rows, width, -1)
        return F.linear(out, layer.o)

    # -- cache, mask and RoPE bookkeeping ---------------------------------------------------------

    def _reserve(self, columns: int) -> None:
        """Make the cache hold at least ``columns`` columns (doubling), keeping the used ones."""
        capacity = self.padding.shape[1]
        if columns <= capacity:
            return
        capacity = max(columns, 2 * capacity)
        self.keys = [self._grow(k, capacity) for k in self.keys]
        self.values = [self._grow(v, capacity) for v in self.values]
        padding = torch.zeros(self.padding.shape[0], capacity, dtype=torch.bool, device=self.device)
        padding[:, : self.used] = self.padding[:, : self.used]
        self.padding = padding

    def _take(self, cache: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Rows ``rows`` of one layer's keys or values, same capacity; only the used columns are copied."""
        out = torch.empty(len(rows), *cache.shape[1:], device=self.device, dtype=cache.dtype)
        out[:, :, : self.used] = cache[rows, :, : self.used]
        return out

    def _grow(self, cache: torch.Tensor, capacity: int) -> torch.Tensor:
        """A copy of one layer's keys or values with room for ``capacity`` columns."""
        out = torch.empty(*cache.shape[:2], capacity, cache.shape[3], device=self.device, dtype=cache.dtype)
        out[:, :, : self.used] = cache[:, :, : self.used]
        return out

    def _mask(self, start: int, width: int):
        """The 4-D mask ``create_causal_mask`` builds for this step: a column is seen when it is not after
        the query's column and not padding; None for sdpa where transformers leaves the mask out (no
        padding, and one query column or an empty cache)."""
        end = start + width
        padding = self.padding[:, :end]
        if not self.eager and (width == 1 or start == 0) and bool(padding.all()):
            return None
        causal = torch.arange(start, end, device=self.device)[:, None] >= torch.arange(end, device=self.device)[None, :]
        mask = causal[None, None] & padding[:, None, None, :]
        # Additive, once for every layer: 0 or the dtype's min for eager (as transformers builds it), 0 or
        # -inf for sdpa (what sdpa turns a boolean mask into, in each layer, before its kernel runs).
        hidden = torch.finfo(self.dtype).min if self.eager else float("-inf")
        return torch.zeros(mask.shape, device=self.device, dtype=self.dtype).masked_fill_(~mask, hidden)

    def _rope(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin at positions ``pos`` (rows, columns), shaped to broadcast over heads, from a
        table computed as LlamaRotaryEmbedding computes them (grown when a position passes its end).
        An entry depends on its position only (torch's vectorised and scalar cos and sin agree), so
        it equals what the model computes for that position in a batch of any shape; a test checks."""
        need = int(pos.max()) + 1
        if need > self.cos.shape[0]:
            size = max(need, 2 * self.cos.shape[0], 1024)
            positions = torch.arange(size, device=self.device)[None]
            freqs = positions[..., None].float() * self.inv_freq.to(self.device, torch.float)
            emb = torch.cat((freqs, freqs), dim=-1)[0]
            self.cos = (emb.cos() * self.rope_scale).to(self.dtype)
            self.sin = (emb.sin() * self.rope_scale).to(self.dtype)
        pos = pos.to(self.device)
        return self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)


#: The projections :class:`MultiLlama` applies a per-row adapter to: ``(module under a decoder layer, its name)``.
_PROJECTIONS = (("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"), ("self_attn", "o_proj"),
                ("mlp", "gate_proj"), ("mlp", "up_proj"), ("mlp", "down_proj"))


def _stacked_adapters(models: list) -> tuple[dict, torch.Tensor]:
    """Every run's LoRA factors side by side: ``{(layer, projection): (A (R, in), B scaled (out, R))}`` and the
    run of each of the ``R`` rank columns (the same for every projection).

    Unsupported unless every run adapts the same projections, each run with one rank, with plain LoRA
    (no DoRA, bias or fan-in-fan-out), and shares the base weights of the first run.
    """
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    bases = [m.get_base_model() if isinstance(m, PeftModel) else m for m in models]
    for base in bases[1:]:
        for (name, a), b in zip(bases[0].named_parameters(), base.parameters()):
            if "lora_" not in name and not torch.equal(a, b):
                raise Unsupported(f"the runs do not share the base model ({name} differs)")
    factors: dict[tuple[int, str], tuple[list, list]] = {}
    ranks = []
    for k, base in enumerate(bases):
        found = 0
        for i, layer in enumerate(base.model.layers):
            for part, proj in _PROJECTIONS:
                module = getattr(getattr(layer, part), proj)
                if not isinstance(module, LoraLayer):
                    continue
                names = [a for a in module.active_adapters if a in module.lora_A]
                if module.merged or module.disable_adapters or len(names) != 1:
                    raise Unsupported(f"run {k}, layer {i} {proj}: not one active, unmerged LoRA adapter")
                a = names[0]
                if module.use_dora.get(a) or getattr(module, "lora_bias", {}).get(a) or module.fan_in_fan_out:
                    raise Unsupported(f"run {k}, layer {i} {proj}: only plain LoRA adapters are batched")
                lora_a, lora_b = module.lora_A[a].weight, module.lora_B[a].weight * module.scaling[a]
                a_list, b_list = factors.setdefault((i, proj), ([], []))
                if len(a_list) != k:
                    raise Unsupported(f"layer {i} {proj}: the runs adapt different projections")
                a_list.append(lora_a)
                b_list.append(lora_b)
                ranks.append((k, lora_a.shape[0]))
                found += 1
        if found != sum(isinstance(m, LoraLayer) for m in base.modules()):
            raise Unsupported(f"run {k}: an adapter sits outside the decoder layers' projections")
    rank_of = dict(ranks)
    if any(len(a) != len(models) for a, _ in factors.values()) or any(rank_of[k] != r for k, r in ranks):
        raise Unsupported("the runs adapt different projections, or a run uses several ranks")
    cols = torch.repeat_interleave(torch.arange(len(models)), torch.tensor([rank_of.get(k, 0) for k in range(len(models))]))
    return {key: (torch.cat(a), torch.cat(b, dim=1)) for key, (a, b) in factors.items()}, cols


class MultiLlama(LeanLlama):
    """Decode steps of several LoRA runs of one ``LlamaForCausalLM`` in one batch, each row with its own run's adapter.

    ``models``: the runs' policies (peft-wrapped copies of one base model, adapters active);
    ``runs``: the run of each distinct prompt that :meth:`prefill` will get. A projection ``W``
    with LoRA factors ``A_k, B_k`` (scale ``s_k``) computes, for a row of run ``k``,
    ``x W^T + ((x A^T) * onehot_k) (s B)^T`` where ``A`` and ``s B`` stack every run's factors
    side by side and ``onehot_k`` keeps run ``k``'s rank columns: one matmul of the base weight
    and two thin ones for all runs together. Two other differences from :class:`LeanLlama`, both
    for speed: each distinct prompt's keys and values are held once (not copied to each of its
    rows); a step attends to them with one matmul per prompt over its rows (laid out in slots),
    and to each row's own response columns apart; and attention is computed as eager Llama
    computes it (scores, softmax in float32, weighted values), with the masks' hidden entries at
    the dtype's minimum. So the logits equal the model's own up to rounding, not bit for bit.

    Grouped key/value heads (GQA, as in SmolLM2) are attended without copying them per query head: a
    key/value head's group of query heads is stacked as rows of one matmul. Built inside a bf16
    autocast (``--bf16``), the base weights, the stacked adapters, the head and the caches are bf16
    (what autocast casts them to in every call) and the residual stream stays float32, as in the
    model's own forward under the same autocast.
    """

    def __init__(self, models: list, runs: torch.Tensor, room: int = 256):
        from peft import PeftModel

        first = models[0]
        with first.disable_adapter() if isinstance(first, PeftModel) else contextlib.nullcontext():
            super().__init__(first, room)
        self.lora, self.cols = _stacked_adapters(models)
        self.lora = {key: (a.to(self.device, self.cache_dtype), b.to(self.device, self.cache_dtype))
                     for key, (a, b) in self.lora.items()}
        self.cols = self.cols.to(self.device)
        self.run_of_prompt = runs.to(self.device)
        self.prompt_keys: list[torch.Tensor] = []
        self.prompt_values: list[torch.Tensor] = []
        self.prompt_mask = torch.empty(0)
        self.src = torch.empty(0, dtype=torch.long)

    # -- the decoder interface of rollout.decode ----------------------------------------------

    def prefill(self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Run the left-padded prompts; keep their keys and values once each; the logits after each prompt."""
        rows, width = ids.shape
        padding = attn.to(self.device, torch.bool)
        causal = torch.ones(width, width, dtype=torch.bool, device=self.device).tril()
        mask = self._additive(causal[None, None] & padding[:, None, None, :])
        self.prompt_mask = self._additive(padding[:, None, None, :])
        self.src = torch.arange(rows, device=self.device)
        self._layout()
        cos, sin = self._rope(pos)
        self.prompt_keys, self.prompt_values = [], []
        x = F.embedding(ids.to(self.device), self.embed)
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(x, i, layer, cos, sin)
            self.prompt_keys.append(k.to(self.cache_dtype).contiguous())
            self.prompt_values.append(v.to(self.cache_dtype).contiguous())
            out = self._grouped(self._softmax(self._grouped(q, k.transpose(2, 3)) * self.scaling + mask), v)
            x = x + self._project(out.transpose(1, 2).reshape(rows, width, -1), i, "o_proj", layer.o)
            x = x + self._mlp(x, i, layer)
        # the response cache starts empty, one row per prompt
        shape = (rows, self.kv_heads, self.room, self.head_dim)
        self.keys = [torch.empty(shape, device=self.device, dtype=self.cache_dtype) for _ in self.layers]
        self.values = [torch.empty(shape, device=self.device, dtype=self.cache_dtype) for _ in self.layers]
        self.padding = torch.zeros(rows, self.room, dtype=torch.bool, device=self.device)
        self.used = 0
        return F.linear(_rms_norm(x[:, -1], self.norm, self.norm_eps), self.lm_head).float()

    def _qkv(self, x: torch.Tensor, i: int, layer, cos: torch.Tensor, sin: torch.Tensor):
        """Layer ``i``'s queries, keys and values of ``x`` (rows, width, hidden), each row with its run's weights;
        queries and keys rotated. Queries are (rows, heads, width, head_dim), keys and values (rows, kv_heads, ...)."""
        rows, width = x.shape[:2]
        h = _rms_norm(x, layer.input_norm, layer.input_eps)
        q, k, v = (self._project(h, i, name, w).view(rows, width, -1, self.head_dim).transpose(1, 2)
                   for name, w in (("q_proj", layer.q), ("k_proj", layer.k), ("v_proj", layer.v)))
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def select(self, rows: torch.Tensor) -> None:
        """Keep (or repeat) the batch rows ``rows``, in that order; prompts no row reads any more are dropped."""
        super().select(rows)
        self.src = self.src[rows.to(self.device)]
        kept = torch.unique(self.src)
        if len(kept) < len(self.prompt_keys[0]):
            self.prompt_keys = [k[kept] for k in self.prompt_keys]
            self.prompt_values = [v[kept] for v in self.prompt_values]
            self.prompt_mask, self.run_of_prompt = self.prompt_mask[kept], self.run_of_prompt[kept]
            self.src = torch.searchsorted(kept, self.src)
        self._layout()

    def step(self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Feed one chunk per row (``lengths`` real columns, then masked padding); each row's next-token logits."""
        rows, width = ids.shape
        start = self.used
        self._reserve(start + width)
        self.padding[:, start: start + width] = attn.to(self.device, torch.bool)
        self.used = end = start + width
        causal = torch.arange(start, end, device=self.device)[:, None] >= torch.arange(end, device=self.device)[None, :]
        own_mask = self._additive(causal[None, None] & self.padding[:, None, None, :end])
        cos, sin = self._rope(pos)
        x = F.embedding(ids.to(self.device), self.embed)
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(x, i, layer, cos, sin)
            self.keys[i][:, :, start:end] = k
            self.values[i][:, :, start:end] = v
            keys, values = self.keys[i][:, :, :end], self.values[i][:, :, :end]
            prompt = self._from_slots(self._grouped(self._to_slots(q), self.prompt_keys[i].transpose(2, 3))
                                      * self.scaling + self.prompt_mask)
            own = self._grouped(q, keys.transpose(2, 3)) * self.scaling + own_mask
            weights = self._softmax(torch.cat([prompt, own], -1))
            p = prompt.shape[-1]
            out = self._from_slots(self._grouped(self._to_slots(weights[..., :p]), self.prompt_values[i]))
            out = out + self._grouped(weights[..., p:], values)
            x = x + self._project(out.transpose(1, 2).reshape(rows, width, -1), i, "o_proj", layer.o)
            x = x + self._mlp(x, i, layer)
        at = (lengths.to(self.device) - 1).clamp_min(0)
        last = x[torch.arange(rows, device=self.device), at]
        return F.linear(_rms_norm(last, self.norm, self.norm_eps), self.lm_head).float()

    # -- pieces -----------------------------------------------------------------------------------

    def _project(self, x: torch.Tensor, i: int, name: str, weight: torch.Tensor) -> torch.Tensor:
        """``x W^T`` plus each row's own run's LoRA update, when the projection has adapters."""
        out = F.linear(x, weight)
        if (i, name) in self.lora:
            a, b = self.lora[(i, name)]
            out = out + F.linear(F.linear(x, a) * self.onehot, b)
        return out

    def _mlp(self, x: torch.Tensor, i: int, layer: _Layer) -> torch.Tensor:
        h = _rms_norm(x, layer.post_norm, layer.post_eps)
        gate, up = self._project(h, i, "gate_proj", layer.gate), self._project(h, i, "up_proj", layer.up)
        return self._project(F.silu(gate) * up, i, "down_proj", layer.down)

    def _grouped(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a @ b`` for ``a`` over query heads (N, heads, m, x) and ``b`` over key/value heads (N, kv_heads, x, n):
        query head ``h`` meets key/value head ``h // groups``, as transformers' ``repeat_kv`` pairs them, with each
        group's query heads stacked as rows of one matmul instead of the keys and values copied."""
        if self.groups == 1:
            return torch.matmul(a, b)
        n, heads, m, x = a.shape
        out = torch.matmul(a.reshape(n, self.kv_heads, self.groups * m, x), b)
        return out.view(n, heads, m, out.shape[-1])

    def _softmax(self, scores: torch.Tensor) -> torch.Tensor:
        return F.softmax(scores, dim=-1, dtype=torch.float32).to(self.dtype)

    def _additive(self, seen: torch.Tensor) -> torch.Tensor:
        """0 where ``seen``, the dtype's minimum elsewhere (a row that sees nothing stays finite, as in eager Llama)."""
        return torch.zeros(seen.shape, device=self.device, dtype=self.dtype).masked_fill_(~seen, torch.finfo(self.dtype).min)

    def _layout(self) -> None:
        """Each row's run one-hot over the rank columns, and its slot: rows of one prompt side by side, ``S`` slots a prompt."""
        rows, prompts = len(self.src), len(self.prompt_mask)
        run = self.run_of_prompt[self.src]
        self.onehot = (run[:, None] == self.cols[None, :]).to(self.dtype)[:, None, :]
        counts = torch.bincount(self.src, minlength=prompts)
        self.slots_per_prompt = int(counts.max()) if rows else 1
        order = torch.argsort(self.src, stable=True)
        ordered = self.src[order]
        rank = torch.arange(rows, device=self.device) - torch.searchsorted(ordered, ordered)
        self.slot = torch.empty_like(self.src)
        self.slot[order] = ordered * self.slots_per_prompt + rank

    def _to_slots(self, t: torch.Tensor) -> torch.Tensor:
        """Rows ``(B, H, w, c)`` -> prompts ``(P, H, S * w, c)``, a prompt's rows in its slots (empty slots zero)."""
        _, heads, width, c = t.shape
        prompts, slots = len(self.prompt_mask), self.slots_per_prompt
        out = t.new_zeros(prompts * slots, heads, width, c).index_copy_(0, self.slot, t)
        return out.view(prompts, slots, heads, width, c).transpose(1, 2).reshape(prompts, heads, slots * width, c)

    def _from_slots(self, t: torch.Tensor) -> torch.Tensor:
        """Prompts ``(P, H, S * w, c)`` -> rows ``(B, H, w, c)``: the inverse of :meth:`_to_slots`."""
        prompts, heads, _, c = t.shape
        slots = self.slots_per_prompt
        t = t.view(prompts, heads, slots, -1, c).transpose(1, 2).reshape(prompts * slots, heads, -1, c)
        return t.index_select(0, self.slot)


def make_decoder(model, lean: bool, room: int = 256):
    """:class:`LeanLlama` when ``lean`` and the model is one it reproduces exactly, else :class:`HFDecoder`."""
    if lean:
        try:
            return LeanLlama(model, room)
        except Unsupported:
            pass
    return HFDecoder(model)

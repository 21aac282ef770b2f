"""NeMo-RL ``train_data_step<N>.jsonl``: per-token advantages and loss mask over the full token sequence."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from skillgate_lib.readers import fields
from skillgate_lib.readers.fields import BadValue
from skillgate_lib.readers.files import jsonl_records
from skillgate_lib.readers.problems import Problems
from skillgate_lib.readers.rows import ReaderOptions, categorise, find_reads, finish, group_hash, meta_field, rows_of
from skillgate_lib.readers.tokenizers import Tokenizer, make_tokenizer
from skillgate_lib.readers.verl import require, step_of_name

FIELDS = ("token_ids", "token_loss_mask", "advantages", "rewards", "input_lengths")


def nemo_files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    return sorted(path.glob("train_data_step*.jsonl"), key=lambda p: step_of_name(p) or 0)


def _reward(rec: dict) -> float:
    if isinstance(rec.get("rewards"), list):
        return float(fields.number_list(rec, "rewards").sum())
    return fields.number(rec, "rewards")


def nemo_row(rec: dict, step: int, opts: ReaderOptions, tok: Tokenizer) -> dict:
    """One kit row from a NeMo-RL line. The response starts at the first loss-bearing token; L = loss-bearing
    tokens; ``read_adv`` / ``adv_exec`` are mean logged advantages over the read spans / the other loss-bearing
    tokens; ``sel_weight`` is the selector tokens' share of ``sum |A_t|`` (token-mean when every A_t is 0)."""
    n = fields.integer(rec, "input_lengths", minimum=1)
    ids = fields.number_list(rec, "token_ids", int)[:n]
    mask = fields.number_list(rec, "token_loss_mask")[:n]
    adv = fields.number_list(rec, "advantages")[:n]
    if not len(ids) == len(mask) == len(adv) == n:
        raise BadValue(f"field 'advantages': expected {n} entries (input_lengths) in token_ids, token_loss_mask and "
                       f"advantages, got {len(ids)}, {len(mask)}, {len(adv)}")
    if not np.isin(mask, (0, 1)).all():
        raise BadValue(f"field 'token_loss_mask': value {mask[~np.isin(mask, (0, 1))][0]:g}; expected 0 or 1 per token")
    if not (mask > 0).any():
        raise BadValue("field 'token_loss_mask': no loss-bearing token; expected the response's tokens marked 1")
    reward = _reward(rec)
    start = int(np.argmax(mask > 0))
    prompt_ids, resp_ids = ids[:start], ids[start:]
    text, offsets = tok.decode_offsets(resp_ids.tolist())
    prompt = tok.decode_offsets(prompt_ids.tolist())[0] if len(prompt_ids) else ""
    reads = find_reads(text, offsets, opts.read_patterns)
    task_id = fields.optional_text(rec, "task_id")
    meta = opts.tasks.lookup(task_id, prompt) if opts.tasks is not None else None
    cats = categorise([r[0] for r in reads], meta, opts.tasks)
    m, a = mask[start:], adv[start:]
    sel = np.zeros(len(m), bool)
    read_adv = []
    for _, s, e in reads:
        sel[s:e] = True
        span_m = m[s:e] > 0
        read_adv.append(float(a[s:e][span_m].mean()) if span_m.any() else 0.0)
    w = m * np.abs(a)
    if w.sum() == 0:
        w = m
    exec_tok = (m > 0) & ~sel
    success = fields.optional_flag(rec, "success")
    return dict(
        step=step, split="train", group_id=group_hash(step, " ".join(map(str, prompt_ids.tolist()))),
        task_id=meta_field(rec, meta, "task_id", fields.optional_text),
        domain=meta_field(rec, meta, "domain", fields.optional_text),
        horizon=meta_field(rec, meta, "horizon", fields.optional_integer), response_tokens=int((m > 0).sum()),
        reward=reward, success=reward >= opts.success_threshold if success is None else success,
        read_skills=[r[0] for r in reads], read_categories=cats, read_tok_start=[r[1] for r in reads],
        read_tok_end=[r[2] for r in reads], read_adv=read_adv, sel_weight=float(w[sel].sum() / w.sum()),
        _adv=float(a[exec_tok].mean()) if exec_tok.any() else 0.0,
    )


def read_nemo(path: str | Path, opts: ReaderOptions, problems: Problems) -> Iterator[pa.Table]:
    """NeMo-RL ``train_data_step<N>.jsonl`` files (a directory of them or one file); needs the run's tokenizer."""
    tok = make_tokenizer(opts.tokenizer)
    expected = f"one JSON object per line with {', '.join(FIELDS)} (NeMo-RL train data)"
    for file in nemo_files(Path(path)):
        step = step_of_name(file) or 0
        recs, where_of = jsonl_records(file, problems, expected)
        good = [(r, w) for r, w in zip(recs, where_of) if require(r, w, FIELDS, problems, "NeMo-RL")]
        rows, wheres = rows_of([r for r, _ in good], [w for _, w in good], problems,
                               lambda rec: nemo_row(rec, step, opts, tok))
        table = finish(rows, wheres, problems, opts, credit="logged")
        if table is not None:
            yield table

"""Readers: TRL, verl, NeMo-RL and plain-table logs as the kit's trajectory table.

Every reader yields Arrow tables in :data:`skillgate_lib.logs.TRAJECTORY_SCHEMA`, one
per input file (a file holds one training step in all three engines, so memory is
bounded by the largest step, never by the run). The kit's own Parquet runs and plain
Parquet tables need no reader: the audit scans them in place.

What an external log does not hold is recovered:

* **read actions and selector spans** by parsing the completion text with
  :data:`DEFAULT_READ_PATTERNS` (any regex with a ``name`` group can be passed):
  ``<read>name</read>`` (spaces inside the tags tolerated) and reads of
  ``~/.claude/skills/<name>/SKILL.md``. A read's selector span is the tokens that
  overlap the characters of its ``name`` group;
* **token counts** with a Hugging Face tokenizer (``tokenizer=`` a name or path), or
  the whitespace fallback :class:`WhitespaceTokenizer`: a token is a maximal run of
  non-whitespace characters, so ``<read>x</read>`` is one token and its selector
  span has length 1;
* **group ids** from identical prompts within one step file;
* **categories** (and domain, horizon) by a join with a :class:`TaskTable`;
* **broadcast advantages** recomputed from group rewards when absent; when logged,
  they are used as logged and checked against the recomputation (mismatches are
  counted in :class:`Problems`, not fatal: engines differ in std conventions).

TRL and verl log one scalar advantage per completion, so ``read_adv`` is that scalar
for every read, ``adv_exec`` the scalar and ``sel_weight = k / L`` (token-mean, k the
selector tokens, L the completion tokens). NeMo-RL logs per-token advantages: there
``read_adv`` is the mean advantage over a read's loss-bearing span tokens,
``adv_exec`` the mean over the other loss-bearing tokens, and ``sel_weight`` the
selector tokens' share of ``sum |A_t|`` over loss-bearing tokens (token-mean
``k / L`` when every advantage is zero, since then no token carries weight).

Task metadata (``--tasks META``) is JSONL/JSON (a list of objects), CSV or Parquet:

* JSONL/JSON: one object per task: ``task_id`` and/or ``prompt`` (join keys: a log
  row's ``task_id`` column if it has one, else its prompt text), ``oracle`` (the
  oracle skill's name), ``skills`` (``{name: category}`` for the rest of the slate),
  optional ``domain`` and ``horizon``;
* CSV/Parquet: long format, one row per (task, skill): ``task_id`` and/or
  ``prompt``, ``skill``, ``category``, optional ``domain``, ``horizon``.

A read naming a skill outside its task's slate is an *unknown skill* error.
Bad input never stops silently: see :class:`Problems`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from skillgate_lib.logs import CATEGORIES, TRAJECTORY_SCHEMA, ArtifactError

#: Read-action patterns; each has a ``name`` group whose characters are the selector span.
DEFAULT_READ_PATTERNS = (
    r"<read>\s*(?P<name>[^<>\s]+?)\s*</read>",
    r"~/\.claude/skills/(?P<name>[^/\s]+)/SKILL\.md",
)
#: Reasons a row can be bad; ``--skip-bad`` reports counts under these keys.
REASONS = ("corrupt line", "missing column", "unknown skill", "group of size 1", "span outside response", "bad value")


@dataclass
class Problems:
    """Collects bad input. ``skip_bad=False`` raises on the first problem (file, line/row, field);
    ``skip_bad=True`` counts skipped rows by reason and keeps the first message of each."""

    skip_bad: bool = False
    skipped: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    adv_checked: int = 0
    adv_mismatch: int = 0
    adv_max_diff: float = 0.0

    def bad(self, reason: str, message: str, n_rows: int = 1) -> None:
        assert reason in REASONS, reason
        if not self.skip_bad:
            raise ArtifactError(message)
        self.skipped[reason] += n_rows
        self.examples.setdefault(reason, message)

    def check_advantages(self, logged: np.ndarray, recomputed: np.ndarray, tol: float = 1e-3) -> None:
        diff = np.abs(np.asarray(logged, float) - np.asarray(recomputed, float))
        self.adv_checked += len(diff)
        self.adv_mismatch += int((diff > tol * (1 + np.abs(recomputed))).sum())
        if len(diff):
            self.adv_max_diff = max(self.adv_max_diff, float(diff.max()))

    def summary(self) -> str:
        lines = [f"skipped {n} row(s): {r} (e.g. {self.examples[r]})" for r, n in sorted(self.skipped.items())]
        if self.adv_checked:
            lines.append(f"advantage check: {self.adv_mismatch} of {self.adv_checked} logged advantages differ from the "
                         f"recomputed group broadcast (max |diff| {self.adv_max_diff:.3g})")
        return "\n".join(lines)


# ---------------------------------------------------------------------------- tokenizers


class Tokenizer(Protocol):
    def offsets(self, text: str) -> np.ndarray:
        """``(n_tokens, 2)`` character ``[start, end)`` of each token of ``text``."""

    def decode_offsets(self, ids: Sequence[int]) -> tuple[str, np.ndarray]:
        """Text of token ``ids`` and each token's character span in it (NeMo-RL logs hold ids only)."""


class WhitespaceTokenizer:
    """The fallback: a token is a maximal run of non-whitespace characters."""

    _TOKEN = re.compile(r"\S+")

    def offsets(self, text: str) -> np.ndarray:
        return np.array([m.span() for m in self._TOKEN.finditer(text)], dtype=np.int64).reshape(-1, 2)

    def decode_offsets(self, ids: Sequence[int]) -> tuple[str, np.ndarray]:
        raise ArtifactError("NeMo-RL logs hold token ids only; pass a tokenizer (--tokenizer NAME_OR_PATH) to decode them")


class HFTokenizer:
    """A Hugging Face tokenizer (fast, for offsets); ``source`` is a name, a path or a tokenizer object."""

    def __init__(self, source: Any):
        if isinstance(source, (str, Path)):
            from transformers import AutoTokenizer

            source = AutoTokenizer.from_pretrained(str(source))
        self.tok = source

    def offsets(self, text: str) -> np.ndarray:
        enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
        return np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)

    def decode_offsets(self, ids: Sequence[int]) -> tuple[str, np.ndarray]:
        ids = list(ids)
        text = self.tok.decode(ids)
        enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
        if list(enc["input_ids"]) == ids:
            return text, np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        # Re-encoding is not the identity (merges differ): fall back to prefix decoding, exact but quadratic.
        ends = [len(self.tok.decode(ids[: i + 1])) for i in range(len(ids))]
        starts = [0, *ends[:-1]]
        return text, np.array([starts, ends], dtype=np.int64).T.reshape(-1, 2)


def make_tokenizer(spec: Any = None) -> Tokenizer:
    """``None`` or ``"whitespace"``: the fallback; anything else: :class:`HFTokenizer`."""
    if spec is None or spec == "whitespace":
        return WhitespaceTokenizer()
    if hasattr(spec, "offsets"):
        return spec
    return HFTokenizer(spec)


# ---------------------------------------------------------------------------- task metadata


class TaskTable:
    """Slate categories, domain and horizon per task, keyed by ``task_id`` and/or prompt text."""

    def __init__(self, rows: Sequence[dict], source: str = "<tasks>"):
        self.source = source
        self.by_key: dict[str, dict] = {}
        for i, row in enumerate(rows):
            keys = [str(row[k]) for k in ("task_id", "prompt") if row.get(k) is not None]
            if not keys:
                raise ArtifactError(f"{source}: row {i}: field 'task_id'/'prompt' missing; every task needs a join key")
            skills = {str(k): str(v) for k, v in (row.get("skills") or {}).items()}
            if row.get("oracle"):
                skills[str(row["oracle"])] = "oracle"
            for name, cat in skills.items():
                if cat not in CATEGORIES:
                    raise ArtifactError(f"{source}: row {i}: field 'skills' gives {name!r} category {cat!r}; expected one of {CATEGORIES}")
            for key in keys:
                entry = self.by_key.setdefault(key, {"skills": {}, "task_id": None, "domain": None, "horizon": None})
                entry["skills"].update(skills)
                for name in ("task_id", "domain", "horizon"):
                    if row.get(name) is not None:
                        entry[name] = row[name]

    @classmethod
    def load(cls, path: str | Path) -> TaskTable:
        path = Path(path)
        if path.suffix in {".csv", ".parquet"}:
            df = pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
            missing = [c for c in ("skill", "category") if c not in df.columns]
            if missing or not {"task_id", "prompt"} & set(df.columns):
                raise ArtifactError(f"{path}: missing column(s) {missing or ['task_id or prompt']}; "
                                    "long format needs task_id and/or prompt, skill, category")
            rows = []
            for r in df.to_dict("records"):
                row = {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
                row["skills"] = {row.pop("skill"): row.pop("category")}
                rows.append(row)
            return cls(rows, str(path))
        text = path.read_text()
        if path.suffix == ".json":
            return cls(json.loads(text), str(path))
        rows = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ArtifactError(f"{path}: line {lineno}: not valid JSON ({err.msg})") from None
        return cls(rows, str(path))

    def lookup(self, task_id: Any, prompt: str) -> dict | None:
        if task_id is not None and str(task_id) in self.by_key:
            return self.by_key[str(task_id)]
        return self.by_key.get(prompt)


# ---------------------------------------------------------------------------- shared row logic


@dataclass(frozen=True)
class ReaderOptions:
    """How external logs are interpreted (every field has a CLI flag in ``audit``)."""

    tokenizer: Any = None
    """``None``/``"whitespace"`` or a Hugging Face tokenizer name, path or object."""
    read_patterns: tuple[str, ...] = DEFAULT_READ_PATTERNS
    """regexes with a ``name`` group; each match is one read action."""
    tasks: TaskTable | None = None
    """slate categories per task; required when reads must be categorised and the log has no ``read_categories``."""
    reward_columns: tuple[str, ...] | None = None
    """TRL reward-function columns summed into the reward (default: every numeric non-metadata column)."""
    success_threshold: float = 1.0
    """``success = reward >= threshold`` when the log has no ``success`` column."""
    std_ddof: int = 1
    """ddof of the group std when recomputing advantages (TRL and verl use torch's unbiased std)."""
    std_eps: float = 1e-4
    """added to the group std (TRL: 1e-4; verl: 1e-6)."""
    skip_bad: bool = False


def group_advantages(rewards: np.ndarray, groups: np.ndarray, ddof: int = 1, eps: float = 1e-4) -> np.ndarray:
    """GRPO broadcast advantage ``(r - mean_g r) / (std_g r + eps)`` per rollout; shapes ``(n,)``."""
    codes, inv = np.unique(groups, return_inverse=True)
    n = np.bincount(inv).astype(float)
    mean = np.bincount(inv, rewards) / n
    dev = rewards - mean[inv]
    var = np.bincount(inv, dev**2) / np.maximum(n - ddof, 1)
    return dev / (np.sqrt(var)[inv] + eps)


def _prompt_key(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, np.ndarray):
        prompt = prompt.tolist()
    return json.dumps(prompt, sort_keys=True, default=str)


def _text_of(completion: Any) -> str:
    """A completion as text: a string, or the concatenated ``content`` of a message list."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, np.ndarray):
        completion = completion.tolist()
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in completion)
    raise TypeError(f"completion of type {type(completion).__name__}")


def _group_hash(step: int, prompt: str) -> str:
    return f"{step}:{hashlib.sha1(prompt.encode()).hexdigest()[:12]}"


def find_reads(text: str, offsets: np.ndarray, patterns: Sequence[str]) -> list[tuple[str, int, int]]:
    """``[(name, tok_start, tok_end)]`` of the read actions in ``text``, in text order.

    ``offsets`` is ``(n_tokens, 2)`` character spans; a read's span is the tokens that
    overlap its name's characters.
    """
    found = []
    for pat in patterns:
        for m in re.finditer(pat, text):
            a, b = m.span("name")
            hit = np.flatnonzero((offsets[:, 0] < b) & (offsets[:, 1] > a))
            if len(hit):
                found.append((a, m.group("name"), int(hit[0]), int(hit[-1]) + 1))
    found.sort()
    return [(name, s, e) for _, name, s, e in found]


def _task_id(rec: dict, meta: dict | None) -> str | None:
    task_id = rec.get("task_id", meta["task_id"] if meta else None)
    return None if task_id is None else str(task_id)


def _categorise(names: list[str], meta: dict | None, where: str, problems: Problems) -> list[str] | None:
    if not names:
        return []
    if meta is None:
        problems.bad("unknown skill", f"{where}: field 'read_skills': no task metadata for this row's task_id/prompt; "
                                      "pass --tasks META with its slate")
        return None
    unknown = [n for n in names if n not in meta["skills"]]
    if unknown:
        problems.bad("unknown skill", f"{where}: field 'read_skills': unknown skill {unknown[0]!r}; "
                                      f"expected one of the task's slate ({len(meta['skills'])} skills)")
        return None
    return [meta["skills"][n] for n in names]


def _finish(rows: list[dict], where_of: list[str], problems: Problems, opts: ReaderOptions,
            logged_adv: np.ndarray | None, credit: str) -> pa.Table | None:
    """Group, recompute/check broadcast advantages, drop size-1 groups; rows -> Arrow table."""
    if not rows:
        return None
    df = pd.DataFrame(rows)
    sizes = df.groupby("group_id")["group_id"].transform("size").to_numpy()
    for i in np.flatnonzero(sizes == 1):
        problems.bad("group of size 1", f"{where_of[i]}: field 'prompt': group of size 1 (no other rollout of this "
                                        "prompt in the step): GRPO advantages are undefined")
    keep = sizes > 1
    df = df[keep].reset_index(drop=True)
    if df.empty:
        return None
    recomputed = group_advantages(df["reward"].to_numpy(float), df["group_id"].to_numpy(), opts.std_ddof, opts.std_eps)
    if logged_adv is not None:
        adv = logged_adv[keep]
        ok = ~np.isnan(adv)
        problems.check_advantages(adv[ok], recomputed[ok])
        adv = np.where(ok, adv, recomputed)
    else:
        adv = recomputed
    df["adv_exec"] = adv
    if "read_adv" not in df.columns:
        df["read_adv"] = [[float(a)] * len(r) for a, r in zip(adv, df["read_skills"])]
    df["rollout"] = df.groupby("group_id").cumcount()
    df["credit"] = credit
    return pa.Table.from_pandas(df[list(TRAJECTORY_SCHEMA.names)], schema=TRAJECTORY_SCHEMA, preserve_index=False)


def _text_rows(records: list[dict], where_of: list[str], step_of: list[int], problems: Problems, opts: ReaderOptions,
               tok: Tokenizer) -> tuple[list[dict], list[str], list[int]]:
    """Turn ``{prompt, completion, reward, success?, task_id?, horizon?, domain?}`` into kit rows."""
    rows, wheres, kept = [], [], []
    for i, (rec, where, step) in enumerate(zip(records, where_of, step_of)):
        try:
            text = _text_of(rec["completion"])
        except TypeError as err:
            problems.bad("bad value", f"{where}: field 'completion': {err}; expected a string or a message list")
            continue
        prompt = _prompt_key(rec["prompt"])
        offsets = tok.offsets(text)
        if len(offsets) == 0:
            problems.bad("bad value", f"{where}: field 'completion': empty completion (0 tokens)")
            continue
        reads = find_reads(text, offsets, opts.read_patterns)
        names = [r[0] for r in reads]
        meta = opts.tasks.lookup(rec.get("task_id"), prompt) if opts.tasks is not None else None
        cats = _categorise(names, meta, where, problems)
        if cats is None:
            continue
        reward = rec["reward"]
        if reward is None or not np.isfinite(reward):
            problems.bad("bad value", f"{where}: field 'reward': {reward!r}; expected a finite number")
            continue
        success = rec.get("success")
        horizon = rec.get("horizon", meta["horizon"] if meta else None)
        n_tok = len(offsets)
        k = sum(e - s for _, s, e in reads)
        rows.append(dict(
            step=int(step), split=str(rec.get("split") or "train"), group_id=_group_hash(step, prompt),
            task_id=_task_id(rec, meta),
            domain=rec.get("domain", meta["domain"] if meta else None),
            horizon=None if horizon is None or (isinstance(horizon, float) and np.isnan(horizon)) else int(horizon),
            response_tokens=n_tok, reward=float(reward),
            success=bool(reward >= opts.success_threshold) if success is None else bool(success),
            read_skills=names, read_categories=cats, read_tok_start=[r[1] for r in reads],
            read_tok_end=[r[2] for r in reads], sel_weight=min(1.0, k / n_tok),
        ))
        wheres.append(where)
        kept.append(i)
    return rows, wheres, kept


# ---------------------------------------------------------------------------- TRL

# Columns that are never rewards: TRL's own, and those SkillGateGRPOTrainer adds (the kit schema).
_TRL_META = {"step", "prompt", "completion", "advantage", "task_id", "horizon", "domain", "success", "split", "image",
             "response_tokens", "adv_exec", "sel_weight", "rollout"}


def trl_files(path: Path) -> list[Path]:
    base = path / "completions" if (path / "completions").is_dir() else path
    return sorted(base.glob("completions_*.parquet")) if base.is_dir() else [path]


def read_trl(path: str | Path, opts: ReaderOptions, problems: Problems) -> Iterator[pa.Table]:
    """TRL 1.x ``<output_dir>/completions/completions_<step>.parquet`` (or one such file)."""
    tok = make_tokenizer(opts.tokenizer)
    for file in trl_files(Path(path)):
        df = pq.read_table(file).to_pandas()
        missing = [c for c in ("step", "prompt", "completion") if c not in df.columns]
        rewards = list(opts.reward_columns or [c for c in df.columns if c not in _TRL_META
                                               and pd.api.types.is_numeric_dtype(df[c])])
        missing += [c for c in rewards if c not in df.columns] or ([] if rewards else ["<a reward function column>"])
        if missing:
            problems.bad("missing column", f"{file}: field {missing[0]!r}: missing column; TRL completions need "
                                           "step, prompt, completion and reward-function columns", n_rows=len(df))
            continue
        df["reward"] = df[rewards].astype(float).sum(axis=1, min_count=1)
        records = df.to_dict("records")
        where_of = [f"{file}: row {i}" for i in range(len(df))]
        rows, wheres, kept = _text_rows(records, where_of, df["step"].astype(int).tolist(), problems, opts, tok)
        logged = df["advantage"].to_numpy(float)[kept] if "advantage" in df.columns else None
        table = _finish(rows, wheres, problems, opts, logged, credit="outcome")
        if table is not None:
            yield table


# ---------------------------------------------------------------------------- JSONL helpers


def _jsonl_records(file: Path, problems: Problems) -> tuple[list[dict], list[str]]:
    records, where_of = [], []
    with file.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
                if not isinstance(rec, dict):
                    raise ValueError("not a JSON object")
            except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as err:
                problems.bad("corrupt line", f"{file}: line {lineno}: field '<line>': corrupt or truncated JSON ({err})")
                continue
            records.append(rec)
            where_of.append(f"{file}: line {lineno}")
    return records, where_of


def _require(rec: dict, where: str, fields: Sequence[str], problems: Problems, kind: str) -> bool:
    for f in fields:
        if f not in rec:
            problems.bad("missing column", f"{where}: field {f!r}: missing; {kind} lines need {', '.join(fields)}")
            return False
    return True


def _step_of_name(file: Path) -> int | None:
    digits = re.findall(r"\d+", file.stem)
    return int(digits[-1]) if digits else None


# ---------------------------------------------------------------------------- verl


def verl_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.jsonl"), key=lambda p: (_step_of_name(p) or 0, p.name)) if path.is_dir() else [path]


def read_verl(path: str | Path, opts: ReaderOptions, problems: Problems) -> Iterator[pa.Table]:
    """verl ``trainer.rollout_data_dir``: one JSONL per step, lines with ``input, output, score, step`` + extras."""
    tok = make_tokenizer(opts.tokenizer)
    for file in verl_files(Path(path)):
        recs, where_of = _jsonl_records(file, problems)
        good = [(r, w) for r, w in zip(recs, where_of) if _require(r, w, ("input", "output", "score", "step"), problems, "verl")]
        records = [{**r, "prompt": r["input"], "completion": r["output"], "reward": r["score"]} for r, _ in good]
        rows, wheres, kept = _text_rows(records, [w for _, w in good], [int(r["step"]) for r in records], problems, opts, tok)
        adv = [records[i].get("advantage") for i in kept]
        logged = np.array([np.nan if a is None else a for a in adv], float) if any(a is not None for a in adv) else None
        table = _finish(rows, wheres, problems, opts, logged, credit="outcome")
        if table is not None:
            yield table


# ---------------------------------------------------------------------------- NeMo-RL


def nemo_files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    return sorted(path.glob("train_data_step*.jsonl"), key=lambda p: _step_of_name(p) or 0)


def read_nemo(path: str | Path, opts: ReaderOptions, problems: Problems) -> Iterator[pa.Table]:
    """NeMo-RL ``train_data_step<N>.jsonl``: per-token ``advantages`` and ``token_loss_mask`` over the full
    sequence, ``token_ids``, ``rewards``, ``input_lengths``. The response starts at the first loss-bearing
    token; L = loss-bearing tokens; Share and Sign use the logged per-token advantages."""
    tok = make_tokenizer(opts.tokenizer)
    fields = ("token_ids", "token_loss_mask", "advantages", "rewards", "input_lengths")
    for file in nemo_files(Path(path)):
        step = _step_of_name(file) or 0
        recs, where_of = _jsonl_records(file, problems)
        rows, wheres = [], []
        for rec, where in zip(recs, where_of):
            if not _require(rec, where, fields, problems, "NeMo-RL"):
                continue
            n = int(rec["input_lengths"])
            ids = np.asarray(rec["token_ids"][:n], dtype=np.int64)
            mask = np.asarray(rec["token_loss_mask"][:n], dtype=float)
            adv = np.asarray(rec["advantages"][:n], dtype=float)
            if not (len(ids) == len(mask) == len(adv) == n) or not mask.any():
                bad = "token_loss_mask" if not mask.any() else "advantages"
                problems.bad("bad value", f"{where}: field {bad!r}: expected {n} entries (input_lengths) with at least "
                                          f"one loss-bearing token, got ids {len(ids)}, mask {len(mask)}, advantages {len(adv)}")
                continue
            start = int(np.argmax(mask > 0))
            prompt_ids, resp_ids = ids[:start], ids[start:]
            text, offsets = tok.decode_offsets(resp_ids.tolist())
            prompt = tok.decode_offsets(prompt_ids.tolist())[0] if len(prompt_ids) else ""
            reads = find_reads(text, offsets, opts.read_patterns)
            meta = opts.tasks.lookup(rec.get("task_id"), prompt) if opts.tasks is not None else None
            cats = _categorise([r[0] for r in reads], meta, where, problems)
            if cats is None:
                continue
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
            reward = float(np.sum(rec["rewards"])) if isinstance(rec["rewards"], list) else float(rec["rewards"])
            horizon = rec.get("horizon", meta["horizon"] if meta else None)
            rows.append(dict(
                step=step, split="train", group_id=_group_hash(step, " ".join(map(str, prompt_ids.tolist()))),
            task_id=_task_id(rec, meta),
                domain=rec.get("domain", meta["domain"] if meta else None),
                horizon=None if horizon is None else int(horizon), response_tokens=int((m > 0).sum()),
                reward=reward, success=bool(rec.get("success", reward >= opts.success_threshold)),
                read_skills=[r[0] for r in reads], read_categories=cats, read_tok_start=[r[1] for r in reads],
                read_tok_end=[r[2] for r in reads], read_adv=read_adv,
                sel_weight=float(w[sel].sum() / w.sum()),
                _exec=float(a[exec_tok].mean()) if exec_tok.any() else 0.0,
            ))
            wheres.append(where)
        if not rows:
            continue
        logged = np.array([r.pop("_exec") for r in rows])
        table = _finish(rows, wheres, problems, opts, logged, credit="logged")
        if table is not None:
            yield table

"""What every external reader shares: read actions from text, categories from task metadata, group advantages."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from skillgate_lib.logs import TRAJECTORY_SCHEMA, ArtifactError, with_optional_columns
from skillgate_lib.readers import fields
from skillgate_lib.readers.fields import BadValue
from skillgate_lib.readers.problems import Problems
from skillgate_lib.readers.tasks import EXPECTED, TaskTable
from skillgate_lib.readers.tokenizers import Tokenizer

#: Read-action patterns; each has a ``name`` group whose characters are the selector span.
DEFAULT_READ_PATTERNS = (
    r"<read>\s*(?P<name>[^<>]+?)\s*</read>",  # a name of one or more words (the kit writes words)
    r"~/\.claude/skills/(?P<name>[^/\s]+)/SKILL\.md",
)


@dataclass(frozen=True)
class ReaderOptions:
    """How external logs are interpreted (every field has a CLI flag in ``audit``)."""

    tokenizer: Any = None
    """``None``/``"whitespace"`` or a Hugging Face tokenizer name, path or object."""
    read_patterns: tuple[str, ...] = DEFAULT_READ_PATTERNS
    """regexes with a ``name`` group; each match is one read action."""
    tasks: TaskTable | None = None
    """slate categories per task; without them reads are found but not categorised (Share only, no Sign or Value)."""
    reward_columns: tuple[str, ...] | None = None
    """TRL reward-function columns summed into the reward (default: every numeric non-metadata column)."""
    success_threshold: float = 1.0
    """``success = reward >= threshold`` when the log has no ``success`` column."""
    std_ddof: int = 1
    """ddof of the group std when recomputing advantages (TRL and verl use torch's unbiased std)."""
    std_eps: float = 1e-4
    """added to the group std (TRL: 1e-4; verl: 1e-6)."""
    skip_bad: bool = False
    rescorer: Any = None
    """``rescorer(prompt, response text) -> g`` per response token in ``tokenizer``'s tokens
    (:class:`skillgate_lib.audit.rescore.Rescorer`): text rows gain ``grad_weight_sel`` / ``grad_weight_all``."""

    def __post_init__(self) -> None:
        for pat in self.read_patterns:
            try:
                groups = re.compile(pat).groupindex
            except re.error as err:
                raise ArtifactError(f"--read-pattern {pat!r}: not a regular expression ({err}); "
                                    "expected one with a (?P<name>...) group") from None
            if "name" not in groups:
                raise ArtifactError(f"--read-pattern {pat!r}: no (?P<name>...) group; expected one around the skill name")


class UnknownSkill(ValueError):
    """A read names a skill outside its task's slate, or the task has no metadata."""


def group_advantages(rewards: np.ndarray, groups: np.ndarray, ddof: int = 1, eps: float = 1e-4) -> np.ndarray:
    """GRPO broadcast advantage ``(r - mean_g r) / (std_g r + eps)`` per rollout; shapes ``(n,)``."""
    codes, inv = np.unique(groups, return_inverse=True)
    n = np.bincount(inv).astype(float)
    mean = np.bincount(inv, rewards) / n
    dev = rewards - mean[inv]
    var = np.bincount(inv, dev**2) / np.maximum(n - ddof, 1)
    return dev / (np.sqrt(var)[inv] + eps)


def prompt_key(prompt: Any, name: str = "prompt") -> str:
    """A prompt as a group key: its text, or a canonical JSON of a message list."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, np.ndarray):
        prompt = prompt.tolist()
    if isinstance(prompt, (list, dict)):
        return json.dumps(prompt, sort_keys=True, default=str)
    raise BadValue(f"field {name!r}: {fields.short(prompt)}; expected a string or a message list")


def text_of(completion: Any, name: str = "completion") -> str:
    """A completion as text: a string, or the concatenated ``content`` of a message list."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, np.ndarray):
        completion = completion.tolist()
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in completion)
    raise BadValue(f"field {name!r}: {fields.short(completion)}; expected a string or a message list")


def group_hash(step: int, prompt: str) -> str:
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


def categorise(names: list[str], meta: dict | None, tasks: TaskTable | None) -> list[str] | None:
    """Each read's category from the task's slate; ``None`` (not categorised) when there is no metadata at all."""
    if tasks is None:
        return None
    if not names:
        return []
    if meta is None:
        raise UnknownSkill(f"field 'read_skills': no task in {tasks.source} matches this row's task_id or prompt; "
                           f"expected one ({EXPECTED})")
    from skillgate_lib.env.names import skill_name  # here: the env package loads the tokenizer (transformers)

    keys = [n if n in meta["skills"] else skill_name(n) for n in names]  # "a b c" names slate skill "a-b-c"
    unknown = [n for n, k in zip(names, keys) if k not in meta["skills"]]
    if unknown:
        raise UnknownSkill(f"field 'read_skills': unknown skill {unknown[0]!r}; "
                           f"expected one of the task's slate ({len(meta['skills'])} skills)")
    return [meta["skills"][k] for k in keys]


def meta_field(rec: Mapping[str, Any], meta: dict | None, name: str, get: Callable) -> Any:
    """A row's own ``name`` if logged, else the task metadata's."""
    own = get(rec, name)
    return own if own is not None or meta is None else meta[name]


def rows_of(records: Sequence[dict], where_of: Sequence[str], problems: Problems,
            build: Callable[[dict], dict]) -> tuple[list[dict], list[str]]:
    """``build`` each record into a kit row; a record it rejects is reported with its file and line/row."""
    rows, wheres = [], []
    for rec, where in zip(records, where_of):
        try:
            row = build(rec)
        except BadValue as err:
            problems.bad("bad value", f"{where}: {err}")
            continue
        except UnknownSkill as err:
            problems.bad("unknown skill", f"{where}: {err}")
            continue
        rows.append(row)
        wheres.append(where)
    return rows, wheres


def text_row(rec: dict, opts: ReaderOptions, tok: Tokenizer, prompt: str = "prompt", completion: str = "completion",
             reward: str = "reward") -> dict:
    """One kit row from a text log record (TRL, verl); the keyword arguments name the record's fields.

    Optional fields: ``advantage`` (kept as ``_adv`` for :func:`finish`), ``success``,
    ``task_id``, ``horizon``, ``domain``, ``split``.
    """
    step = fields.integer(rec, "step", minimum=0)
    text = text_of(rec.get(completion), completion)
    key = prompt_key(rec.get(prompt), prompt)
    offsets = tok.offsets(text)
    if len(offsets) == 0:
        raise BadValue(f"field {completion!r}: empty (0 tokens); expected the model's response")
    r = fields.number(rec, reward)
    task_id = fields.optional_text(rec, "task_id")
    meta = opts.tasks.lookup(task_id, key) if opts.tasks is not None else None
    reads = find_reads(text, offsets, opts.read_patterns)
    names = [name for name, _, _ in reads]
    cats = categorise(names, meta, opts.tasks)
    success = fields.optional_flag(rec, "success")
    n_tok = len(offsets)
    k = sum(e - s for _, s, e in reads)
    weights = {}
    if opts.rescorer is not None:
        g = np.asarray(opts.rescorer(rec.get(prompt), text), dtype=float)
        if len(g) != n_tok:
            raise BadValue(f"field {completion!r}: the rescoring model's tokenizer gives {len(g)} tokens, the audit's "
                           f"{n_tok}; pass the model's tokenizer (--tokenizer) or leave --tokenizer out")
        weights = dict(grad_weight_sel=float(sum(g[s:e].sum() for _, s, e in reads)), grad_weight_all=float(g.sum()),
                       _g=g)
    return dict(
        step=step, split=fields.optional_text(rec, "split") or "train", group_id=group_hash(step, key),
        task_id=meta_field(rec, meta, "task_id", fields.optional_text),
        domain=meta_field(rec, meta, "domain", fields.optional_text),
        horizon=meta_field(rec, meta, "horizon", fields.optional_integer),
        response_tokens=n_tok, reward=r, success=r >= opts.success_threshold if success is None else success,
        read_skills=names, read_categories=cats, read_tok_start=[s for _, s, _ in reads],
        read_tok_end=[e for _, _, e in reads], sel_weight=min(1.0, k / n_tok),
        _adv=np.nan if (adv := fields.optional_number(rec, "advantage")) is None else adv, **weights,
    )


def finish(rows: list[dict], where_of: list[str], problems: Problems, opts: ReaderOptions, credit: str) -> pa.Table | None:
    """Group, recompute/check broadcast advantages, drop size-1 groups; rows -> Arrow table.

    Each row's ``_adv`` is the logged execution advantage (NaN where none was logged);
    a logged one is used as logged and checked against the recomputation.
    """
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
    logged = df.pop("_adv").to_numpy(float)
    ok = ~np.isnan(logged)
    problems.check_advantages(logged[ok], recomputed[ok])
    adv = np.where(ok, logged, recomputed)
    df["adv_exec"] = adv
    if "read_adv" not in df.columns:
        df["read_adv"] = [[float(a)] * len(r) for a, r in zip(adv, df["read_skills"])]
    df["rollout"] = df.groupby("group_id").cumcount()
    df["credit"] = credit
    df = with_optional_columns(df)
    return pa.Table.from_pandas(df[list(TRAJECTORY_SCHEMA.names)], schema=TRAJECTORY_SCHEMA, preserve_index=False)

"""The run-artifact contract: what every training run writes and every audit reads.

A run directory holds

* ``config.json``      every setting, the seed and package versions (written once, atomically);
* ``metrics.jsonl``    one JSON object per line, appended as the run goes (train and eval);
* ``trajectories/``    Parquet parts, one per logged (step, split), each written atomically;
                       together they form the *trajectory table* below;
* ``samples.jsonl``    (kit runs) one whole prompt group per logged step, token by token
                       (token strings, policy mask, read spans, rewards), so a figure can
                       recompute any credit assigner on a real group.

The trajectory table has one row per rollout. Every reader in the kit (this kit's
runs, TRL, verl, NeMo-RL, a plain table) produces exactly these columns, so one
audit serves all sources. Token indices are positions in the *response* token
sequence (everything after the prompt, tool/environment text included); loss is
carried only by policy tokens, of which there are ``response_tokens``.

Column                type            meaning
--------------------  --------------  -------------------------------------------------------------
``step``              int64           training step the rollout was generated at
``split``             string          ``"train"`` or ``"eval"``
``group_id``          string          prompt group: rollouts of one prompt share it
``rollout``           int64           index of the rollout within its group
``task_id``           string          task instance id (join key for task metadata)
``domain``            string          task domain
``horizon``           int64           execution steps H of the task (null when unknown)
``response_tokens``   int64           policy (loss-bearing) tokens in the response, L
``reward``            float64         scalar outcome reward
``success``           bool            verifier verdict
``read_skills``       list<string>    skills named by the read actions, in order
``read_categories``   list<string>    ``oracle`` / ``misleading`` / ``relevant`` / ``irrelevant`` / ``invalid``
``read_tok_start``    list<int64>     first token of each read's skill name (inclusive)
``read_tok_end``      list<int64>     end of each read's skill name (exclusive)
``adv_exec``          float64         advantage applied to the execution tokens (the broadcast value
                                      under outcome credit)
``read_adv``          list<float64>   advantage applied to each read's skill-name tokens
``sel_weight``        float64         fraction of this trajectory's total loss weight carried by its
                                      skill-name tokens under the update actually applied (Share)
``credit``            string          credit assigner that produced the advantages
``grad_weight_sel``   float64, null   gradient weight of the skill-name tokens: the sum over the reads' name
                                      tokens of ``g = |d(-log p(y)) / d logits|``, the norm of the gradient
                                      of the token's loss with respect to its logits, ``sqrt((1 - p_y)^2 +
                                      sum_{j != y} p_j^2)`` at temperature 1 (kit runs, from the sampling
                                      logits; null where the log does not hold it)
``grad_weight_all``   float64, null   the same sum over every policy token (names included); Gradient Share
                                      = ``grad_weight_sel / grad_weight_all``

The two ``grad_weight`` columns are optional (:data:`OPTIONAL_COLUMNS`): older runs and external logs
lack them, and the audit then reports the loss-weight Share alone and says how to get the other
(``audit --rescore``).
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Mapping

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

CATEGORIES = ("oracle", "misleading", "relevant", "irrelevant", "invalid")

TRAJECTORY_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("split", pa.string()),
        ("group_id", pa.string()),
        ("rollout", pa.int64()),
        ("task_id", pa.string()),
        ("domain", pa.string()),
        ("horizon", pa.int64()),
        ("response_tokens", pa.int64()),
        ("reward", pa.float64()),
        ("success", pa.bool_()),
        ("read_skills", pa.list_(pa.string())),
        ("read_categories", pa.list_(pa.string())),
        ("read_tok_start", pa.list_(pa.int64())),
        ("read_tok_end", pa.list_(pa.int64())),
        ("adv_exec", pa.float64()),
        ("read_adv", pa.list_(pa.float64())),
        ("sel_weight", pa.float64()),
        ("credit", pa.string()),
        ("grad_weight_sel", pa.float64()),
        ("grad_weight_all", pa.float64()),
    ]
)
#: Columns a log may lack (null when read): the gradient weights, which need the sampling logits.
OPTIONAL_COLUMNS = ("grad_weight_sel", "grad_weight_all")
#: Columns every trajectory table holds.
COLUMNS = tuple(n for n in TRAJECTORY_SCHEMA.names if n not in OPTIONAL_COLUMNS)
_LIST_COLUMNS = ("read_skills", "read_categories", "read_tok_start", "read_tok_end", "read_adv")
_PACKAGES = ("skillgate-lib", "torch", "transformers", "peft", "trl", "numpy", "pandas", "pyarrow")


class ArtifactError(ValueError):
    """A run artifact breaks the contract; the message names the file, row and field."""


def package_versions() -> dict[str, str | None]:
    """Versions of the packages a result depends on (``None`` when not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write(fh)`` on a temporary file beside ``path``, fsync it, then rename it over ``path``.

    A process killed mid-write leaves the previous ``path`` intact (and a ``.*.tmp`` file
    that :meth:`RunWriter.remove_partial_writes` clears on resume).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, payload: bytes) -> None:
    _atomic_write(path, lambda fh: fh.write(payload))


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` written atomically (see :func:`_atomic_write`): checkpoints survive a kill mid-write."""
    import torch

    _atomic_write(path, lambda fh: torch.save(obj, fh))


def truncate_jsonl(path: str | Path, after_step: int) -> None:
    """Keep the lines of a JSON-lines log with ``step <= after_step`` (used when resuming).

    A last line without its newline is one a kill cut mid-write: lines are logged before
    the checkpoint of their step, so it belongs to a step after the checkpoint and is
    dropped. Any other unreadable line is an error naming it, and the log is left as it is.
    """
    path = Path(path)
    if not path.exists():
        return
    text = path.read_text()
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines.pop()
    kept = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            step = json.loads(line)["step"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ArtifactError(f"{path}: line {lineno}: not a JSON object with a 'step'; "
                                "the log is damaged, so the run is not resumed") from None
        if step <= after_step:
            kept.append(line)
    atomic_write_bytes(path, "".join(ln + "\n" for ln in kept).encode())


def validate_trajectories(df: pd.DataFrame, source: str = "<table>") -> None:
    """Raise :class:`ArtifactError` naming ``source``, the row and the field for the first violation."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ArtifactError(f"{source}: missing column(s) {', '.join(missing)}")
    if df.empty:
        raise ArtifactError(f"{source}: the trajectory table is empty")
    n_reads = df["read_skills"].map(len)
    for col in _LIST_COLUMNS[1:]:
        bad = df.index[df[col].map(len) != n_reads]
        if len(bad):
            raise ArtifactError(
                f"{source}: row {bad[0]}: field {col!r} has {len(df.at[bad[0], col])} entries, "
                f"expected one per read ({n_reads[bad[0]]})"
            )
    for i, cats in df["read_categories"].items():
        for c in cats:
            if c not in CATEGORIES:
                raise ArtifactError(f"{source}: row {i}: field 'read_categories' has {c!r}; expected one of {CATEGORIES}")
    for i, (start, end) in enumerate(zip(df["read_tok_start"], df["read_tok_end"])):
        for s, e in zip(start, end):
            if not 0 <= s < e:
                raise ArtifactError(f"{source}: row {df.index[i]}: field 'read_tok_start/read_tok_end' span [{s}, {e}) is empty or negative")
    if (df["response_tokens"] < 1).any():
        i = df.index[df["response_tokens"] < 1][0]
        raise ArtifactError(f"{source}: row {i}: field 'response_tokens' must be >= 1")
    w = df["sel_weight"]
    if ((w < 0) | (w > 1) | w.isna()).any():
        i = df.index[(w < 0) | (w > 1) | w.isna()][0]
        raise ArtifactError(f"{source}: row {i}: field 'sel_weight' must lie in [0, 1], got {w[i]}")
    if all(c in df.columns for c in OPTIONAL_COLUMNS):
        sel, tot = df["grad_weight_sel"], df["grad_weight_all"]
        bad = (sel < 0) | (tot < 0) | (sel > tot * (1 + 1e-9) + 1e-9) | (sel.isna() != tot.isna())
        if bad.any():
            i = df.index[bad][0]
            raise ArtifactError(f"{source}: row {i}: fields 'grad_weight_sel' / 'grad_weight_all' must be both null or "
                                f"0 <= sel <= all, got {sel[i]} / {tot[i]}")


def to_arrow(records: pd.DataFrame | Iterable[Mapping[str, Any]]) -> pa.Table:
    """Rows (a DataFrame or dicts) as an Arrow table in :data:`TRAJECTORY_SCHEMA` column order."""
    df = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    return pa.Table.from_pandas(with_optional_columns(df)[list(TRAJECTORY_SCHEMA.names)], schema=TRAJECTORY_SCHEMA,
                                preserve_index=False)


def with_optional_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every :data:`OPTIONAL_COLUMNS` column it lacks added as nulls (a copy when one is added)."""
    missing = [c for c in OPTIONAL_COLUMNS if c not in df.columns]
    return df.assign(**{c: pd.Series([None] * len(df), index=df.index, dtype="float64") for c in missing}) if missing else df


class RunWriter:
    """Writes one run directory in the contract above; safe to reopen for ``--resume``.

    ``config.json`` and each trajectory part are written atomically (temp file +
    rename), so a run killed mid-write never leaves a half file behind; parts carry
    Parquet page checksums, so a part corrupted later (disk, copy) is detected, not read. Metrics are
    appended line by line; :meth:`truncate_metrics` drops lines past a resumed step
    so a resumed run's log equals an uninterrupted one.
    """

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "trajectories").mkdir(exist_ok=True)

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / "metrics.jsonl"

    @property
    def samples_path(self) -> Path:
        return self.run_dir / "samples.jsonl"

    def write_config(self, config: Mapping[str, Any]) -> Path:
        payload = {**config, "versions": package_versions()}
        path = self.run_dir / "config.json"
        atomic_write_bytes(path, (json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n").encode())
        return path

    def log_metrics(self, row: Mapping[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        with self.metrics_path.open("a") as fh:
            fh.write(json.dumps(clean, sort_keys=True, default=float) + "\n")
            fh.flush()

    def log_sample(self, row: Mapping[str, Any]) -> None:
        """Append one token-level group sample (a JSON object with a ``step``) to ``samples.jsonl``."""
        with self.samples_path.open("a") as fh:
            fh.write(json.dumps(row, default=float) + "\n")

    def remove_partial_writes(self) -> list[Path]:
        """Delete the temporary files a killed run left behind (``.*.tmp``); returns them."""
        stray = [*self.run_dir.glob(".*.tmp"), *(self.run_dir / "trajectories").glob(".*.tmp")]
        for path in stray:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        return stray

    def truncate_metrics(self, after_step: int) -> None:
        """Keep only metrics and sample lines (and trajectory parts) with ``step <= after_step``."""
        for path in (self.metrics_path, self.samples_path):
            truncate_jsonl(path, after_step)
        for part in (self.run_dir / "trajectories").glob("step-*.parquet"):
            if int(part.stem.split("-")[1]) > after_step:
                part.unlink()

    def write_trajectories(self, records: pd.DataFrame | Iterable[Mapping[str, Any]], step: int, split: str) -> Path:
        table = to_arrow(records)
        validate_trajectories(table.to_pandas(), source=f"{self.run_dir} step {step} {split}")
        sink = pa.BufferOutputStream()
        # Page checksums let a reader tell a flipped byte from a value (the audit verifies them).
        pq.write_table(table, sink, compression="zstd", write_page_checksum=True)
        path = self.run_dir / "trajectories" / f"step-{step:06d}-{split}.parquet"
        atomic_write_bytes(path, sink.getvalue().to_pybytes())
        return path


def read_config(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "config.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{path}: not found; is {run_dir} a run directory?") from None
    except json.JSONDecodeError as err:
        raise ArtifactError(f"{path}: line {err.lineno}: not valid JSON ({err.msg})") from None


def read_metrics(run_dir: str | Path) -> pd.DataFrame:
    """``metrics.jsonl`` as a DataFrame; a corrupt line is an error naming its number."""
    path = Path(run_dir) / "metrics.jsonl"
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ArtifactError(f"{path}: line {lineno}: not valid JSON ({err.msg})") from None
    return pd.DataFrame(rows)


def read_run(run_dir: str | Path, split: str | None = None) -> pd.DataFrame:
    """A kit run's trajectory table (all parts, or one split), validated."""
    parts = sorted((Path(run_dir) / "trajectories").glob("step-*.parquet"))
    if split is not None:
        parts = [p for p in parts if p.stem.endswith(f"-{split}")]
    if not parts:
        raise ArtifactError(f"{run_dir}: no trajectory parts{f' for split {split!r}' if split else ''} under trajectories/")
    df = pa.concat_tables([pq.read_table(p, schema=TRAJECTORY_SCHEMA) for p in parts]).to_pandas()
    for col in _LIST_COLUMNS:
        df[col] = df[col].map(list)
    validate_trajectories(df, source=str(run_dir))
    return df


def read_samples(run_dir: str | Path) -> list[dict[str, Any]]:
    """The token-level group samples of a kit run (``samples.jsonl``)."""
    path = Path(run_dir) / "samples.jsonl"
    out = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ArtifactError(f"{path}: line {lineno}: not valid JSON ({err.msg})") from None
    return out

"""Task metadata (``--tasks META``): the slate's skill categories, domain and horizon per task.

Accepted files:

* JSONL/JSON (a list of objects): one object per task: ``task_id`` and/or ``prompt``
  (join keys: a log row's ``task_id`` column if it has one, else its prompt text),
  ``oracle`` (the oracle skill's name), ``skills`` (``{name: category}`` for the rest of
  the slate), optional ``domain`` and ``horizon``;
* CSV/Parquet: long format, one row per (task, skill): ``task_id`` and/or ``prompt``,
  ``skill``, ``category``, optional ``domain``, ``horizon``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from skillgate_lib.logs import CATEGORIES, ArtifactError

#: One line for messages that ask for task metadata.
EXPECTED = ("JSONL/JSON objects with task_id and/or prompt, oracle, skills {name: category}; "
            "or CSV/Parquet rows with task_id and/or prompt, skill, category")


class TaskTable:
    """Slate categories, domain and horizon per task, keyed by ``task_id`` and/or prompt text."""

    def __init__(self, rows: Sequence[dict], source: str = "<tasks>"):
        self.source = source
        self.by_key: dict[str, dict] = {}
        for i, row in enumerate(rows):
            where = f"{source}: row {i}"
            if not isinstance(row, dict):
                raise ArtifactError(f"{where}: {type(row).__name__} where a task object was expected ({EXPECTED})")
            keys = [str(row[k]) for k in ("task_id", "prompt") if row.get(k) is not None]
            if not keys:
                raise ArtifactError(f"{where}: field 'task_id'/'prompt' missing; every task needs a join key")
            if not isinstance(row.get("skills") or {}, dict):
                raise ArtifactError(f"{where}: field 'skills': {type(row['skills']).__name__}; expected {{name: category}}")
            skills = {str(k): str(v) for k, v in (row.get("skills") or {}).items()}
            if row.get("oracle"):
                skills[str(row["oracle"])] = "oracle"
            for name, cat in skills.items():
                if cat not in CATEGORIES:
                    raise ArtifactError(f"{where}: field 'skills' gives {name!r} category {cat!r}; "
                                        f"expected one of {CATEGORIES}")
            horizon = row.get("horizon")
            if horizon is not None and not (isinstance(horizon, (int, np.integer)) and not isinstance(horizon, bool)):
                raise ArtifactError(f"{where}: field 'horizon': {horizon!r}; expected an integer")
            for key in keys:
                entry = self.by_key.setdefault(key, {"skills": {}, "task_id": None, "domain": None, "horizon": None})
                entry["skills"].update(skills)
                for name in ("task_id", "domain", "horizon"):
                    if row.get(name) is not None:
                        entry[name] = str(row[name]) if name != "horizon" else int(row[name])

    @classmethod
    def load(cls, path: str | Path) -> TaskTable:
        path = Path(path)
        if not path.is_file():
            raise ArtifactError(f"{path}: task metadata not found ({EXPECTED})")
        if path.suffix in {".csv", ".parquet"}:
            return cls(_long_rows(path), str(path))
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            raise ArtifactError(f"{path}: not UTF-8 text; expected {EXPECTED}") from None
        if path.suffix == ".json":
            try:
                rows = json.loads(text)
            except json.JSONDecodeError as err:
                raise ArtifactError(f"{path}: line {err.lineno}: not valid JSON ({err.msg})") from None
            if not isinstance(rows, list):
                raise ArtifactError(f"{path}: a JSON {type(rows).__name__}; expected a list of task objects")
            return cls(rows, str(path))
        rows = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except (json.JSONDecodeError, RecursionError) as err:
                    raise ArtifactError(f"{path}: line {lineno}: not valid JSON ({getattr(err, 'msg', err)})") from None
        return cls(rows, str(path))

    def lookup(self, task_id: Any, prompt: str) -> dict | None:
        if task_id is not None and str(task_id) in self.by_key:
            return self.by_key[str(task_id)]
        return self.by_key.get(prompt)


def _long_rows(path: Path) -> list[dict]:
    """CSV/Parquet long format -> one task object per row."""
    try:
        df = pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
    except (ValueError, OSError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ArtifactError(f"{path}: cannot be read as {path.suffix[1:].upper()} ({str(err).splitlines()[0]})") from None
    missing = [c for c in ("skill", "category") if c not in df.columns]
    if missing or not {"task_id", "prompt"} & set(df.columns):
        raise ArtifactError(f"{path}: missing column(s) {missing or ['task_id or prompt']}; "
                            "long format needs task_id and/or prompt, skill, category")
    rows = []
    for r in df.to_dict("records"):
        row = {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
        if isinstance(row.get("horizon"), float) and row["horizon"].is_integer():
            row["horizon"] = int(row["horizon"])  # a CSV column with gaps reads as float
        row["skills"] = {row.pop("skill"): row.pop("category")}
        rows.append(row)
    return rows

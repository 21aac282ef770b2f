"""Which log format a path holds: ``kit``, ``trl``, ``verl``, ``nemo`` or ``table``."""

from __future__ import annotations

import json
from pathlib import Path

from skillgate_lib.logs import ArtifactError
from skillgate_lib.readers import files

_SCAN_LINES = 1000
_HINT = "pass --format kit|trl|verl|nemo|table"


def detect_format(path: Path) -> str:
    """The log format of ``path`` (a file or directory); raises when nothing matches."""
    path = Path(path)
    if path.is_dir():
        if (path / "trajectories").is_dir():
            return "kit"
        if any(path.glob("completions/completions_*.parquet")) or any(path.glob("completions_*.parquet")):
            return "trl"
        if any(path.glob("train_data_step*.jsonl")):
            return "nemo"
        jsonl = sorted(path.glob("*.jsonl"))
        if jsonl:
            # A stray JSONL file beside verl's step files must not turn the directory into a "table".
            kinds = {_jsonl_kind(f) for f in jsonl}
            for kind in ("verl", "nemo", "table"):
                if kind in kinds:
                    return kind
            raise ArtifactError(f"{path}: no JSON object in the first {_SCAN_LINES} lines of any *.jsonl file; "
                                f"cannot detect the log format ({_HINT})")
        if any(path.glob("*.parquet")):
            return "table"
        raise ArtifactError(f"{path}: no log found (expected trajectories/*.parquet, completions/completions_*.parquet, "
                            "train_data_step*.jsonl, verl *.jsonl or a table)")
    if not path.exists():
        raise ArtifactError(f"{path}: not found")
    if path.name.startswith("completions_") and path.suffix == ".parquet":
        return "trl"
    if path.name.startswith("train_data_step"):
        return "nemo"
    if path.suffix == ".jsonl":
        kind = _jsonl_kind(path)
        if kind is None:
            raise ArtifactError(f"{path}: no JSON object in its first {_SCAN_LINES} lines; cannot detect the log "
                                f"format ({_HINT})")
        return kind
    return "table"


def _jsonl_kind(file: Path) -> str | None:
    """The format of the first JSON object among ``file``'s first lines (corrupt lines passed over), or ``None``."""
    try:
        fh = file.open("rb")
    except OSError as err:
        raise ArtifactError(f"{file}: cannot be opened ({err.strerror})") from None
    with fh:
        for _ in range(_SCAN_LINES):
            raw = fh.readline(files.MAX_LINE_BYTES + 1)
            if not raw:
                break
            if len(raw) > files.MAX_LINE_BYTES:
                return None  # not line-structured text; the reader names the file
            try:
                rec = json.loads(raw.decode("utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                continue
            if isinstance(rec, dict):
                if {"input", "output", "score"} <= rec.keys():
                    return "verl"
                return "nemo" if "token_loss_mask" in rec else "table"
    return None

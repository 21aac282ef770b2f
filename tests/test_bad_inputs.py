"""Bad and partial inputs in every log format: each ends in an error naming the file, or a counted skip.

A seeded fuzz over the six inputs the audit reads (a kit run's Parquet parts, plain
Parquet and JSONL tables, TRL, verl and NeMo-RL logs), each a clean log of two step
files of which one is damaged: truncated at random offsets, bytes flipped, overwritten
with noise or NUL bytes, a column of the wrong type, a missing column, a line that is
not a JSON object, a line past the length limit, an empty file, a stray file. Each case
is loaded strictly, then with ``skip_bad``, and classified:

* ``skip``      strict: an ArtifactError naming the file (and line); skip_bad: counted by reason,
                every row of the untouched file kept;
* ``error``     both modes stop with an ArtifactError naming the file (nothing to skip to);
* ``harmless``  both modes load exactly the clean rows (the damage hit bytes nothing reads);
* ``changed``   the rows load but differ: corruption no check can see (a flipped digit in JSON,
                a line-aligned truncation). Allowed only where the format has no checksum,
                never for the kit's own parts, which carry Parquet page checksums.

Loading is the audit's own path up to its DuckDB engine (the readers, the Parquet checks,
a DuckDB scan of every file the checks pass); cases in kit and plain-table formats that
load are re-run through :func:`skillgate_lib.audit.open_log`, whose row validation they need.
Anything else (a traceback) fails the test.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_audit import hand_log
from test_readers import ROLLOUTS, TASKS, _ids, word_tokenizer

from skillgate_lib import audit, logs, readers
from skillgate_lib.logs import ArtifactError

#: Columns an audit measure depends on (domain, task_id, rollout and credit do not enter any).
MEASURED = ["step", "split", "group_id", "horizon", "response_tokens", "reward", "success", "read_skills",
            "read_categories", "read_tok_start", "read_tok_end", "adv_exec", "read_adv", "sel_weight"]
LINE_LIMIT = 1 << 14  # MAX_LINE_BYTES during the fuzz, so a "huge line" stays cheap to write
_CON = duckdb.connect(config={"threads": 1})


# ---------------------------------------------------------------------------- the six clean logs


def build_kit(root: Path) -> None:
    for step in (0, 1):
        logs.RunWriter(root).write_trajectories(hand_log().assign(step=step), step=step, split="train")


def build_table(root: Path) -> None:
    root.mkdir(parents=True)
    for step in (0, 1):
        pq.write_table(logs.to_arrow(hand_log().assign(step=step)), root / f"part-{step}.parquet")


def build_jsonl(root: Path) -> None:
    root.mkdir(parents=True)
    for step in (0, 1):
        rows = hand_log().assign(step=step).to_dict("records")
        (root / f"part-{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def build_trl(root: Path) -> None:
    (root / "completions").mkdir(parents=True)
    for step in (5, 6):
        df = pd.DataFrame({"step": step, "prompt": [r[0] for r in ROLLOUTS], "completion": [r[1] for r in ROLLOUTS],
                           "correctness": [r[2] for r in ROLLOUTS]})
        df.to_parquet(root / "completions" / f"completions_{step:05d}.parquet")


def build_verl(root: Path) -> None:
    root.mkdir(parents=True)
    for step in (5, 6):
        lines = [json.dumps({"input": r[0], "output": r[1], "score": r[2], "step": step}) for r in ROLLOUTS]
        (root / f"{step}.jsonl").write_text("\n".join(lines) + "\n")


def build_nemo(root: Path) -> None:
    root.mkdir(parents=True)
    for step in (3, 4):
        lines = []
        for resp, reward in (("<read> oracle-a </read> ENV step done", 1.0), ("<read> mis-a </read> ENV step", 0.0),
                             ("step done", 0.0)):
            ids = _ids("task one") + _ids(resp)
            mask = [0, 0] + [0 if w == "ENV" else 1 for w in resp.split()]
            adv = [0.0, 0.0] + [0.5 if reward else -0.25] * len(resp.split())
            lines.append(json.dumps({"token_ids": ids, "token_loss_mask": mask, "advantages": adv, "rewards": reward,
                                     "input_lengths": len(ids), "task_id": "t1", "horizon": 2}))
        (root / f"train_data_step{step}.jsonl").write_text("\n".join(lines) + "\n")


@dataclass(frozen=True)
class Spec:
    fmt: str
    build: Callable[[Path], None]
    target: str
    """the file that gets damaged (relative to the log's root)."""
    other: str
    """the step file left untouched."""
    stray: str
    """where a stray file goes: a name the format's file pattern matches."""
    kind: str
    """``parquet`` or ``jsonl``."""
    engine_checked: bool = False
    """whether the audit's DuckDB engine validates rows (kit and plain tables) rather than the reader."""


SPECS = {
    "kit": Spec("kit", build_kit, "trajectories/step-000001-train.parquet", "trajectories/step-000000-train.parquet",
                "trajectories/notes.parquet", "parquet", engine_checked=True),
    "table": Spec("table", build_table, "part-1.parquet", "part-0.parquet", "stats.parquet", "parquet", engine_checked=True),
    "jsonl": Spec("table", build_jsonl, "part-1.jsonl", "part-0.jsonl", "notes.jsonl", "jsonl", engine_checked=True),
    "trl": Spec("trl", build_trl, "completions/completions_00006.parquet", "completions/completions_00005.parquet",
                "completions/completions_notes.parquet", "parquet"),
    "verl": Spec("verl", build_verl, "6.jsonl", "5.jsonl", "notes.jsonl", "jsonl"),
    "nemo": Spec("nemo", build_nemo, "train_data_step4.jsonl", "train_data_step3.jsonl", "train_data_step_notes.jsonl",
                 "jsonl"),
}


# ---------------------------------------------------------------------------- damage


@dataclass(frozen=True)
class Case:
    name: str
    group: str
    """a key of :data:`ALLOWED` or one that must end in skip or error (truncate, noise, empty, stray, wrong type,
    missing column, wrong JSON, huge line)."""
    damage: Callable[[Path, Spec], Path]
    """damages the log under the root; returns the bad file."""
    line: int | None = None
    """the damaged line (1-based) when the damage is to one line."""


def _bytes_case(name: str, group: str, edit: Callable[[bytes], bytes]) -> Case:
    def damage(root: Path, spec: Spec) -> Path:
        f = root / spec.target
        f.write_bytes(edit(f.read_bytes()))
        return f
    return Case(name, group, damage)


def _byte_cases(seed: int) -> list[Case]:
    rng = np.random.default_rng(seed)
    cases = [_bytes_case("truncate at 0", "truncate", lambda b: b"")]
    for frac in rng.uniform(0.02, 0.98, 4):
        cases.append(_bytes_case(f"truncate at {frac:.0%}", "truncate", lambda b, f=frac: b[: int(len(b) * f)]))
    for n in (1, 1, 2, 2, 3, 3, 4, 8):
        def flip(b: bytes, n=n, flip_seed=int(rng.integers(2**32))) -> bytes:
            r = np.random.default_rng(flip_seed)
            a = bytearray(b)
            for i in r.choice(len(a), size=n, replace=False):
                a[i] ^= int(r.integers(1, 256))
            return bytes(a)
        cases.append(_bytes_case(f"flip {n} byte(s) #{len(cases)}", "flip", flip))
    noise_seed = int(rng.integers(2**32))
    cases.append(_bytes_case("random bytes", "noise",
                             lambda b: np.random.default_rng(noise_seed).bytes(len(b))))
    cases.append(_bytes_case("NUL bytes (crash region)", "noise", lambda b: bytes(len(b))))
    return cases


def _table_case(name: str, group: str, edit: Callable[[pa.Table], pa.Table]) -> Case:
    def damage(root: Path, spec: Spec) -> Path:
        f = root / spec.target
        table = edit(pq.read_table(f))
        pq.write_table(table, f, **({"compression": "zstd", "write_page_checksum": True} if spec.fmt == "kit" else {}))
        return f
    return Case(name, group, damage)


def _set(table: pa.Table, name: str, values: list | pa.Array) -> pa.Table:
    column = pa.array(values) if isinstance(values, list) else values
    return table.set_column(table.schema.get_field_index(name), name, column)


def _line_case(name: str, group: str, line: int, edit: Callable[[dict], dict | bytes]) -> Case:
    """Replace line ``line`` by ``edit(its object)`` (an object, or raw bytes for text that is not one)."""
    def damage(root: Path, spec: Spec) -> Path:
        f = root / spec.target
        lines = f.read_bytes().splitlines()
        new = edit(json.loads(lines[line - 1]))
        lines[line - 1] = new if isinstance(new, bytes) else json.dumps(new).encode()
        f.write_bytes(b"\n".join(lines) + b"\n")
        return f
    return Case(name, group, damage, line)


def _without(key: str) -> Callable[[dict], dict]:
    return lambda rec: {k: v for k, v in rec.items() if k != key}


def _with(key: str, value) -> Callable[[dict], dict]:
    return lambda rec: {**rec, key: value}


WRONG_JSON = [("a JSON list", b"[1, 2]"), ("a JSON string", b'"text"'), ("a JSON null", b"null"),
              ("an unclosed object", b'{"input": "Task'), ("two objects", b"{} {}"), ("invalid UTF-8", b'{"a": "\xff\xfe"}'),
              ("nesting 10k deep", b"[" * 10_000)]
JSONL_REQUIRED = {"jsonl": readers.REQUIRED, "verl": readers.verl.FIELDS, "nemo": readers.nemo.FIELDS}
JSONL_WRONG_TYPES = {
    "jsonl": [("reward", "high"), ("step", "five"), ("read_skills", "oracle-x"), ("response_tokens", 4.5),
              ("success", "yes"), ("read_tok_start", ["x"]), ("read_categories", [1]), ("group_id", 7), ("step", 2**70)],
    "verl": [("score", "high"), ("step", "five"), ("output", 42), ("input", None), ("success", "yes"),
             ("horizon", "long"), ("advantage", "x"), ("step", 2**70), ("score", 1e400)],
    "nemo": [("token_ids", "abc"), ("token_ids", [1, "x"]), ("advantages", ["x"] * 9), ("rewards", "one"),
             ("input_lengths", -3), ("input_lengths", 10**6), ("token_loss_mask", [2] * 9), ("token_ids", [10**9] * 9)],
}
PARQUET_REQUIRED = {"kit": logs.COLUMNS, "table": readers.REQUIRED,
                    "trl": ("step", "prompt", "completion", "correctness")}


def _parquet_wrong_types(fmt: str) -> list[tuple[str, Callable[[pa.Table], pa.Table]]]:
    if fmt == "trl":
        return [("step", lambda t: _set(t, "step", [str(v) for v in t["step"].to_pylist()])),
                ("completion", lambda t: _set(t, "completion", list(range(len(t))))),
                ("correctness", lambda t: _set(t, "correctness", [str(v) for v in t["correctness"].to_pylist()])),
                ("prompt", lambda t: _set(t, "prompt", list(range(len(t))))),
                ("advantage", lambda t: t.append_column("advantage", pa.array(["x"] * len(t))))]
    return [("reward", lambda t: _set(t, "reward", [str(v) for v in t["reward"].to_pylist()])),
            ("step", lambda t: _set(t, "step", [str(v) for v in t["step"].to_pylist()])),
            ("read_skills", lambda t: _set(t, "read_skills", [",".join(v) for v in t["read_skills"].to_pylist()])),
            ("response_tokens", lambda t: _set(t, "response_tokens", [float(v) for v in t["response_tokens"].to_pylist()])),
            ("success", lambda t: _set(t, "success", [int(v) for v in t["success"].to_pylist()])),
            ("read_tok_start", lambda t: _set(t, "read_tok_start",
                                              [[str(x) for x in v] for v in t["read_tok_start"].to_pylist()]))]


def _huge_value(fmt: str) -> Callable[[pa.Table], pa.Table]:
    """A 2 MB value where nothing measured reads it: harmless if the readers cope with its size."""
    if fmt == "trl":
        return lambda t: _set(t, "completion", [c + " " * (2 << 20) if i == 0 else c
                                                for i, c in enumerate(t["completion"].to_pylist())])
    return lambda t: _set(t, "domain", ["x" * (2 << 20)] + t["domain"].to_pylist()[1:])


def _stray(root: Path, spec: Spec) -> Path:
    f = root / spec.stray
    if spec.kind == "parquet":
        pq.write_table(pa.table({"note": ["not a log"]}), f)
    else:
        f.write_text(json.dumps({"note": "not a log"}) + "\n")
    return f


def _stray_ignored(root: Path, spec: Spec) -> Path:
    f = (root / spec.target).parent / "README.md"
    f.write_text("notes about this run\n")
    return f


def _empty(root: Path, spec: Spec) -> Path:
    f = root / spec.target
    if spec.kind == "parquet":
        t = pq.read_table(f)
        pq.write_table(t.slice(0, 0), f)
    else:
        f.write_text("\n\n")
    return f


def _huge_line(root: Path, spec: Spec) -> Path:
    f = root / spec.target
    lines = f.read_bytes().splitlines()
    lines[1] = b'{"pad": "' + b"x" * (2 * LINE_LIMIT) + b'"}'
    f.write_bytes(b"\n".join(lines) + b"\n")
    return f


def _no_newline(root: Path, spec: Spec) -> Path:
    f = root / spec.target
    f.write_bytes(b"x" * (3 * LINE_LIMIT))
    return f


#: Per JSONL format: a long line (under the limit) that must load unchanged: whitespace the tokenizer
#: skips, or a value no measure reads.
PADDED = {"jsonl": _with("domain", "y" * (LINE_LIMIT // 2)), "nemo": _with("pad", "y" * (LINE_LIMIT // 2)),
          "verl": lambda rec: {**rec, "output": rec["output"] + " " * (LINE_LIMIT // 2)}}


def cases_for(name: str) -> list[Case]:
    spec = SPECS[name]
    seed = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
    cases = _byte_cases(seed)
    cases += [Case("empty (no rows)", "empty", _empty), Case("stray file", "stray", _stray),
              Case("stray file of another name", "ignored file", _stray_ignored)]
    if spec.kind == "parquet":
        cases += [_table_case(f"{col} of the wrong type", "wrong type", edit) for col, edit in _parquet_wrong_types(name)]
        cases += [_table_case(f"no {col} column", "missing column", lambda t, c=col: t.drop_columns([c]))
                  for col in PARQUET_REQUIRED[name]]
        cases.append(_table_case("a 2 MB value", "huge value", _huge_value(name)))
    else:
        cases += [_line_case(f"line 2: {col} = {str(v)[:12]}", "wrong type", 2, _with(col, v))
                  for col, v in JSONL_WRONG_TYPES[name]]
        cases += [_line_case(f"line 3: no {col}", "missing column", 3, _without(col)) for col in JSONL_REQUIRED[name]]
        cases += [_line_case(f"line 2: {what}", "wrong JSON", 2, lambda rec, raw=raw: raw) for what, raw in WRONG_JSON]
        cases += [Case("line 2 over the length limit", "huge line", _huge_line, 2),
                  Case("no newline at all", "huge line", _no_newline, 1),
                  _line_case("line 1 padded under the limit", "huge value", 1, PADDED[name])]
    return cases


# ---------------------------------------------------------------------------- loading and classifying


_TOKENIZER = word_tokenizer()
_TASKS = readers.TaskTable(TASKS, "tasks.jsonl")
_NEMO_TASKS = readers.TaskTable([{"task_id": "t1", "oracle": "oracle-a", "skills": {"mis-a": "misleading"}}], "tasks.jsonl")


def _options(name: str, skip_bad: bool) -> readers.ReaderOptions:
    if name == "nemo":
        return readers.ReaderOptions(tokenizer=_TOKENIZER, tasks=_NEMO_TASKS, skip_bad=skip_bad)
    return readers.ReaderOptions(tasks=_TASKS, skip_bad=skip_bad)


def _canon(rows: list[dict]) -> list[str]:
    return sorted(json.dumps({k: r.get(k) for k in MEASURED}, sort_keys=True, default=str) for r in rows)


def _scan(files: list[Path]) -> list[dict]:
    if not files:
        return []
    flist = "[" + ", ".join(f"'{f}'" for f in files) + "]"
    return _CON.sql(f"SELECT * FROM read_parquet({flist}, union_by_name = true)").arrow().read_all().to_pylist()


def load(name: str, root: Path, opts: readers.ReaderOptions, tmp: Path) -> tuple[list[str], readers.Problems]:
    """The rows the audit's readers and checks let through (canonical JSON), and what they reported."""
    spec = SPECS[name]
    assert readers.detect_format(root) == spec.fmt
    problems = readers.Problems(skip_bad=opts.skip_bad)
    if name == "kit":
        rows = _scan(readers.check_parquet_tables(sorted((root / "trajectories").glob("*.parquet")), problems,
                                                  every_column=True))
    elif name == "table":
        rows = _scan(readers.check_parquet_tables(sorted(root.glob("*.parquet")), problems))
    elif name == "jsonl":
        staging = tmp / "staging"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        rows = _scan(readers.stage_jsonl_tables(sorted(root.glob("*.jsonl")), staging, problems))
    else:
        read = {"trl": readers.read_trl, "verl": readers.read_verl, "nemo": readers.read_nemo}[name]
        rows = [r for table in read(root, opts, problems) for r in table.to_pylist()]
    if not rows:
        raise ArtifactError(f"{root}: empty input")
    return _canon(rows), problems


def load_audited(name: str, root: Path, opts: readers.ReaderOptions, tmp: Path) -> tuple[list[str], readers.Problems]:
    """The rows the audit's engine keeps (its own loading path, row validation included)."""
    with audit.open_log(root, SPECS[name].fmt, opts, split=None, threads=1) as eng:
        cols = ", ".join(MEASURED)
        rows = [dict(zip(MEASURED, r)) for r in eng.con.sql(f"SELECT {cols} FROM t").fetchall()]
        return _canon(rows), eng.problems


def classify(name: str, case: Case, root: Path, tmp: Path, clean: list[str], kept: list[str],
             loader=load) -> str:
    """Load ``root`` strictly and with skip_bad; assert the invariants; return the outcome."""
    bad_file = case.damage(root, SPECS[name])
    try:
        rows, problems = loader(name, root, _options(name, False), tmp)
    except ArtifactError as err:
        msg = str(err)
        assert bad_file.name in msg, f"{case.name}: the error does not name {bad_file.name}: {msg}"
        if case.line is not None and "line" in msg:
            assert f"line {case.line}" in msg, f"{case.name}: the error names another line: {msg}"
        try:
            rows, problems = loader(name, root, _options(name, True), tmp)
        except ArtifactError as err2:
            assert not isinstance(err, readers.BadInput), f"{case.name}: skip_bad did not skip: {err2}"
            return "error"
        assert problems.any_skipped, f"{case.name}: skip_bad loaded without counting what it skipped"
        lost = set(kept) - set(rows)
        assert not lost, f"{case.name}: skipping lost {len(lost)} row(s) of the untouched file"
        return "skip"
    again, problems2 = loader(name, root, _options(name, True), tmp)
    assert again == rows and not problems.any_skipped and not problems2.any_skipped
    return "harmless" if rows == clean else "changed"


def _fresh(name: str, tmp: Path) -> Path:
    """A clean copy of the ``name`` log at ``tmp/log`` (built once under ``tmp/clean``)."""
    clean, root = tmp / "clean", tmp / "log"
    if not clean.exists():
        SPECS[name].build(clean)
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(clean, root)
    return root


#: Damage that may end otherwise than in an error or a counted skip. A flipped byte can land where nothing
#: reads (harmless) or, in a format without checksums, turn a value into another valid one (changed); the
#: kit's parts carry page checksums, so there it never goes unnoticed. JSONL has no end marker: a cut that
#: falls exactly at a line's end loses the lines after it unseen. A large value or a file the format's
#: pattern does not match must be read as if it were not there.
ALLOWED = {"flip": {"skip", "error", "harmless", "changed"}, "huge value": {"harmless"}, "ignored file": {"harmless"}}
JSONL_ALLOWED = {**ALLOWED, "truncate": {"skip", "error", "changed"}}


def fuzz(name: str, tmp: Path) -> dict[str, Counter]:
    """Every case of ``name``: ``{group: Counter(outcome)}`` (asserting the invariants on the way)."""
    spec = SPECS[name]
    root = _fresh(name, tmp)
    clean, _ = load(name, root, _options(name, False), tmp)
    (root / spec.target).unlink()
    kept, _ = load(name, root, _options(name, False), tmp)
    audited_clean = audited_kept = None
    tally: dict[str, Counter] = {}
    for case in cases_for(name):
        try:
            outcome = classify(name, case, _fresh(name, tmp), tmp, clean, kept)
        except duckdb.Error:
            outcome = "changed"  # the checks passed a part DuckDB's own reader rejects: the audit handles that
        if outcome == "changed" and spec.engine_checked:
            # Changed rows passed the file checks; the audit's engine validates their values.
            if audited_clean is None:
                audited_clean, _ = load_audited(name, _fresh(name, tmp), _options(name, False), tmp)
                root = _fresh(name, tmp)
                (root / spec.target).unlink()
                audited_kept, _ = load_audited(name, root, _options(name, False), tmp)
            outcome = classify(name, case, _fresh(name, tmp), tmp, audited_clean, audited_kept, loader=load_audited)
        tally.setdefault(case.group, Counter())[outcome] += 1
        allowed = (JSONL_ALLOWED if spec.kind == "jsonl" else ALLOWED).get(case.group, {"skip", "error"})
        allowed = allowed - ({"changed"} if name == "kit" else set())
        assert outcome in allowed, f"{name}: {case.name}: {outcome}"
    return tally


@pytest.mark.parametrize("name", list(SPECS))
def test_fuzz_every_bad_input_is_named_or_counted(name, tmp_path, monkeypatch):
    monkeypatch.setattr(readers.files, "MAX_LINE_BYTES", LINE_LIMIT)
    tally = fuzz(name, tmp_path)
    assert sum(sum(c.values()) for c in tally.values()) == len(cases_for(name)) >= 28


# ---------------------------------------------------------------------------- the cases of the issue, end to end


def _tree_state(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its bytes' digest (files) and mtime in ns (files and directories)."""
    state = {".": ("dir", root.stat().st_mtime_ns)}
    for p in sorted(root.rglob("*")):
        st = p.stat()
        state[str(p.relative_to(root))] = ((hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"),
                                          st.st_mtime_ns)
    return state


def test_cli_truncated_kit_part_is_named_then_skipped(tmp_path, capsys):
    root = tmp_path / "run"
    build_kit(root)
    part = root / "trajectories" / "step-000001-train.parquet"
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])  # a run killed mid-write
    assert audit.main([str(root), "--no-figures"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"audit: error: {part}: not a readable Parquet file") and "--skip-bad" in out
    assert "Traceback" not in out
    assert audit.main([str(root), "--no-figures", "--skip-bad", "--n-boot", "20"]) == 0
    out = capsys.readouterr().out
    assert "audit of" in out and "(kit, 8 trajectories" in out
    assert f"skipped 1 file(s): corrupt file (e.g. {part}: not a readable Parquet file" in out


def test_cli_trl_without_tasks_reports_share_and_says_once_what_sign_and_value_need(tmp_path, capsys):
    root = tmp_path / "trl"
    build_trl(root)
    assert audit.main([str(root), "--no-figures", "--n-boot", "20"]) == 0
    out = capsys.readouterr().out
    assert out.count("--tasks") == 1 and out.count("Sign (wrong-signed reads), Value") == 1
    assert "task_id and/or prompt, oracle, skills {name: category}" in out and "skill, category" in out
    r = audit.run_audit(root, n_boot=20)
    assert not r.categorised and r.n_rows == 12
    # Share is k / L as for the categorised audit; read counts too; the category measures are absent, not zero.
    full = audit.run_audit(root, tasks=_TASKS, n_boot=20)
    for col in ("share_median", "share_q25", "share_q75", "reads_per_trial", "success", "sign_negative", "sign_zero"):
        assert r.overall[col] == pytest.approx(full.overall[col])
    assert all(np.isnan(r.overall[c]) for c in audit.BY_CATEGORY)
    verdicts = r.trends.set_index("measure").loc[["sign_wrong", "value", "oracle_read"], "verdict"]
    assert set(verdicts) == {"needs skill categories"}


def test_kit_table_without_categories_is_share_only(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    pq.write_table(logs.to_arrow(hand_log()).drop_columns(["read_categories"]), root / "part.parquet")
    r = audit.run_audit(root, fmt="table", n_boot=20)
    assert not r.categorised and r.n_rows == 8 and not r.problems.any_skipped
    assert "the table needs a read_categories column" in audit.report(r)


@pytest.mark.parametrize("name", list(SPECS))
def test_audit_never_writes_into_its_input(name, tmp_path, capsys):
    """Bytes and mtimes of every file and directory under the input are unchanged and nothing is added,
    skipping or strict; an --out inside the input is refused (figures: tests/test_audit.py)."""
    root = tmp_path / "log"
    SPECS[name].build(root)
    _stray(root, SPECS[name])  # something to skip, so the skipping path runs too
    opts = _options(name, True)
    before = _tree_state(root)
    r = audit.run_audit(root, tasks=opts.tasks, tokenizer=opts.tokenizer, skip_bad=True, n_boot=10)
    assert r.problems.any_skipped and r.n_rows > 0
    with pytest.raises(readers.BadInput, match=SPECS[name].stray.rsplit("/", 1)[-1]):
        audit.run_audit(root, tasks=opts.tasks, tokenizer=opts.tokenizer, n_boot=10)
    assert audit.main([str(root), "--out", str(root / "figures")]) == 2
    assert "lies inside the audited" in capsys.readouterr().out
    assert _tree_state(root) == before


def test_bad_task_metadata_is_named(tmp_path):
    for text, match in (('{"task_id": "t1", "skills": ["a"]}', r"row 0: field 'skills'"),
                        ("[1, 2]", r"row 0: list where a task object was expected"),
                        ('{"task_id": "t1"', r"line 1: not valid JSON")):
        path = tmp_path / "tasks.jsonl"
        path.write_text(text + "\n")
        with pytest.raises(ArtifactError, match=match):
            readers.TaskTable.load(path)
    with pytest.raises(ArtifactError, match="task metadata not found"):
        readers.TaskTable.load(tmp_path / "missing.jsonl")
    (tmp_path / "tasks.csv").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ArtifactError, match=r"tasks\.csv: "):
        readers.TaskTable.load(tmp_path / "tasks.csv")


def test_a_skipped_row_leaves_its_partners_advantages_alone(tmp_path):
    """Recomputed advantages use the group's valid rows only: skipping a row with a NaN reward gives
    the audit of the table without that row (group b keeps three rollouts)."""
    df = hand_log()
    no_adv = lambda d: logs.to_arrow(d).drop_columns(["adv_exec", "read_adv", "sel_weight"])
    bad = tmp_path / "bad"
    bad.mkdir()
    df.loc[5, "reward"] = np.nan  # group b's trial without a read; NaN, not null (avg() would skip a null)
    pq.write_table(_set(no_adv(df), "reward", pa.array(df["reward"].tolist(), pa.float64())), bad / "part.parquet")
    with pytest.raises(readers.BadInput, match=r"part\.parquet: row 5: field 'reward' is not finite"):
        audit.run_audit(bad, fmt="table", n_boot=50)
    skipped = audit.run_audit(bad, fmt="table", skip_bad=True, n_boot=50)
    good = tmp_path / "good"
    good.mkdir()
    pq.write_table(no_adv(df.drop(index=5)), good / "part.parquet")
    pd.testing.assert_frame_equal(skipped.bins, audit.run_audit(good, fmt="table", n_boot=50).bins)
    assert skipped.problems.skipped == {"bad value": 1} and skipped.bins["sign_negative"].notna().all()


@pytest.mark.parametrize("args, match", [
    (["--read-pattern", "<read>(.*"], "--read-pattern '<read>\\(\\.\\*': not a regular expression"),
    (["--read-pattern", "<read>(.*)</read>"], "no \\(\\?P<name>\\.\\.\\.\\) group"),
    (["--tokenizer", "/nonexistent/tokenizer"], "--tokenizer /nonexistent/tokenizer: cannot be loaded"),
    (["--tasks", "/nonexistent/tasks.jsonl"], "task metadata not found"),
])
def test_bad_options_are_named_not_a_traceback(args, match, tmp_path, capsys):
    root = tmp_path / "verl"
    build_verl(root)
    assert audit.main([str(root), "--no-figures", *args]) == 1
    out = capsys.readouterr().out
    assert out.startswith("audit: error: ") and re.search(match, out), out

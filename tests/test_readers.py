"""Readers: TRL, verl, NeMo-RL and plain tables give the kit's trajectory table, and bad input is named."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from skillgate_lib import audit, logs, readers

EPS = 1e-4
# Two prompt groups of three rollouts at step 5. Whitespace tokens: "<read>mis-a</read>" is one token.
ROLLOUTS = [
    # prompt, completion, reward, (names, categories, starts, ends), response tokens
    ("Task one: balance the ledger", "<read> oracle-a </read> step one done", 1.0,
     (["oracle-a"], ["oracle"], [1], [2]), 6),
    ("Task one: balance the ledger", "<read>mis-a</read> step one done", 1.0, (["mis-a"], ["misleading"], [0], [1]), 4),
    ("Task one: balance the ledger", "cat ~/.claude/skills/rel-a/SKILL.md then step", 0.0,
     (["rel-a"], ["relevant"], [1], [2]), 4),
    ("Task two: route the parcel", "<read>oracle-b</read> a b c d e f", 0.0, (["oracle-b"], ["oracle"], [0], [1]), 7),
    ("Task two: route the parcel", "<read>irr-b</read> x <read> mis-b </read> y", 1.0,
     (["irr-b", "mis-b"], ["irrelevant", "misleading"], [0, 3], [1, 4]), 6),
    ("Task two: route the parcel", "no read at all", 0.0, ([], [], [], []), 4),
]
TASKS = [
    {"task_id": "t1", "prompt": "Task one: balance the ledger", "domain": "ledger", "horizon": 2, "oracle": "oracle-a",
     "skills": {"mis-a": "misleading", "rel-a": "relevant"}},
    {"task_id": "t2", "prompt": "Task two: route the parcel", "domain": "routing", "horizon": 4, "oracle": "oracle-b",
     "skills": {"mis-b": "misleading", "irr-b": "irrelevant"}},
]
KNOWABLE = ["step", "task_id", "domain", "horizon", "response_tokens", "reward", "success", "read_skills", "read_categories",
            "read_tok_start", "read_tok_end", "adv_exec", "read_adv", "sel_weight"]


def _adv(rewards):
    r = np.asarray(rewards, float)
    return (r - r.mean()) / (r.std(ddof=1) + EPS)


def expected_table() -> pd.DataFrame:
    """The kit's own table for ROLLOUTS, written by hand (advantages by the GRPO formula)."""
    adv = np.concatenate([_adv([r[2] for r in ROLLOUTS[:3]]), _adv([r[2] for r in ROLLOUTS[3:]])])
    rows = []
    for i, (prompt, _, reward, (names, cats, s, e), n_tok) in enumerate(ROLLOUTS):
        task = TASKS[i // 3]
        rows.append(dict(step=5, split="train", group_id=task["task_id"], rollout=i % 3, task_id=task["task_id"],
                         domain=task["domain"], horizon=task["horizon"], response_tokens=n_tok, reward=reward,
                         success=reward >= 1, read_skills=names, read_categories=cats, read_tok_start=s,
                         read_tok_end=e, adv_exec=adv[i], read_adv=[adv[i]] * len(names),
                         sel_weight=sum(b - a for a, b in zip(s, e)) / n_tok, credit="outcome"))
    return pd.DataFrame(rows)


def write_tasks(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    return path


def write_trl(out_dir, with_advantage=True):
    (out_dir / "completions").mkdir(parents=True)
    df = pd.DataFrame({"step": 5, "prompt": [r[0] for r in ROLLOUTS], "completion": [r[1] for r in ROLLOUTS],
                       "correctness": [r[2] for r in ROLLOUTS]})
    if with_advantage:
        df["advantage"] = expected_table()["adv_exec"]
    df.to_parquet(out_dir / "completions" / "completions_00005.parquet")
    return out_dir


def write_verl(out_dir, lines=None):
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = lines or [json.dumps({"input": r[0], "output": r[1], "score": r[2], "step": 5, "acc": r[2]}) for r in ROLLOUTS]
    (out_dir / "5.jsonl").write_text("\n".join(lines) + "\n")
    return out_dir


def _concat(tables) -> pd.DataFrame:
    df = pd.concat([t.to_pandas() for t in tables], ignore_index=True)
    for col in ("read_skills", "read_categories", "read_tok_start", "read_tok_end", "read_adv"):
        df[col] = df[col].map(lambda v: None if v is None else list(v))
    return df


def _canon(df: pd.DataFrame) -> pd.DataFrame:
    df = df.sort_values(["horizon", "response_tokens", "reward"]).reset_index(drop=True)[KNOWABLE]
    return df.assign(read_adv=df["read_adv"].map(lambda a: [round(x, 9) for x in a]), adv_exec=df["adv_exec"].round(9))


@pytest.fixture
def opts(tmp_path):
    return readers.ReaderOptions(tasks=readers.TaskTable.load(write_tasks(tmp_path)))


def test_read_patterns_tolerate_spaces_and_skill_paths():
    text = "<read>  a-b </read> then cat ~/.claude/skills/c-d/SKILL.md"
    tok = readers.WhitespaceTokenizer()
    assert readers.find_reads(text, tok.offsets(text), readers.DEFAULT_READ_PATTERNS) == [("a-b", 1, 2), ("c-d", 5, 6)]


def test_a_name_written_as_words_is_the_slate_skill_it_names():
    """The kit writes ``<read> ledger credit amber </read>`` for skill ``ledger-credit-amber``."""
    text = "<read> ledger credit amber </read> step 1 : 4 8"
    tok = readers.WhitespaceTokenizer()
    assert readers.find_reads(text, tok.offsets(text), readers.DEFAULT_READ_PATTERNS) == [("ledger credit amber", 1, 4)]
    meta = {"skills": {"ledger-credit-amber": "oracle", "ledger-credit-teal": "misleading"}}
    assert readers.rows.categorise(["ledger credit amber", "ledger-credit-teal"], meta, object()) == ["oracle", "misleading"]


@pytest.mark.parametrize("with_advantage", [True, False])
def test_trl_matches_kit_table(tmp_path, opts, with_advantage):
    """Logged or recomputed, TRL gives the same table as the kit's own format for the same rollouts."""
    problems = readers.Problems()
    got = _concat(readers.read_trl(write_trl(tmp_path / "trl", with_advantage), opts, problems))
    pd.testing.assert_frame_equal(_canon(got), _canon(expected_table()))
    assert got.groupby("group_id").size().tolist() == [3, 3]
    assert problems.adv_checked == (6 if with_advantage else 0) and problems.adv_mismatch == 0


def test_verl_matches_kit_table(tmp_path, opts):
    got = _concat(readers.read_verl(write_verl(tmp_path / "verl"), opts, readers.Problems()))
    pd.testing.assert_frame_equal(_canon(got), _canon(expected_table()))


def test_kit_round_trip_matches(tmp_path):
    w = logs.RunWriter(tmp_path / "run")
    w.write_trajectories(expected_table(), step=5, split="train")
    pd.testing.assert_frame_equal(_canon(logs.read_run(tmp_path / "run")), _canon(expected_table()))


def test_trl_advantage_mismatch_is_reported(tmp_path, opts):
    out = write_trl(tmp_path / "trl")
    f = out / "completions" / "completions_00005.parquet"
    df = pd.read_parquet(f)
    df.loc[0, "advantage"] = 3.0
    df.to_parquet(f)
    problems = readers.Problems()
    got = _concat(readers.read_trl(out, opts, problems))
    assert problems.adv_mismatch == 1 and "1 of 6" in problems.summary()
    assert 3.0 in got["adv_exec"].tolist()  # used as logged


def test_tasks_csv_long_format(tmp_path):
    rows = [{"task_id": t["task_id"], "prompt": t["prompt"], "skill": s, "category": c, "horizon": t["horizon"], "domain": t["domain"]}
            for t in TASKS for s, c in {**t["skills"], t["oracle"]: "oracle"}.items()]
    pd.DataFrame(rows).to_csv(tmp_path / "tasks.csv", index=False)
    o = readers.ReaderOptions(tasks=readers.TaskTable.load(tmp_path / "tasks.csv"))
    got = _concat(readers.read_verl(write_verl(tmp_path / "verl"), o, readers.Problems()))
    pd.testing.assert_frame_equal(_canon(got), _canon(expected_table()))


def test_unknown_skill_names_line_and_field(tmp_path, opts):
    lines = [json.dumps({"input": r[0], "output": r[1], "score": r[2], "step": 5}) for r in ROLLOUTS]
    lines[1] = json.dumps({"input": ROLLOUTS[1][0], "output": "<read>nope</read> x", "score": 1.0, "step": 5})
    out = write_verl(tmp_path / "verl", lines)
    with pytest.raises(logs.ArtifactError, match=r"5\.jsonl: line 2: field 'read_skills': unknown skill 'nope'"):
        list(readers.read_verl(out, opts, readers.Problems()))
    problems = readers.Problems(skip_bad=True)
    assert len(_concat(readers.read_verl(out, opts, problems))) == 5
    assert problems.skipped == {"unknown skill": 1}


def test_corrupt_line_and_missing_field_in_verl(tmp_path, opts):
    lines = [json.dumps({"input": r[0], "output": r[1], "score": r[2], "step": 5}) for r in ROLLOUTS]
    lines[2] = lines[2][:20]  # truncated
    lines[4] = json.dumps({"input": ROLLOUTS[4][0], "output": ROLLOUTS[4][1], "step": 5})
    out = write_verl(tmp_path / "verl", lines)
    with pytest.raises(logs.ArtifactError, match=r"line 3: field '<line>': corrupt or truncated"):
        list(readers.read_verl(out, opts, readers.Problems()))
    problems = readers.Problems(skip_bad=True)
    got = _concat(readers.read_verl(out, opts, problems))
    assert problems.skipped == {"corrupt line": 1, "missing column": 1}
    assert sorted(got.groupby("group_id").size()) == [2, 2]


def test_group_of_size_one_is_named(tmp_path, opts):
    lines = [json.dumps({"input": r[0], "output": r[1], "score": r[2], "step": 5}) for r in ROLLOUTS[:4]]
    out = write_verl(tmp_path / "verl", lines)
    with pytest.raises(logs.ArtifactError, match=r"line 4: field 'prompt': group of size 1"):
        list(readers.read_verl(out, opts, readers.Problems()))


def test_trl_missing_column_names_file_and_field(tmp_path, opts):
    out = write_trl(tmp_path / "trl")
    f = out / "completions" / "completions_00005.parquet"
    pd.read_parquet(f).drop(columns="completion").to_parquet(f)
    with pytest.raises(logs.ArtifactError, match=r"completions_00005\.parquet: field 'completion': missing column"):
        list(readers.read_trl(out, opts, readers.Problems()))


def test_without_task_metadata_reads_are_found_but_not_categorised(tmp_path):
    problems = readers.Problems()
    got = _concat(readers.read_verl(write_verl(tmp_path / "verl"), readers.ReaderOptions(), problems))
    assert got["read_categories"].isna().all() and not problems.any_skipped
    cols = ["response_tokens", "reward", "read_skills", "read_tok_start", "read_tok_end", "sel_weight", "adv_exec"]
    rows = lambda df: df.sort_values(cols[:2] + ["sel_weight"]).reset_index(drop=True)[cols]
    pd.testing.assert_frame_equal(rows(got), rows(expected_table()), check_dtype=False)


def test_task_missing_from_the_metadata_is_named(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(TASKS[0]) + "\n")
    o = readers.ReaderOptions(tasks=readers.TaskTable.load(tasks))
    with pytest.raises(logs.ArtifactError, match=r"5\.jsonl: line 4: field 'read_skills': no task in .*tasks\.jsonl matches"):
        list(readers.read_verl(write_verl(tmp_path / "verl"), o, readers.Problems()))


# ---------------------------------------------------------------------------- NeMo-RL

WORDS = ["[UNK]", "task", "one", "two", "<read>", "</read>", "oracle-a", "mis-a", "step", "done", "ENV"]


def word_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def _ids(text):
    return [WORDS.index(w) for w in text.split()]


def write_nemo(out_dir):
    """Two rollouts of one prompt with SkillGate-like per-token advantages (selector token differs)."""
    out_dir.mkdir(parents=True)
    prompt = _ids("task one")
    lines = []
    for resp, reward, exec_a, sel_a in (("<read> oracle-a </read> ENV step done", 1.0, 0.7, 0.5),
                                        ("<read> mis-a </read> ENV step", 0.0, -0.7, -0.5)):
        r = _ids(resp)
        mask = [0, 0] + [0 if w == WORDS.index("ENV") else 1 for w in r]
        adv = [0.0, 0.0] + [sel_a if i == 1 else exec_a for i in range(len(r))]
        ids = prompt + r
        lines.append(json.dumps({"token_ids": ids + [0, 0], "token_loss_mask": mask + [0, 0],
                                 "advantages": adv + [0.0, 0.0], "rewards": reward, "input_lengths": len(ids),
                                 "task_id": "t1", "horizon": 2}))
    (out_dir / "train_data_step3.jsonl").write_text("\n".join(lines) + "\n")
    return out_dir


def test_nemo_uses_logged_per_token_advantages(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"task_id": "t1", "oracle": "oracle-a", "skills": {"mis-a": "misleading"}}) + "\n")
    o = readers.ReaderOptions(tokenizer=word_tokenizer(), tasks=readers.TaskTable.load(tasks))
    problems = readers.Problems()
    got = _concat(readers.read_nemo(write_nemo(tmp_path / "nemo"), o, problems)).sort_values("reward")
    assert got["step"].tolist() == [3, 3] and got["group_id"].nunique() == 1
    assert got["read_tok_start"].tolist() == [[1], [1]] and got["read_tok_end"].tolist() == [[2], [2]]
    assert got["response_tokens"].tolist() == [4, 5]  # the ENV token carries no loss
    assert got["read_adv"].tolist() == [[-0.5], [0.5]]
    assert got["adv_exec"].tolist() == pytest.approx([-0.7, 0.7])
    # Share = |A| on the selector token over sum |A| on loss-bearing tokens, not k / L.
    assert got["sel_weight"].tolist() == pytest.approx([0.5 / (0.5 + 3 * 0.7), 0.5 / (0.5 + 4 * 0.7)])
    assert problems.adv_checked == 2 and problems.adv_mismatch == 2  # 0.7 is not the broadcast +-0.707
    assert got["read_categories"].tolist() == [["misleading"], ["oracle"]]


def test_nemo_without_tokenizer_is_an_error(tmp_path):
    with pytest.raises(logs.ArtifactError, match="pass a tokenizer"):
        list(readers.read_nemo(write_nemo(tmp_path / "nemo"), readers.ReaderOptions(), readers.Problems()))


def test_detect_format(tmp_path):
    assert audit.detect_format(write_trl(tmp_path / "trl")) == "trl"
    assert audit.detect_format(write_verl(tmp_path / "verl")) == "verl"
    assert audit.detect_format(write_nemo(tmp_path / "nemo")) == "nemo"
    logs.RunWriter(tmp_path / "kit").write_trajectories(expected_table(), step=5, split="train")
    assert audit.detect_format(tmp_path / "kit") == "kit"

"""The audit: every measure on hand-made logs with known answers, the error paths, the CLI, the generator."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from test_readers import expected_table, write_tasks, write_trl, write_verl

from skillgate_lib import audit, logs, theory

EPS = 1e-4


def _adv(rewards):
    r = np.asarray(rewards, float)
    return (r - r.mean()) / (r.std(ddof=1) + EPS)


def _row(group, rollout, horizon, cats, success, L, step=0, **over):
    n = len(cats)
    row = dict(step=step, split="train", group_id=group, rollout=rollout, task_id=group, domain="ledger",
               horizon=horizon, response_tokens=L, reward=float(success), success=bool(success),
               read_skills=[f"{c}-x" for c in cats], read_categories=list(cats),
               read_tok_start=[2 + 5 * j for j in range(n)], read_tok_end=[4 + 5 * j for j in range(n)],
               adv_exec=None, read_adv=None, sel_weight=2 * n / L, credit="outcome")
    row.update(over)
    return row


def hand_log() -> pd.DataFrame:
    """Group a (H=1): the oracle read succeeds, the misleading one fails.
    Group b (H=3): the oracle read FAILS while an irrelevant and a misleading read succeed; one trial reads nothing.
    Group c (H=3): two oracle reads, both succeed (every advantage is zero; no match for Value)."""
    rows = [_row("a", 0, 1, ["oracle"], 1, 10), _row("a", 1, 1, ["misleading"], 0, 20),
            _row("b", 0, 3, ["oracle"], 0, 40), _row("b", 1, 3, ["irrelevant"], 1, 40),
            _row("b", 2, 3, ["misleading"], 1, 50), _row("b", 3, 3, [], 0, 30),
            _row("c", 0, 3, ["oracle"], 1, 80), _row("c", 1, 3, ["oracle"], 1, 40)]
    df = pd.DataFrame(rows)
    adv = np.concatenate([_adv(g["reward"]) for _, g in df.groupby("group_id", sort=True)])
    df["adv_exec"] = adv
    df["read_adv"] = [[a] * len(s) for a, s in zip(adv, df["read_skills"])]
    return df


def write_kit(path, df, step=0):
    logs.RunWriter(path).write_trajectories(df, step=step, split="train")
    return path


def test_every_measure_on_a_hand_made_log(tmp_path):
    df = hand_log()
    r = audit.run_audit(write_kit(tmp_path / "run", df), n_boot=2000, seed=1)
    assert r.fmt == "kit" and r.horizon_kind == "steps" and r.n_rows == 8
    b = r.bins.set_index("bin")
    assert b["h_min"].tolist() == [1, 3] and b["n"].tolist() == [2, 6]
    # Share: median and IQR of the logged sel_weight (= k/L here), dilution shortest/longest.
    for i, h in enumerate((1, 3)):
        w = df.loc[df["horizon"] == h, "sel_weight"].to_numpy()
        assert b.loc[i, "share_median"] == pytest.approx(np.median(w), abs=1e-9)
        assert b.loc[i, ["share_q25", "share_q75"]].tolist() == pytest.approx(np.quantile(w, [0.25, 0.75]).tolist(), abs=1e-9)
    assert r.dilution == pytest.approx(np.median([0.2, 0.1]) / np.median([0.05, 0.05, 0.04, 0, 0.025, 0.05]))
    # Sign. Bin H=1: oracle A>0, misleading A<0 -> 1 negative of 2, none wrong, none zero.
    assert b.loc[0, ["sign_negative", "sign_wrong", "sign_zero"]].tolist() == [0.5, 0.0, 0.0]
    # Bin H=3: 5 reads; b's oracle read A<0 (wrong), irrelevant and misleading A>0 (wrong); c's two A=0.
    assert b.loc[1, ["sign_negative", "sign_wrong", "sign_zero"]].tolist() == [0.2, 1.0, 0.4]
    assert r.overall["sign_wrong"] == pytest.approx(3 / 5) and r.overall["sign_zero"] == pytest.approx(2 / 7)
    # Value: a gives 1 - 0 = +1; b gives 0 - 1 = -1 (the no-read trial is not an "other read"); c is unmatched.
    assert b["value"].tolist() == [1.0, -1.0] and b["value_groups"].tolist() == [1, 1]
    assert r.overall["value"] == 0.0 and r.overall["value_groups"] == 2
    assert (r.overall["value_lo"], r.overall["value_hi"]) == (-1.0, 1.0)  # the bootstrap of {+1, -1}
    # Reads.
    assert b["oracle_read"].tolist() == [0.5, 0.5] and b["misleading_read"].tolist() == pytest.approx([0.5, 1 / 6])
    assert b["reads_per_trial"].tolist() == pytest.approx([1.0, 5 / 6])
    assert r.problems.adv_checked == 8 and r.problems.adv_mismatch == 0


def test_logged_per_token_credit_is_used_as_logged(tmp_path):
    """A SkillGate-style kit log: read_adv and sel_weight differ from the broadcast and k/L; the audit uses them."""
    df = hand_log()
    df["credit"] = "skillgate"
    df["sel_weight"] = 1 / 6
    df["read_adv"] = [[0.5 if c == "oracle" else -0.5 for c in cats] for cats in df["read_categories"]]
    r = audit.run_audit(write_kit(tmp_path / "run", df), n_boot=100)
    assert r.bins["share_median"].tolist() == pytest.approx([1 / 6, 1 / 6]) and r.dilution == pytest.approx(1.0)
    assert r.overall["sign_wrong"] == 0.0 and r.overall["sign_zero"] == 0.0
    assert r.overall["sign_negative"] == pytest.approx(3 / 7)


def test_missing_advantages_and_share_are_recomputed(tmp_path):
    df = hand_log()
    table = logs.to_arrow(df).drop_columns(["adv_exec", "read_adv", "sel_weight"])
    (tmp_path / "t").mkdir()
    pq.write_table(table, tmp_path / "t" / "part.parquet")
    r = audit.run_audit(tmp_path / "t", fmt="table", n_boot=100)
    assert r.bins["sign_wrong"].tolist() == [0.0, 1.0] and r.bins["sign_zero"].tolist() == [0.0, 0.4]
    ref = audit.run_audit(write_kit(tmp_path / "run", df), n_boot=100)
    pd.testing.assert_frame_equal(r.bins, ref.bins)


def test_trl_and_verl_audits_equal_the_kit_audit(tmp_path):
    tasks = write_tasks(tmp_path)
    kit = audit.run_audit(write_kit(tmp_path / "run", expected_table(), step=5), n_boot=200)
    for path in (write_trl(tmp_path / "trl"), write_verl(tmp_path / "verl")):
        other = audit.run_audit(path, tasks=tasks, n_boot=200)
        pd.testing.assert_frame_equal(other.bins, kit.bins)


def test_jsonl_table_and_corrupt_line(tmp_path):
    df = hand_log()
    lines = [json.dumps(r) for r in df.to_dict("records")]
    lines.insert(3, '{"step": 0, "split": "tr')
    f = tmp_path / "log.jsonl"
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(logs.ArtifactError, match=r"log\.jsonl: line 4: field '<line>': corrupt"):
        audit.run_audit(f)
    r = audit.run_audit(f, skip_bad=True, n_boot=100)
    assert r.problems.skipped == {"corrupt line": 1} and r.n_rows == 8


@pytest.mark.parametrize(
    "edit, reason, message",
    [
        (lambda df: df.drop(index=0), "group of size 1", r"row 0: field 'group_id' is a group of size 1"),
        (lambda df: df.assign(read_tok_end=[[400]] + df["read_tok_end"].tolist()[1:]), "span outside response",
         r"row 0: field 'read_tok_start/read_tok_end' holds a span"),
    ],
)
def test_bad_kit_rows_stop_or_skip(tmp_path, edit, reason, message):
    df = edit(hand_log()).reset_index(drop=True)
    run = write_kit(tmp_path / "run", df)
    with pytest.raises(logs.ArtifactError, match=r"step-000000-train\.parquet: " + message):
        audit.run_audit(run)
    r = audit.run_audit(run, skip_bad=True, n_boot=100)
    assert r.problems.skipped == {reason: 1} and r.n_rows == len(df) - 1


def test_missing_column_and_empty_input(tmp_path):
    (tmp_path / "t").mkdir()
    pq.write_table(logs.to_arrow(hand_log()).drop_columns(["reward"]), tmp_path / "t" / "part.parquet")
    with pytest.raises(logs.ArtifactError, match=r"part\.parquet: field 'reward': missing column"):
        audit.run_audit(tmp_path / "t", fmt="table")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(logs.ArtifactError, match="empty"):
        audit.run_audit(tmp_path / "empty.jsonl", fmt="table")
    (tmp_path / "kit" / "trajectories").mkdir(parents=True)
    with pytest.raises(logs.ArtifactError, match="empty"):
        audit.run_audit(tmp_path / "kit", fmt="kit")


def _tree_digest(root):
    """Each path under ``root``: its bytes' digest (files) and its mtime (files and directories)."""
    return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir", p.stat().st_mtime_ns)
            for p in sorted([root, *root.rglob("*")])}


def test_cli_prints_table_writes_figures_and_never_touches_input(tmp_path, capsys):
    run = write_kit(tmp_path / "run", hand_log())
    before = _tree_digest(run)
    assert audit.main([str(run), "--out", str(tmp_path / "figs"), "--n-boot", "50"]) == 0
    out = capsys.readouterr().out
    assert "Share %" in out and "trends vs horizon" in out and "all" in out
    for name in ("audit_share", "audit_sign", "audit_value", "audit_reads", "audit_summary"):
        assert (tmp_path / "figs" / f"{name}.png").exists() and (tmp_path / "figs" / f"{name}.csv").exists()
    assert _tree_digest(run) == before
    bad = write_kit(tmp_path / "bad", hand_log().drop(index=0).reset_index(drop=True))
    assert audit.main([str(bad), "--no-figures"]) == 1
    assert "group of size 1" in capsys.readouterr().out
    assert audit.main([str(bad), "--no-figures", "--skip-bad"]) == 0
    assert "skipped 1 row(s): group of size 1" in capsys.readouterr().out


def test_spearman_trend_and_bootstrap():
    rng = np.random.default_rng(0)
    t = audit.spearman_trend(np.arange(5.0), np.array([1, 2, 3, 5, 8.0]), "up", rng)
    assert t["rho"] == pytest.approx(1.0) and t["p_value"] == pytest.approx(2 / 120) and t["monotone"]
    assert t["verdict"] == "worsens monotonically"
    # rho 0.9 over 5 bins: p = 10 / 120 > 0.05, so no trend either way (it used to read "does not worsen")
    up, down = np.array([1, 3, 2, 5, 8.0]), np.array([8, 5, 6, 2, 1.0])
    t = audit.spearman_trend(np.arange(5.0), up, "down", rng)
    assert t["rho"] == pytest.approx(0.9) and t["p_value"] == pytest.approx(10 / 120) and not t["monotone"]
    assert t["verdict"] == "no trend"
    assert audit.spearman_trend(np.arange(5.0), up, "down", rng, alpha=0.1)["verdict"] == "improves"
    t = audit.spearman_trend(np.arange(5.0), down, "down", rng)
    assert t["rho"] == pytest.approx(-0.9) and t["verdict"] == "no trend"
    assert audit.spearman_trend(np.arange(5.0), down, "down", rng, alpha=0.1)["verdict"] == "worsens"
    mean, lo, hi = audit.bootstrap_mean(np.array([0.0, 1.0]), np.array([50.0, 50.0]), 4000, rng)
    assert mean == 0.5 and lo == pytest.approx(0.5 - 1.96 * 0.05, abs=0.015) and hi == pytest.approx(0.5 + 0.098, abs=0.015)


def test_synthetic_log_recovers_the_theory(tmp_path):
    """The generator draws from the model's process; the audit and the fit get the model back."""
    model = theory.StarvationModel(p_oracle=0.4, q_step=0.9, s_wrong=0.3)
    run = audit.write_synthetic_log(tmp_path / "syn", 40_000, model, rows_per_step=8000, seed=3)
    r = audit.run_audit(run, n_boot=200)
    assert json.loads((run / "config.json").read_text())["synthetic"] is True
    h = r.bins["h_min"].to_numpy()
    assert r.bins["share_median"].to_numpy() == pytest.approx(model.share(h))
    assert r.model.p_oracle == pytest.approx(0.4, abs=0.01) and r.model.q_step == pytest.approx(0.9, abs=0.01)
    assert r.bins["sign_wrong"].to_numpy() == pytest.approx(model.sign_error(h), abs=0.03)
    assert r.bins["value"].to_numpy() == pytest.approx(model.value(h), abs=0.06)
    assert set(r.trends.set_index("measure").loc[["share_median", "sign_wrong"], "verdict"]) == {"worsens monotonically"}


def test_a_log_without_any_read_is_audited_without_a_theory_overlay(tmp_path):
    """A policy that stopped reading (it happens: an outcome-only run from tiny-lookup did within 10 steps)."""
    rows = [_row(g, k, h, [], 0, 30, adv_exec=0.0, read_adv=[], sel_weight=0.0) for g, h in (("a", 1), ("b", 3))
            for k in range(2)]
    r = audit.run_audit(write_kit(tmp_path / "run", pd.DataFrame(rows)), n_boot=100, seed=0)
    assert r.n_rows == 4 and r.overall["reads_per_trial"] == 0
    assert r.model is None and "no read to fit" in r.model_note and r.curves.empty


def test_the_value_interval_does_not_depend_on_duckdb_threads():
    """The bootstrap draws matched groups by position, so their order is fixed in SQL; left to DuckDB's threads
    it moved the committed run's interval by a few tenths of a point between runs."""
    from skillgate_lib import paths

    run_dir = paths.DATA_DIR / "runs" / "audit" / "paper_echo_f30-outcome"
    got = {}
    for threads in (1, 2):
        for k in range(3):
            ov = audit.run_audit(run_dir, n_boot=300, seed=0, threads=threads).overall
            got[threads, k] = (ov["value_lo"], ov["value_hi"])
    assert len(set(got.values())) == 1, got

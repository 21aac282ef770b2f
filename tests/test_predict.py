"""The lookahead predictor (runs/predict.py): paired arms, fresh optimizers, the ratios, resume and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from skillgate_lib.runs import predict as P


def _small(**kw):
    return P.study_config("paper_note8", steps=1, seeds=(0, 1, 2), eval_tasks=16, threads=1, **kw)


def test_study_config_takes_the_grid_middle_and_the_study_settings():
    cfg = P.study_config("paper_note8")
    assert cfg.lr == {"outcome": 3e-3, "skillgate": 3e-3} and cfg.model == "tiny-note8" and cfg.study == "paper_note8"
    assert cfg.train == {"prompts_per_step": 4, "group_size": 8, "selector_coef": 0.2}
    assert P.study_config("paper_note8", "nsgd").lr["outcome"] == 0.18
    assert P.study_config("paper_note8", "sgd").study == "paper_note8-sgd"
    t = cfg.train_config("skillgate", 3)
    assert (t.method, t.seed, t.lr, t.steps, t.regime) == ("skillgate", 3, 3e-3, 5, "paper_note8")


def test_ratios_sign_and_order_on_known_changes():
    """SkillGate's logit rises twice as fast on every seed: the ratio is 2 at every k; a run whose arm falls gives
    a negative ratio."""
    runs = []
    for s in range(4):
        slope = 0.1 + 0.02 * s
        runs.append({"arm": "outcome", "seed": s, "choice_logit": [0.0, slope, 2 * slope]})
        runs.append({"arm": "skillgate", "seed": s, "choice_logit": [0.0, 2 * slope, 4 * slope]})
    r = P.ratios(runs, 2)
    assert [x["k"] for x in r] == [1, 2] and all(x["ratio"] == pytest.approx(2.0) for x in r)
    assert r[1]["delta_skillgate"] == pytest.approx(2 * r[1]["delta_outcome"])
    for x in runs:
        if x["arm"] == "skillgate":
            x["choice_logit"] = [0.0, -0.1, -0.2]
    assert all(x["ratio"] < 0 for x in P.ratios(runs, 2))


def test_both_arms_see_the_same_first_rollouts_and_fresh_optimizers(monkeypatch):
    """Same seed: the first step's rollouts are identical in both arms (both start as the warm start); each run
    builds its own optimizer and LoRA on a copy, leaving the warm start untouched."""
    from skillgate_lib.runs import train

    seen, opts = {}, []
    real = train.grpo_step

    def spy(model, tokenizer, env, opt, params, cfg, ccfg, step, values=None):
        out = real(model, tokenizer, env, opt, params, cfg, ccfg, step, values)
        seen[(cfg.method, cfg.seed, step)] = [e.response_ids for e in out[0]]
        opts.append(opt)
        return out

    monkeypatch.setattr(train, "grpo_step", spy)
    cfg = _small()
    base, tok = P._base(cfg)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    from skillgate_lib.runs.evaluate import heldout_pairs
    from skillgate_lib.runs.train import make_env

    pairs = heldout_pairs(make_env(cfg.train_config("outcome", 0), train=False), 8)
    a = P.lookahead_run(base, tok, cfg, "outcome", 0, pairs)
    b = P.lookahead_run(base, tok, cfg, "skillgate", 0, pairs)
    assert seen[("outcome", 0, 0)] == seen[("skillgate", 0, 0)] and seen[("outcome", 0, 0)]
    assert a["choice"][0] == pytest.approx(b["choice"][0], abs=1e-9)  # both start as the warm start
    assert opts[0] is not opts[1] and all(len(o.state) == len(o.param_groups[0]["params"]) for o in opts)
    after = base.state_dict()
    assert set(after) == set(before) and all(torch.equal(before[k], after[k]) for k in before)


def test_predict_writes_resumes_and_refuses_other_settings(tmp_path):
    out = tmp_path / "p.json"
    rec = P.predict(_small(), out, "cmd", progress=False)
    assert len(rec["runs"]) == 6 and len(rec["ratios"]) == 1 and rec["command"] == "cmd"
    saved = json.loads(out.read_text())
    assert saved["config"]["lr"] == {"outcome": 3e-3, "skillgate": 3e-3} and saved["ratios"][0]["seeds"] == 3
    again = P.predict(_small(), out, "other", progress=False)  # everything done: nothing reruns
    assert again["runs"] == rec["runs"] and again["command"] == "cmd"
    with pytest.raises(ValueError, match="lr differ"):
        P.predict(_small(lr=1e-2), out, progress=False)
    assert np.isfinite(rec["ratios"][0]["delta_outcome"])


def test_run_config_reads_a_kit_run(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model": "tiny-note8", "regime": "paper_note8", "lr": 0.01,
                                                      "optimizer": "adamw", "group_size": 4, "horizons": [1, 2]}))
    cfg = P.run_config(tmp_path)
    assert cfg.lr == {"outcome": 0.01, "skillgate": 0.01} and cfg.train == {"group_size": 4, "horizons": (1, 2)}
    (tmp_path / "config.json").write_text(json.dumps({"model": "tiny"}))
    with pytest.raises(ValueError, match="regime"):
        P.run_config(tmp_path)


def test_cli_errors(capsys):
    with pytest.raises(SystemExit):
        P.predict_main(["--regime", "paper_note8", "--seeds", "2"])
    assert "--seeds must be >= 3" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        P.predict_main(["--regime", "paper_note8", "--lr", "outcome=1e-3"])
    assert "name both arms" in capsys.readouterr().err


def test_audit_predict_needs_a_kit_run(tmp_path, capsys):
    """``audit PATH --predict`` on a log that is not a kit run (no config.json) says why and writes nothing."""
    from skillgate_lib.audit.cli import main

    table = tmp_path / "log.csv"
    table.write_text("task_id,response,reward,horizon\nt1,<read> a b </read> step 1 : x y,1.0,1\n")
    out = tmp_path / "out"
    assert main([str(table), "--no-figures", "--predict", "--out", str(out)]) == 2
    assert "--predict needs a kit run" in capsys.readouterr().out and not (out / "predict.json").exists()


def test_the_shared_variant_updates_both_arms_on_one_draw(tmp_path, monkeypatch):
    """``--rollouts shared``: each step samples once (from the warm start, never from an arm), both arms update on
    that draw, and the record holds both arms of every seed, starting at the same choice."""
    from skillgate_lib.runs import train

    draws = []
    real = train.sample_batch

    def spy(model, tokenizer, env, cfg, step):
        draws.append((cfg.seed, step, any("lora_" in n for n, _ in model.named_parameters())))
        return real(model, tokenizer, env, cfg, step)

    monkeypatch.setattr(train, "sample_batch", spy)
    cfg = P.study_config("paper_note8", steps=2, seeds=(0, 1, 2), eval_tasks=8, threads=1, rollouts="shared")
    record = P.predict(cfg, tmp_path / "p.json", progress=False)
    assert sorted((s, k) for s, k, _ in draws) == [(s, k) for s in (0, 1, 2) for k in (0, 1)]
    assert not any(lora for *_, lora in draws), "a draw came from an arm's LoRA model"
    by = {(r["arm"], r["seed"]): r for r in record["runs"]}
    assert len(by) == 6 and all(by["outcome", s]["choice"][0] == by["skillgate", s]["choice"][0] for s in (0, 1, 2))
    assert any(by["outcome", s]["choice"][2] != by["skillgate", s]["choice"][2] for s in (0, 1, 2))
    assert [r["k"] for r in record["ratios"]] == [1, 2]
    assert json.loads((tmp_path / "p.json").read_text())["config"]["rollouts"] == "shared"

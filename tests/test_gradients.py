"""The Gradient Share: the logit proxy, its logging at sampling time, the audit's columns, and the free-note knob."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
import torch

from skillgate_lib import logs, theory
from skillgate_lib.audit import report, run_audit
from skillgate_lib.env import NOTE_WORDS, SkillSlateEnv, regimes
from skillgate_lib.policy.gradients import logit_grad_norm, parameter_gradients, proxy_summary
from skillgate_lib.policy.rollout import Episode, generate
from skillgate_lib.policy.warmstart import token_types
from skillgate_lib.runs.records import episode_rows


def test_logit_grad_norm_matches_a_hand_computed_distribution_and_autograd():
    # p = softmax(log [0.5, 0.3, 0.2]) = (0.5, 0.3, 0.2); y = 0: g = sqrt(0.5^2 + 0.3^2 + 0.2^2) = sqrt(0.38)
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2]]))
    g = logit_grad_norm(logits, torch.tensor([0, 2]))
    assert g[0].item() == pytest.approx(math.sqrt(0.38), abs=1e-6)
    assert g[1].item() == pytest.approx(math.sqrt(0.25 + 0.09 + 0.64), abs=1e-6)  # y = 2: (1 - 0.2)^2 + 0.5^2 + 0.3^2
    # a sure token pulls on nothing, and the formula is the autograd norm of d(-log p_y)/d logits
    assert logit_grad_norm(torch.tensor([[30.0, 0.0, 0.0]]), torch.tensor([0])).item() < 1e-6
    x = torch.randn(5, 11, requires_grad=True)
    y = torch.randint(0, 11, (5,))
    loss = torch.nn.functional.cross_entropy(x, y, reduction="sum")
    (grad,) = torch.autograd.grad(loss, x)
    torch.testing.assert_close(logit_grad_norm(x.detach(), y), grad.norm(dim=-1), rtol=1e-5, atol=1e-6)


def test_predicted_signal_ratio_is_lambda_share_over_value_times_share():
    r = theory.predicted_signal_ratio(np.array([0.2, 0.2, -0.1]), np.array([0.01, 0.5, 0.01]), 0.2)
    assert r[0] == pytest.approx((0.2 / 1.2) / 0.002)
    assert r[1] == pytest.approx((0.2 / 1.2) / 0.1)
    assert np.isnan(r[2])  # no signal to beat


def test_free_notes_are_policy_words_whose_content_never_changes_the_verdict():
    env = SkillSlateEnv(step_note=5)
    task = env.sample_tasks(1, "train", seed=3, horizons=[4])[0]
    slate = env.slate(task, 0)
    demo = env.demonstration(task, slate, [slate.oracle], np.random.default_rng(0))
    lines = [ln for ln in demo.splitlines() if ln.startswith("step")]
    assert len(lines) == 4 and all(ln.split()[-6] == ";" and set(ln.split()[-5:]) <= set(NOTE_WORDS) for ln in lines)
    assert env.score(task, slate, demo).success
    for seed in range(1, 6):  # any other words of the note vocabulary: the same verdict
        rng = np.random.default_rng(seed)
        other = re.sub(r"; ((\w+ ?){5})", lambda m: "; " + " ".join(rng.choice(NOTE_WORDS, 5)), demo)
        assert other != demo and env.score(task, slate, other).success
    # a note of the wrong length, a word outside the vocabulary or no note: the line is wrong
    for bad in (demo.replace("; ", "; alpha ", 1), re.sub(r"; (\w+)", "; ledger", demo, count=1),
                re.sub(r" ; (\w+ ?){5}", "", demo, count=1)):
        assert not env.score(task, slate, bad).success
    # a misleading read still fails whatever its notes say
    mis = env.demonstration(task, slate, [slate.of("misleading")[0]], np.random.default_rng(0))
    assert not env.score(task, slate, mis).success
    # the note words are policy tokens of their own type, and the plain env's demonstrations have none
    assert "note" in token_types(demo.split())
    assert ";" not in SkillSlateEnv().demonstration(task, slate, [slate.oracle])
    assert set(NOTE_WORDS) <= set(env.vocabulary()) and not set(NOTE_WORDS) & set(SkillSlateEnv().vocabulary())


@pytest.fixture(scope="module")
def sampled():
    from skillgate_lib.policy.models import load_policy

    torch.manual_seed(0)
    model, tokenizer = load_policy("tiny")
    env = regimes.get("paper").env()
    tasks = env.sample_tasks(3, "train", seed=0)
    items = [(t, env.slate(t, 0), g) for g, t in enumerate(tasks) for _ in range(4)]
    episodes = generate(model, tokenizer, env, items, 160, 1.0, torch.Generator().manual_seed(0))
    return model, tokenizer, env, episodes


def test_generation_logs_each_policy_tokens_weight_and_the_rows_carry_the_sums(sampled):
    _, _, _, episodes = sampled
    for e in episodes:
        assert len(e.grad_norms) == len(e.response_ids)
        assert all(g == 0.0 for g, m in zip(e.grad_norms, e.policy_mask) if not m)  # inserted text: no loss
        assert all(0.0 <= g < math.sqrt(2) for g in e.grad_norms)
    rows = episode_rows(episodes, 1, "train", "outcome")
    for e, r in zip(episodes, rows):
        expected = sum(e.grad_norms[t] for s in e.read_spans for t in range(s.name_start, s.name_end))
        assert r["grad_weight_sel"] == pytest.approx(expected)
        assert r["grad_weight_all"] == pytest.approx(sum(e.grad_norms))
        assert 0 <= r["grad_weight_sel"] <= r["grad_weight_all"]
    unlogged = Episode(episodes[0].task, episodes[0].slate, 0, [1], response_ids=[5, 6], policy_mask=[True, True])
    assert unlogged.grad_weights() is None


def test_the_proxy_equals_the_teacher_forced_one_and_tracks_the_parameter_gradient(sampled):
    model, tokenizer, _, episodes = sampled
    from skillgate_lib.runs.train import TrainConfig, setup_training

    tr = setup_training(model, TrainConfig(regime="paper"))
    tokens, rollouts = parameter_gradients(tr.model, tr.params, episodes[:4], tokenizer.pad_token_id)
    assert len(tokens) == sum(e.policy_tokens for e in episodes[:4])
    assert (tokens["g"] - tokens["g_sampled"]).abs().max() < 1e-4  # the logged proxy is the forward's
    s = proxy_summary(tokens, rollouts)
    assert s["rank_corr"] > 0.5  # an uncertain token pulls harder on the parameters too
    assert 0 < s["median_share_loss"] < 1 and 0 < s["median_share_summed"] < 1
    # the base model stays frozen: only LoRA parameters were asked for gradients
    assert all("lora" in n for n, p in tr.model.named_parameters() if p.requires_grad)


def test_the_audit_reports_gradient_share_by_horizon_and_old_runs_still_audit(sampled, tmp_path):
    _, _, _, episodes = sampled
    writer = logs.RunWriter(tmp_path / "run")
    writer.write_config({"kind": "test"})
    rows = episode_rows(episodes, 1, "train", "outcome")
    writer.write_trajectories(rows, step=1, split="train")
    result = run_audit(tmp_path / "run", n_boot=50)
    assert result.n_grad == len(rows)
    table = result.summary_table()
    df = pd.DataFrame(rows)
    by_h = (df["grad_weight_sel"] / df["grad_weight_all"]).groupby(df["horizon"]).median()
    for _, b in result.bins.iterrows():
        assert b["gshare_median"] == pytest.approx(by_h[b["h_min"]], rel=1e-9)
    assert "gshare_median" in table.columns and "Gradient Share" in report(result)
    # a run written before the columns existed: Share as before, a line saying why not
    old_rows = [{k: v for k, v in r.items() if not k.startswith("grad_weight")} for r in rows]
    old_writer = logs.RunWriter(tmp_path / "old")
    old_writer.write_config({"kind": "test"})
    part = old_writer.write_trajectories(old_rows, step=1, split="train")
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(part).drop_columns(list(logs.OPTIONAL_COLUMNS)), part)  # as the kit wrote before them
    old = run_audit(tmp_path / "old", n_boot=50)
    assert old.n_grad == 0 and old.bins["gshare_median"].isna().all() and math.isnan(old.grad_dilution)
    assert "no gradient weights" in report(old)
    assert old.bins["share_median"].notna().all()


def test_a_malformed_gradient_weight_is_refused_naming_the_row(sampled):
    _, _, _, episodes = sampled
    rows = episode_rows(episodes, 1, "train", "outcome")
    rows[2]["grad_weight_sel"] = rows[2]["grad_weight_all"] + 1.0
    with pytest.raises(logs.ArtifactError, match="row 2: fields 'grad_weight_sel'"):
        logs.validate_trajectories(pd.DataFrame(rows))

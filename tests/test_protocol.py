"""Every arm as the reference trains it, the regimes' knobs, and where the selector's gradient lands."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from skillgate_lib import credit, methods
from skillgate_lib.env import SkillSlateEnv, display_name, family_tables, lookalike_tables, regimes, run_chain
from skillgate_lib.policy.batching import pack, response_logprobs
from skillgate_lib.policy.models import load_policy
from skillgate_lib.runs import probe, train
from skillgate_lib.runs.records import credit_inputs


@pytest.fixture(scope="module")
def warm():
    return load_policy("tiny")


def _cfg(tmp_path, **over):
    base = dict(model="tiny", steps=1, prompts_per_step=2, group_size=4, eval_tasks=8, threads=1,
                run_dir=str(tmp_path / "run"), lr=1e-2)
    base.update(over)
    return train.TrainConfig(**base)


RL_ARMS = [m.name for m in methods.METHODS.values() if m.trainable and not m.separate_finetune]


@pytest.mark.parametrize("method", RL_ARMS)
def test_every_rl_arm_filters_all_equal_groups_and_refills(method, tmp_path):
    """The reference's dynamic sampling in every RL arm: only mixed groups reach the update, and
    fresh prompts are drawn (up to max_draws rounds) until prompts_per_step groups are kept."""
    base, tokenizer = load_policy("tiny")  # a fresh base: LoRA is put on it
    cfg = _cfg(tmp_path, method=method, max_draws=4)
    model, params, opt, ccfg, values = train.setup_training(base, cfg)
    env = train.make_env(cfg)
    for step in range(2):
        episodes, cr, _, row, _ = train.grpo_step(model, tokenizer, env, opt, params, cfg, ccfg, step, values)
        groups = {}
        for e in episodes:
            groups.setdefault(e.group, set()).add(e.outcome.reward)
        assert all(len(r) > 1 for r in groups.values()), "an all-equal group reached the update"
        assert len(groups) == row["groups/kept"] <= cfg.prompts_per_step
        assert row["groups/sampled"] % cfg.prompts_per_step == 0
        draws = row["groups/sampled"] // cfg.prompts_per_step
        # it draws every round when the batch is not full, and stops as soon as it is
        assert draws == cfg.max_draws if row["groups/kept"] < cfg.prompts_per_step else 1 <= draws <= cfg.max_draws
        if step == 0 and row["groups/kept"] == cfg.prompts_per_step and draws > 1:
            short = train.TrainConfig(**{**vars(cfg), "max_draws": draws - 1})
            assert train.sample_batch(model, tokenizer, env, short, step)[2]["groups/kept"] < cfg.prompts_per_step
        assert row["groups/filtered"] + row["groups/surplus"] == row["groups/sampled"] - row["groups/kept"]
        if cr is not None:  # nothing left to filter inside the assigner
            assert cr.groups_filtered == 0


def test_without_the_filter_one_draw_is_trained_as_drawn(warm, tmp_path):
    base, tokenizer = warm
    cfg = _cfg(tmp_path, method="outcome", filter_groups=False)
    episodes, drawn, stats = train.sample_batch(base, tokenizer, train.make_env(cfg), cfg, step=0)
    assert episodes == drawn and len(episodes) == cfg.prompts_per_step * cfg.group_size
    assert stats["groups/sampled"] == stats["groups/kept"] == cfg.prompts_per_step


def test_selector_weights_land_on_the_log_probs_of_the_sampled_name_tokens(warm):
    """The selector channel's weight sits on the positions whose log-probabilities are those of the
    name words the policy sampled: the spans hold exactly the name's token ids (shifted by one
    position they do not), and the update's log-prob at a position is that of the sampled token
    given everything before it (a full forward's)."""
    base, tokenizer = warm
    env = SkillSlateEnv()
    cfg = train.TrainConfig(model="tiny", prompts_per_step=4, group_size=4, run_dir="unused")
    from skillgate_lib.policy.rollout import generate

    episodes = generate(base, tokenizer, env, train.step_items(env, cfg, 0), 160, 1.0, torch.Generator().manual_seed(0))
    batch = pack(episodes, tokenizer.pad_token_id)
    cr = credit.assign("selector_only", credit_inputs(episodes, batch), credit.CreditConfig(filter_groups=False))
    with torch.no_grad():
        logp = response_logprobs(base, batch)
        full = torch.log_softmax(base(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                      position_ids=batch["position_ids"]).logits.float(), -1)
    P = batch["input_ids"].shape[1] - batch["response_ids"].shape[1]
    checked = 0
    for i, e in enumerate(episodes):
        for span, name in zip(e.read_spans, e.read_names):
            words = tokenizer(display_name(name), add_special_tokens=False)["input_ids"]
            for shift, expect in ((0, True), (1, False)):
                lo, hi = span.name_start + shift, span.name_end + shift
                ids = batch["response_ids"][i, lo:hi].tolist()
                manual = [full[i, P + t - 1, batch["response_ids"][i, t]].item() for t in range(lo, hi)]
                assert (ids == words) is expect
                assert torch.allclose(logp[i, lo:hi], torch.tensor(manual), atol=1e-4)
            on = cr.weights[i] > 0
            assert set(torch.nonzero(on).flatten().tolist()) <= {
                t for s in e.read_spans for t in range(s.name_start, s.name_end)}
            checked += 1
    assert checked >= 8 and (cr.weights > 0).any()


def test_lookalike_agreement_sets_the_share_of_agreeing_keys_and_misleading_success():
    assert lookalike_tables("ledger", "credit", 0.0) == family_tables("ledger", "credit")[0]
    agree = []
    for dom, fams in (("ledger", ("credit", "debit", "rebate")), ("cipher", ("shift", "triad")), ("filter", ("upper",))):
        for fam in fams:
            t = lookalike_tables(dom, fam, 0.5)
            vs = list(t)
            agree += [np.mean([t[a][k] == t[b][k] for k in t[a]]) for i, a in enumerate(vs) for b in vs[i + 1:]]
    assert 0.35 < np.mean(agree) < 0.65  # expected 0.5, over 6 families x 15 pairs x 7-10 keys
    with pytest.raises(ValueError, match="lookalike_agreement"):
        lookalike_tables("ledger", "credit", 1.5)
    # The verifier scores a look-alike's demonstration a success exactly when its chain is the oracle's.
    env = SkillSlateEnv(lookalike_agreement=0.5)
    wins = 0
    for task in env.sample_tasks(60, "train", seed=1, horizons=[1, 2]):
        slate = env.slate(task, seed=0)
        wrong = next(c.name for c in slate.candidates if c.category == "misleading")
        same = run_chain(env.tables[wrong], task.start, task.horizon) == run_chain(env.tables[task.oracle], task.start,
                                                                                 task.horizon)
        ok = env.score(task, slate, env.demonstration(task, slate, [wrong])).success
        assert ok == same
        wins += ok
    assert 0 < wins < 60
    assert env.library[wrong].body != SkillSlateEnv().library[wrong].body


def test_regime_presets_resolve_into_the_run_config(tmp_path):
    cfg = _cfg(tmp_path, regime="paper")
    p = regimes.get("paper")
    assert (cfg.step_failure, cfg.lookalike_agreement, cfg.horizons) == (p.step_failure, p.lookalike_agreement,
                                                                         p.horizons)
    assert _cfg(tmp_path, regime="paper", step_failure=0.0).step_failure == 0.0  # an explicit knob wins
    env, eval_env = train.make_env(cfg), train.make_env(cfg, train=False)
    assert env.step_failure == eval_env.step_failure == p.step_failure  # alike in training and evaluation
    assert env.lookalike_agreement == p.lookalike_agreement and env.horizons == p.horizons
    with pytest.raises(ValueError, match="unknown regime 'hard'; choose one of: easy"):
        _cfg(tmp_path, regime="hard")
    record = json.loads(json.dumps(train._config_record(cfg)))
    assert record["regime"] == "paper" and record["lookalike_agreement"] == p.lookalike_agreement


def test_skill_free_trains_without_the_slate_and_is_evaluated_with_it(tmp_path):
    cfg = _cfg(tmp_path, method="skill_free")
    assert not train.make_env(cfg).show_slate and train.make_env(cfg, train=False).show_slate


def test_selection_bc_is_a_supervised_finetune_of_the_whole_read_call(tmp_path, monkeypatch):
    base, tokenizer = load_policy("tiny")
    cfg = _cfg(tmp_path, method="selection_bc")
    assert methods.get("selection_bc").separate_finetune and methods.get("selection_bc_rl").supervised_term
    model, params, opt, *_ = train.setup_training(base, cfg)
    env = train.make_env(cfg)
    task = env.sample_tasks(1, "train", seed=0)[0]
    slate = env.slate(task, seed=0)
    n_call = len(tokenizer(f"<read> {display_name(slate.oracle)} </read>", add_special_tokens=False)["input_ids"])
    seen = {}
    real_pack = train.pack

    def spy(episodes, pad):
        seen["targets"] = [[t for t, m in zip(e.response_ids, e.policy_mask) if m] for e in episodes]
        return real_pack(episodes, pad)

    def ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    monkeypatch.setattr(train, "pack", spy)
    train.selection_ce(model, tokenizer, env, [(task, slate)], whole_call=True)
    assert seen["targets"] == [ids(f"<read> {display_name(slate.oracle)} </read>")]  # opener, name, closer
    assert len(seen["targets"][0]) == n_call
    train.selection_ce(model, tokenizer, env, [(task, slate)])
    assert seen["targets"] == [ids(display_name(slate.oracle))]  # the ablation's term: the name words only
    monkeypatch.undo()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    _, cr, _, row, _ = train.sft_step(model, tokenizer, env, opt, params, cfg, step=0)
    assert cr is None and row["loss"] > 0
    after = dict(model.named_parameters())
    assert any(not torch.equal(before[n], after[n]) for n in before if "lora_B" in n)
    assert all(torch.equal(before[n], after[n]) for n in before if "lora_" not in n)


def test_probe_audits_the_warm_starts_outcome_rollouts_in_a_regime(tmp_path):
    from skillgate_lib import logs

    regime = regimes.get("paper")
    result = probe.probe(regime, tmp_path / "probe", n_groups=4, group_size=4, threads=1, chunk=2)
    config = logs.read_config(tmp_path / "probe")
    assert config["regime"] == "paper" and config["lookalike_agreement"] == regime.lookalike_agreement
    assert result.n_rows == 16
    summary = probe.probe_summary(result)
    assert summary["n"] == 16 and 0.0 < summary["share_median_long"] <= summary["share_median_short"] < 1.0
    with pytest.raises(FileExistsError, match="already holds a probe"):
        probe.probe(regime, tmp_path / "probe", n_groups=1, group_size=2)
    with pytest.raises(ValueError, match="unknown regime 'x'; choose one of: easy, noisy, paper"):
        regimes.get("x")


@pytest.mark.parametrize("filter_groups", [True, False])
def test_the_trajectory_log_holds_every_trained_and_every_filtered_group_once(filter_groups, tmp_path):
    from skillgate_lib import logs

    cfg = _cfg(tmp_path, method="outcome", steps=2, log_train_every=1, eval_every=2, filter_groups=filter_groups)
    metrics = train.train(cfg, progress=False)
    table = logs.read_run(tmp_path / "run", split="train")
    rows = metrics.query("split == 'train'").set_index("step")
    for step, sub in table.groupby("step"):
        sizes = sub.groupby("group_id").size()
        assert (sizes == cfg.group_size).all(), "a group logged twice or in part"
        agree = sub.groupby("group_id")["reward"].agg(lambda r: r.max() == r.min())
        trained = agree.index[~agree] if filter_groups else agree.index
        assert len(trained) == rows.loc[step, "groups/kept"]
        assert (sub[sub["group_id"].isin(agree.index[agree])]["adv_exec"] == 0).all()
        if filter_groups:  # the all-equal groups drawn are logged, with no credit; surplus mixed groups are not
            assert (~agree).sum() == rows.loc[step, "groups/kept"] and agree.sum() == rows.loc[step, "groups/filtered"]


def test_a_resumed_run_with_dynamic_sampling_draws_what_the_uninterrupted_run_drew(tmp_path):
    over = dict(method="utility", regime="paper", steps=3, log_train_every=1, eval_every=3, checkpoint_every=1)
    full = train.train(_cfg(tmp_path / "a", **over), progress=False)
    train.train(_cfg(tmp_path / "b", **{**over, "steps": 2}), progress=False)
    resumed = train.train(_cfg(tmp_path / "b", **over), progress=False, resume=True)
    cols = [c for c in full.columns if not c.startswith("time/")]
    a = full.query("split == 'train'")[cols].reset_index(drop=True)
    b = resumed.query("split == 'train'")[cols].reset_index(drop=True)
    assert (a["groups/sampled"] > a["groups/kept"]).any(), "no step filtered anything: the test shows nothing"
    assert a.equals(b)


def test_a_table_seed_changes_the_values_and_nothing_else():
    """Another table set: the same skills, names, splits and chains of keys, other values; the
    oracle's demonstration still succeeds and a look-alike's still fails; seed 0 is the library."""
    base, other = SkillSlateEnv(), SkillSlateEnv(table_seed=3)
    assert SkillSlateEnv(table_seed=0).library == base.library
    assert set(other.library) == set(base.library) and other.index == base.index
    changed = [n for n in base.tables if other.tables[n] != base.tables[n]]
    assert len(changed) == len(base.tables)
    for variants in (family_tables("ledger", "credit", 3)[0], lookalike_tables("ledger", "credit", 0.3, 3)):
        assert variants != family_tables("ledger", "credit")[0]
    for task in base.sample_tasks(40, "train", seed=2):
        moved = other.make_task(task.domain, task.family, task.variant, task.start, task.horizon)
        assert moved.task_id == task.task_id
        slate = other.slate(moved, seed=0)
        assert other.score(moved, slate, other.demonstration(moved, slate, [moved.oracle])).success
        wrong = next(c.name for c in slate.candidates if c.category == "misleading")
        assert not other.score(moved, slate, other.demonstration(moved, slate, [wrong])).success
    with pytest.raises(ValueError, match="table_seed"):
        SkillSlateEnv(table_seed=-1)


def test_a_warm_start_on_several_table_sets_trains_and_records_them(tmp_path):
    import json

    from skillgate_lib.policy.warmstart import WarmStartConfig, warmstart

    warmstart(WarmStartConfig(steps=2, batch_size=4, table_seeds=2, out=str(tmp_path), threads=1), progress=False)
    assert json.loads((tmp_path / "warmstart_config.json").read_text())["table_seeds"] == 2
    with pytest.raises(ValueError, match="table_seeds"):
        WarmStartConfig(table_seeds=-1)


def test_step_echo_lengthens_every_step_line_and_the_verifier_checks_it():
    """``step_echo`` restates the task, less its cue, after each lookup (9 policy tokens per echo): the oracle's
    demonstration still succeeds, a wrong echo fails that step only, and the read's name becomes
    a smaller share of the policy tokens (Share falls about 1 / H faster)."""
    from skillgate_lib.env import load_tokenizer

    tok = load_tokenizer()
    plain, echo = SkillSlateEnv(), SkillSlateEnv(step_echo=4)
    for task in plain.sample_tasks(30, "train", seed=4, horizons=range(2, 9)):
        long = echo.make_task(task.domain, task.family, task.variant, task.start, task.horizon)
        assert long.task_id == task.task_id and long.gold_answer == task.gold_answer
        for short_line, long_line in zip(task.gold_steps, long.gold_steps):
            assert long_line.startswith(short_line + " , ") and len(long_line.split()) == 5 + 4 * 9
            assert long_line.endswith(f"{task.domain} {task.family} , start {task.start} , steps {task.horizon}")
            assert f"mark {task.variant}" not in long_line  # the cue stays the selector's
        slate = echo.slate(long, seed=0)
        good = echo.demonstration(long, slate, [long.oracle])
        out = echo.score(long, slate, good)
        assert out.success and out.steps_ok == out.steps_correct == long.horizon
        # the short form is no longer a right answer, and a slip in one echo costs that step
        assert not echo.score(long, slate, plain.demonstration(task, slate, [task.oracle])).success
        k = long.horizon // 2
        slip = echo.score(long, slate, good.replace(long.gold_steps[k], long.gold_steps[k].replace(" , start", " , steps", 1)))
        assert not slip.success and slip.steps_ok == long.horizon - 1
        wrong = next(c.name for c in slate.candidates if c.category == "misleading")
        assert not echo.score(long, slate, echo.demonstration(long, slate, [wrong])).success
        n_short = len(tok(plain.demonstration(task, slate, [task.oracle]))["input_ids"])
        assert len(tok(good)["input_ids"]) == n_short + 36 * long.horizon
        assert tok.unk_token_id not in tok(good)["input_ids"]
    assert echo.max_response_chars == 5 * plain.max_response_chars
    with pytest.raises(ValueError, match="step_echo"):
        SkillSlateEnv(step_echo=-1)


def test_the_step_echo_knob_reaches_the_run_config_and_both_environments(tmp_path):
    cfg = _cfg(tmp_path, regime="paper", step_echo=2)
    assert train.make_env(cfg).step_echo == train.make_env(cfg, train=False).step_echo == 2
    assert json.loads(json.dumps(train._config_record(cfg)))["step_echo"] == 2
    assert _cfg(tmp_path, regime="paper").step_echo == regimes.get("paper").step_echo == 0


def test_a_warm_start_checkpoint_that_predates_a_field_resumes_at_its_default():
    from dataclasses import asdict

    from skillgate_lib.policy.warmstart import WarmStartConfig, checkpoint_diff

    now = asdict(WarmStartConfig(steps=10, threads=1, out="elsewhere"))
    saved = json.loads(json.dumps({k: v for k, v in asdict(WarmStartConfig(steps=10)).items()
                                   if k not in ("value_weight", "step_echo")}))  # as a checkpoint stores it
    assert checkpoint_diff(saved, now) == {}
    assert checkpoint_diff(saved, {**now, "step_echo": 4}) == {"step_echo": (0, 4)}
    assert checkpoint_diff({**saved, "lr": 1e-3}, now) == {"lr": (1e-3, now["lr"])}

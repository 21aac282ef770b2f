"""The skill-slate environment: tables, verifier, episode protocol, spans, splits and scripted policies."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from skillgate_lib.env import (
    DOMAINS,
    POLICIES,
    VARIANTS,
    EpisodeError,
    SkillSlateEnv,
    cue_selector,
    display_name,
    family_tables,
    load_tokenizer,
    mixed_reads,
    name_match_selector,
    oracle_policy,
    parse_table,
    run_chain,
    token_spans,
)
from skillgate_lib.env.skills import Candidate, Slate
from skillgate_lib.logs import CATEGORIES


@pytest.fixture(scope="module")
def env():
    return SkillSlateEnv()


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture(scope="module")
def episodes(env):
    tasks = env.sample_tasks(1000, "train", seed=0)
    return [(t, env.slate(t, seed=1)) for t in tasks]


def _read(name: str) -> str:
    return f"<read> {display_name(name)} </read>"


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_variants_disagree_on_every_key(domain):
    for family in DOMAINS[domain].families:
        tables, unused = family_tables(domain, family)
        assert list(tables) == list(VARIANTS)
        for key in DOMAINS[domain].symbols:
            values = [t[key] for t in tables.values()] + [unused[key]]
            assert len(set(values)) == len(values), (domain, family, key)
        for t in tables.values():
            assert sorted(t.values()) == sorted(DOMAINS[domain].symbols)  # a permutation


def test_known_chain_and_parse_errors():
    table = {"0": "3", "3": "1", "1": "0", **{d: d for d in "2456789"}}
    assert run_chain(table, "0", 4) == (("step 1 : 0 3", "step 2 : 3 1", "step 3 : 1 0", "step 4 : 0 3"), "3")
    body = " ".join(f"{k}>{v}" for k, v in table.items())
    assert parse_table(body, "ledger") == table
    with pytest.raises(ValueError, match="'x>1'"):
        parse_table(body + " x>1", "ledger")
    with pytest.raises(ValueError, match="twice"):
        parse_table(body + " 0>1", "ledger")
    with pytest.raises(ValueError, match="no entry for key"):
        parse_table("0>1", "ledger")


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_verifier_per_domain(env, domain):
    for task in env.sample_tasks(20, "train", seed=5, domains=[domain], horizons=range(2, 9)):
        slate = env.slate(task, 0)
        good = oracle_policy(env, task, slate)
        out = env.score(task, slate, good)
        assert out.success and out.reward == 1.0 and out.steps_correct == out.steps_ok == task.horizon
        assert out.answer == task.gold_answer and len(task.gold_steps) == task.horizon and not out.malformed
        k = len(task.gold_steps) // 2
        head, last = task.gold_steps[k].rsplit(" ", 1)
        wrong = next(s for s in DOMAINS[domain].symbols if s != last)
        bad = env.score(task, slate, good.replace(task.gold_steps[k], f"{head} {wrong}", 1))
        assert not bad.success and bad.reward == 0.0 and bad.steps_correct == k
        # one wrong lookup: only that step (and the next, whose input no longer continues the chain) is lost
        assert bad.steps_ok == task.horizon - 1 - (k + 1 < task.horizon)
        assert not env.score(task, slate, good.replace(f"<answer> {task.gold_answer} </answer>", "<answer> x </answer>")).success
        assert not env.score(task, slate, good.replace(task.gold_steps[-1] + "\n", "")).success  # a step missing


def test_oracle_scores_100_percent_at_every_horizon(env):
    for h in range(1, 9):
        tasks = env.sample_tasks(40, "eval", seed=h, horizons=[h])
        assert all(env.score(t, env.slate(t, 0), oracle_policy(env, t, env.slate(t, 0))).success for t in tasks)


def test_scripted_policy_rates(env, episodes):
    rng = np.random.default_rng(0)
    rate = {k: np.mean([env.score(t, s, POLICIES[k](env, t, s, rng)).success for t, s in episodes])
            for k in ("oracle", "no-read", "misleading-read", "random-read", "cue")}
    assert rate["oracle"] == rate["cue"] == 1.0
    assert rate["no-read"] == 0.0 and rate["misleading-read"] == 0.0  # look-alike tables differ on every key
    assert 1 / 16 - 0.03 < rate["random-read"] < 1 / 16 + 0.05  # the oracle, plus rare coincidences of relevant tables


def test_cue_reads_oracle_always_name_match_falls_for_misleading(episodes):
    assert all(cue_selector(t, s) == t.oracle for t, s in episodes)
    cats = collections.Counter(s.category(name_match_selector(t, s)) for t, s in episodes)
    assert set(cats) <= {"oracle", "misleading"}
    assert cats["misleading"] / len(episodes) > 0.75  # 5 of the 6 tied look-alikes are misleading


def test_step_failure_matches_theory():
    env = SkillSlateEnv(step_failure=0.1)
    for h in (1, 4, 8):
        tasks = env.sample_tasks(400, "train", seed=10 + h, horizons=[h])
        rng = np.random.default_rng(h)
        measured = np.mean([env.score(t, env.slate(t, 0), oracle_policy(env, t, env.slate(t, 0)), rng).success for t in tasks])
        expected = 0.9**h
        assert abs(measured - expected) < 4 * np.sqrt(expected * (1 - expected) / len(tasks))


def test_multiple_reads_execution_follows_the_last_body(env, episodes):
    task, slate = episodes[0]
    mis, rel, irr = slate.of("misleading")[0], slate.of("relevant")[0], slate.of("irrelevant")[0]
    for reads in ([mis, task.oracle], [rel, mis, task.oracle], [irr, rel, mis, task.oracle]):
        out = env.score(task, slate, env.demonstration(task, slate, reads))
        assert out.success and [r.name for r in out.reads] == reads and len(out.tool_spans) == len(reads)
        assert [r.category for r in out.reads] == [slate.category(n) for n in reads]
        assert out.last_served.category == "oracle"
    for reads in ([task.oracle, mis], [mis, rel], [task.oracle, mis, rel, irr, task.oracle]):  # 5th read: past max_reads
        out = env.score(task, slate, env.demonstration(task, slate, reads))
        assert not out.malformed and out.last_served.name == reads[min(len(reads), 4) - 1]
    over = env.score(task, slate, env.demonstration(task, slate, [mis, rel, irr, mis, task.oracle]))
    assert not over.success and [r.served for r in over.reads] == [True] * 4 + [False]


def test_invalid_and_malformed_reads(env, episodes):
    task, slate = episodes[1]
    off = next(n for n in env.library if slate.category(n) is None)
    out = env.score(task, slate, env.demonstration(task, slate, [off, task.oracle]))
    assert [r.category for r in out.reads] == ["invalid", "oracle"] and out.reward == 0.0 and not out.malformed
    assert out.reads[0].category in CATEGORIES and not out.reads[0].served
    extra = env.score(task, slate, env.demonstration(task, slate, [f"{task.oracle}-extra"]))
    assert extra.reads[0].category == "invalid" and extra.reward == 0.0
    good = oracle_policy(env, task, slate)
    for text in ["", "garbage", "<read>", _read(task.oracle), "<read> </read>", good.replace("</body>", "", 1),
                 good.replace("<answer>", ""), good + " trailing", good.replace("</read>", "</read> </read>", 1),
                 good + "\n" + _read(task.oracle), "x" * 5000]:
        o = env.score(task, slate, text)
        assert o.reward == 0.0 and o.malformed, text[:60]
    assert env.score(task, slate, good + " </s>").success  # an eos the decoder kept is fine
    assert env.score(task, slate, " ".join(good.split())).success  # whitespace-insensitive


def test_tool_response(env, episodes):
    task, slate = episodes[2]
    mis = slate.of("misleading")[0]
    body = env.tool_response(task, slate, _read(task.oracle))
    assert body == " <body> " + env.library[task.oracle].body + " </body>"
    assert env.tool_response(task, slate, f"{_read(task.oracle)}{body}\n{_read(mis)}").endswith(
        env.library[mis].body + " </body>")
    assert env.tool_response(task, slate, "<read> nope </read>") == " <error> unknown skill </error>"
    assert env.tool_response(task, slate, "<read> </read>") == " <error> bad read </error>"
    assert env.tool_response(task, slate, "step 1 : 3") is None
    assert env.tool_response(task, slate, "x </read>") is None
    many = "".join(f"{_read(mis)} <body> . </body> " for _ in range(4)) + _read(mis)
    assert env.tool_response(task, slate, many) == " <error> read limit </error>"


def test_spans_decode_to_the_skill_name(env, tok, episodes):
    for task, slate in episodes[:50]:
        reads = [slate.of("misleading")[0], task.oracle]
        text = env.demonstration(task, slate, reads)
        out = env.score(task, slate, text)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids
        assert env.score(task, slate, tok.decode(ids + [tok.eos_token_id], skip_special_tokens=True)).success
        tspans = token_spans(tok, text, [(r.char_start, r.char_end) for r in out.reads])
        for r, (a, b) in zip(out.reads, tspans):
            assert text[r.char_start : r.char_end] == display_name(r.name) == tok.decode(ids[a:b]) and b - a == 3
        for (s, e), a in zip(out.tool_spans, reads):
            assert text[s:e] == env.tool_response(task, slate, _read(a)).strip()
        # tokenizing the pieces a rollout loop appends gives the tokens of the whole response
        pieces = [text[: out.tool_spans[0][0]], text[out.tool_spans[0][0] :]]
        assert sum((tok(p, add_special_tokens=False)["input_ids"] for p in pieces), []) == ids


def test_prompt_and_lengths(env, tok, episodes):
    for task, slate in episodes[:200]:
        p = env.prompt(task, slate)
        assert p.endswith(task.text + "\nrespond :")
        assert all(f"{display_name(c.name)} : {c.description}" in p for c in slate.candidates)
        ids = tok(p, add_special_tokens=False)["input_ids"]
        assert len(ids) <= 130 and tok.unk_token_id not in ids
        assert all(len(line.split()) == 5 for line in task.gold_steps)
    assert max(len(s.body.split()) for s in env.library.values()) == 10


def test_skill_free_env_hides_the_slate_and_refuses_reads(episodes):
    env = SkillSlateEnv(show_slate=False)
    task, slate = episodes[0]
    assert env.prompt(task, slate) == task.text + "\nrespond :"
    assert env.tool_response(task, slate, _read(task.oracle)) == " <error> unknown skill </error>"
    assert not env.score(task, slate, env.demonstration(task, slate, [task.oracle])).success


def test_mixed_reads_follow_the_fixed_mix(episodes):
    rng = np.random.default_rng(0)
    reads = [mixed_reads(s, rng) for _, s in episodes]
    counts = collections.Counter(len(r) for r in reads)
    assert set(counts) == {1, 2, 3} and abs(counts[1] / len(reads) - 0.35) < 0.05
    cats = [s.category(n) for (_, s), r in zip(episodes, reads) for n in r]
    assert set(cats) == {"oracle", "misleading"}
    first = [s.category(r[0]) for (_, s), r in zip(episodes, reads)]
    assert abs(first.count("oracle") / len(first) - 0.3) < 0.05  # each read: the oracle w.p. 0.3 until it is read
    assert all(len(set(r)) == len(r) for r in reads)


def test_seeded_determinism(env):
    a, b = env.sample_tasks(30, "train", seed=4), env.sample_tasks(30, "train", seed=4)
    assert a == b and a != env.sample_tasks(30, "train", seed=5)
    assert [env.slate(t, 2) for t in a] == [env.slate(t, 2) for t in b]
    assert env.slate(a[0], 2) != env.slate(a[0], 3)


def test_splits_hold_out_skill_start_pairs_and_domains(env):
    train = env.sample_tasks(3000, "train", seed=0)
    evals = env.sample_tasks(3000, "eval", seed=0)
    assert not {(t.oracle, t.start) for t in train} & {(t.oracle, t.start) for t in evals}
    held = SkillSlateEnv(domains=["ledger", "cipher", "grid", "filter"])
    assert {t.domain for t in held.sample_tasks(200, "train", seed=0)} == {"ledger", "cipher", "grid", "filter"}
    assert {t.domain for t in held.sample_tasks(50, "eval", seed=0, domains=["calendar"])} == {"calendar"}
    with pytest.raises(EpisodeError, match="domains"):
        env.sample_tasks(5, "train", seed=0, domains=["chess"])
    with pytest.raises(EpisodeError, match="split"):
        env.sample_tasks(5, "dev", seed=0)
    with pytest.raises(EpisodeError, match="start"):
        env.make_task("ledger", "credit", "amber", "z", 2)


def test_oracle_absent_from_slate_is_an_error(env, episodes):
    task, slate = episodes[3]
    other = episodes[4][0] if episodes[4][0].oracle != task.oracle else episodes[5][0]
    foreign = Slate(tuple(Candidate(c.name, c.description, c.category) for c in slate.candidates))
    for call in (lambda: env.prompt(other, foreign), lambda: env.score(other, foreign, ""),
                 lambda: env.tool_response(other, foreign, ""), lambda: env.demonstration(other, foreign, [])):
        with pytest.raises(EpisodeError, match="'oracle'"):
            call()

"""The skill-slate environment: verifier, episode protocol, spans, splits and scripted policies."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from skillgate_lib.env import (
    DOMAINS, POLICIES, EpisodeError, SkillSlateEnv, cue_selector, load_tokenizer, name_match_selector,
    oracle_policy, token_spans,
)
from skillgate_lib.logs import CATEGORIES
from skillgate_lib.skills import Candidate, Slate


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


def _swap_step(text: str, step_line: str) -> str:
    """The response with the last word of one step line replaced by a wrong value."""
    head, last = step_line.rsplit(" ", 1)
    pool = {"keep": "drop", "drop": "keep"}
    wrong = pool.get(last) or next(w for w in ("0", "1", "a", "b", "mon", "tue") if w != last)
    return text.replace(step_line, f"{head} {wrong}", 1)


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_verifier_per_domain(env, domain):
    for task in env.sample_tasks(20, "train", seed=5, domains=[domain], horizons=range(2, 9)):
        slate = env.slate(task, 0)
        good = oracle_policy(env, task, slate)
        out = env.score(task, slate, good)
        assert out.success and out.reward == 1.0 and out.steps_correct == task.horizon and not out.malformed
        assert out.answer == task.gold_answer and len(task.gold_steps) == task.horizon
        k = len(task.gold_steps) // 2
        bad = env.score(task, slate, _swap_step(good, task.gold_steps[k]))
        assert not bad.success and bad.reward == 0.0 and bad.steps_correct == k
        wrong_answer = good.replace(f"<answer> {task.gold_answer} </answer>", "<answer> x </answer>")
        assert not env.score(task, slate, wrong_answer).success
        assert not env.score(task, slate, good.replace(task.gold_steps[-1] + "\n", "")).success  # a step missing


def test_known_gold_lines(env):
    t = env.make_task("grid", "port", "amber", ("0", "0", "N", "E"), 2)
    p = env.procedures[t.oracle][1]
    # port = turn left: N -> W (column - p), E -> N (row - p), on a 7 x 7 torus
    assert t.gold_steps == (f"step 1 : 0 0 N left {p} = 0 {-p % 7}", f"step 2 : 0 {-p % 7} E left {p} = {-p % 7} {-p % 7}")
    f = env.make_task("filter", "divisor", "jade", ("0", "7", "6"), 3)
    q = env.procedures[f.oracle][1]
    kept = [x for x in ("0", "7", "6") if int(x) % q == 0]
    assert f.gold_answer == " ".join(kept) and f.gold_steps[0] == f"step 1 : 0 div {q} = keep"
    c = env.make_task("calendar", "rewind", "ruby", ("0",), 1)
    r = env.procedures[c.oracle][1]
    assert c.gold_steps == (f"step 1 : mon before {r} = {('mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun')[-r % 7]}",)


def test_oracle_scores_100_percent_at_every_horizon(env):
    for h in range(1, 9):
        tasks = env.sample_tasks(40, "eval", seed=h, horizons=[h])
        assert all(env.score(t, env.slate(t, 0), oracle_policy(env, t, env.slate(t, 0))).success for t in tasks)


def test_scripted_policy_rates(env, episodes):
    rng = np.random.default_rng(0)
    rate = {k: np.mean([env.score(t, s, POLICIES[k](env, t, s, rng)).success for t, s in episodes])
            for k in ("oracle", "no-read", "misleading-read", "random-read", "cue")}
    assert rate["oracle"] == rate["cue"] == 1.0
    assert rate["no-read"] == 0.0 and rate["misleading-read"] == 0.0
    assert abs(rate["random-read"] - 1 / 16) < 0.03


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


def test_multiple_reads(env, episodes):
    task, slate = episodes[0]
    mis, rel, irr = slate.of("misleading")[0], slate.of("relevant")[0], slate.of("irrelevant")[0]
    for reads in ([mis, task.oracle], [task.oracle, mis, rel], [irr, rel, mis, task.oracle]):
        out = env.score(task, slate, env.demonstration(task, slate, reads))
        assert out.success and [r.name for r in out.reads] == reads and len(out.tool_spans) == len(reads)
        assert [r.category for r in out.reads] == [slate.category(n) for n in reads]
    for reads in ([mis, rel], [rel], [irr], [task.oracle, mis, rel, irr, task.oracle]):  # the 5th read is past max_reads
        out = env.score(task, slate, env.demonstration(task, slate, reads))
        assert out.success == (task.oracle in reads[:4]) and not out.malformed
    over = env.score(task, slate, env.demonstration(task, slate, [mis, rel, irr, mis, task.oracle]))
    assert not over.success and [r.served for r in over.reads] == [True] * 4 + [False]


def test_invalid_and_malformed_reads(env, episodes):
    task, slate = episodes[1]
    off = next(n for n in env.library if slate.category(n) is None)
    out = env.score(task, slate, env.demonstration(task, slate, [off, task.oracle]))
    assert [r.category for r in out.reads] == ["invalid", "oracle"] and out.reward == 0.0 and not out.malformed
    assert out.reads[0].category in CATEGORIES and not out.reads[0].served
    two = env.score(task, slate, env.demonstration(task, slate, [f"{task.oracle} extra"]))
    assert two.malformed and two.reads[0].category == "invalid" and two.reward == 0.0
    good = oracle_policy(env, task, slate)
    for text in ["", "garbage", "<read>", f"<read> {task.oracle}", good.replace("</body>", "", 1),
                 good.replace("<answer>", ""), good + " trailing", good.replace("rule", "rules", 1),
                 good + "\n" + f"<read> {task.oracle} </read>", "x" * 5000]:
        o = env.score(task, slate, text)
        assert o.reward == 0.0 and o.malformed
    assert env.score(task, slate, good + " </s>").success  # an eos the decoder kept is fine
    assert env.score(task, slate, " ".join(good.split())).success  # whitespace-insensitive


def test_tool_response(env, episodes):
    task, slate = episodes[2]
    mis = slate.of("misleading")[0]
    body = env.tool_response(task, slate, f"<read> {task.oracle} </read>")
    assert body == " <body> " + env.library[task.oracle].body + " </body>"
    assert env.tool_response(task, slate, f"<read> {task.oracle} </read>{body}\n<read> {mis} </read>").endswith(
        env.library[mis].body + " </body>")
    assert env.tool_response(task, slate, "<read> nope </read>") == " <error> unknown skill </error>"
    assert env.tool_response(task, slate, "<read> a b </read>") == " <error> bad read </error>"
    assert env.tool_response(task, slate, "step 1 : 3") is None
    assert env.tool_response(task, slate, "x </read>") is None
    many = "".join(f"<read> {mis} </read> <body> . </body> " for _ in range(4)) + f"<read> {mis} </read>"
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
            assert text[r.char_start : r.char_end] == r.name == tok.decode(ids[a:b]) and b - a == 1
        for (s, e), a in zip(out.tool_spans, reads):
            assert text[s:e] == env.tool_response(task, slate, f"<read> {a} </read>").strip()
        # tokenizing the pieces a rollout loop appends gives the tokens of the whole response
        pieces = [text[: out.tool_spans[0][0]], text[out.tool_spans[0][0] :]]
        assert sum((tok(p, add_special_tokens=False)["input_ids"] for p in pieces), []) == ids


def test_prompt_and_lengths(env, tok, episodes):
    for task, slate in episodes[:200]:
        p = env.prompt(task, slate)
        assert p.startswith(task.text) and p.endswith("respond :")
        assert all(c.line() in p for c in slate.candidates)
        ids = tok(p, add_special_tokens=False)["input_ids"]
        assert len(ids) <= 200 and tok.unk_token_id not in ids
        assert all(len(line.split()) <= 11 for line in task.gold_steps)
    assert max(len(s.body.split()) for s in env.library.values()) <= 23


def test_seeded_determinism(env):
    a, b = env.sample_tasks(30, "train", seed=4), env.sample_tasks(30, "train", seed=4)
    assert a == b and a != env.sample_tasks(30, "train", seed=5)
    assert [env.slate(t, 2) for t in a] == [env.slate(t, 2) for t in b]
    assert env.slate(a[0], 2) != env.slate(a[0], 3)


def test_splits_are_disjoint_and_domains_held_out(env):
    train = env.sample_tasks(3000, "train", seed=0, horizons=[1, 2])
    evals = env.sample_tasks(3000, "eval", seed=0, horizons=[1, 2])
    assert not {t.task_id for t in train} & {t.task_id for t in evals}
    assert not {(t.domain, t.family, t.variant, t.inputs, t.horizon) for t in train} & {
        (t.domain, t.family, t.variant, t.inputs, t.horizon) for t in evals}
    held = SkillSlateEnv(domains=["ledger", "cipher", "grid", "filter"])
    assert {t.domain for t in held.sample_tasks(200, "train", seed=0)} == {"ledger", "cipher", "grid", "filter"}
    assert {t.domain for t in held.sample_tasks(50, "eval", seed=0, domains=["calendar"])} == {"calendar"}
    with pytest.raises(EpisodeError, match="domains"):
        env.sample_tasks(5, "train", seed=0, domains=["chess"])
    with pytest.raises(EpisodeError, match="split"):
        env.sample_tasks(5, "test", seed=0)


def test_oracle_absent_from_slate_is_an_error(env, episodes):
    task, slate = episodes[3]
    other = episodes[4][0] if episodes[4][0].oracle != task.oracle else episodes[5][0]
    foreign = Slate(tuple(Candidate(c.name, c.description, c.category) for c in slate.candidates))
    for call in (lambda: env.prompt(other, foreign), lambda: env.score(other, foreign, ""),
                 lambda: env.tool_response(other, foreign, ""), lambda: env.demonstration(other, foreign, [])):
        with pytest.raises(EpisodeError, match="'oracle'"):
            call()

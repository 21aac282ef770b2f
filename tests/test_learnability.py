"""Learnability gates of the committed embedded models (issue 10), on a fixed held-out set.

An RL result is only believed when these pass. Both models are sampled at temperature 1
(the kit's evaluation temperature) on the same 256 held-out instances.

* capacity (``tiny-base``, oracle-only demonstrations, never an RL start): the model *can*
  select by the cue and execute by lookup; ``tiny-base`` misses on step accuracy because it
  partly recalls the library's tables, ``tiny-base-lookup`` (retrained on 65 table sets) meets it;
* RL warm start (``tiny``): it executes what it reads but has not learnt the choice.
"""

from __future__ import annotations

import pytest

from skillgate_lib.env import SkillSlateEnv
from skillgate_lib.policy.models import load_policy
from skillgate_lib.runs.evaluate import episode_table, evaluate, summarize

pytestmark = pytest.mark.slow
N_TASKS = 256


@pytest.fixture(scope="module")
def env():
    return SkillSlateEnv()


@pytest.fixture(scope="module")
def base_eval(env):
    model, tokenizer = load_policy("tiny-base")
    episodes = evaluate(model, tokenizer, env, N_TASKS)
    return summarize(episodes), episode_table(episodes)


@pytest.fixture(scope="module")
def lookup_base_eval(env):
    model, tokenizer = load_policy("tiny-base-lookup")
    episodes = evaluate(model, tokenizer, env, N_TASKS)
    return summarize(episodes), episode_table(episodes)


@pytest.fixture(scope="module", params=["tiny", "tiny-lookup"])
def warm_eval(env, request):
    """Each committed RL warm start: ``tiny`` (from tiny-base) and ``tiny-lookup`` (from tiny-base-lookup)."""
    model, tokenizer = load_policy(request.param)
    episodes = evaluate(model, tokenizer, env, N_TASKS)
    return summarize(episodes), episode_table(episodes)


# Measured on the committed tiny-base (stage 3, data/models/tiny-base/README.md) at T = 1 on these
# 256 tasks: oracle-read 100 %, step accuracy after an oracle read 0.945, success at H = 8 86 %
# (stage 1 alone: 13.3 %, 0.85, 3.4 %). Only the step accuracy misses. Strict: passing is news.
@pytest.mark.xfail(strict=True, reason="capacity gate not met: step accuracy after an oracle read 0.945 (< 0.97)")
def test_capacity_model_selects_by_cue_and_executes(base_eval):
    s, df = base_eval
    assert s["eval/oracle_read"] >= 0.95, s["eval/oracle_read"]
    assert s["eval/step_acc"] >= 0.97, s["eval/step_acc"]
    assert df.query("horizon == 8")["success"].mean() >= 0.75


# Measured on the committed tiny-base-lookup (data/models/tiny-base-lookup/README.md) at T = 1 on these
# 256 tasks: oracle-read 100 %, step accuracy after an oracle read 0.990, success at H = 8 86 %.
def test_capacity_gate_holds_for_the_base_trained_on_many_table_sets(lookup_base_eval):
    s, df = lookup_base_eval
    assert s["eval/oracle_read"] >= 0.95, s["eval/oracle_read"]
    assert s["eval/step_acc"] >= 0.97, s["eval/step_acc"]
    assert df.query("horizon == 8")["success"].mean() >= 0.75


def test_warm_start_has_a_selection_problem_left(warm_eval):
    s, _ = warm_eval
    assert 0.25 <= s["eval/oracle_read"] <= 0.45, s["eval/oracle_read"]
    assert 1.5 <= s["eval/reads"] <= 2.5, s["eval/reads"]


def test_warm_start_names_on_slate_skills(warm_eval):
    s, _ = warm_eval
    assert s["eval/invalid_read"] < 0.05, f"off-slate or malformed reads in {s['eval/invalid_read']:.1%}"


def test_warm_start_executes_what_it_reads(warm_eval):
    s, df = warm_eval
    # Per-step accuracy after an oracle read: 0.64-0.74 over sampling seeds (512 held-out tasks,
    # measured with the one-token-per-step decoder and the chunked one side by side), against
    # chance (one symbol in 7-10) for a model that does not look up. (Success when the only read is the oracle at H <= 4 was the gate before;
    # 6-8 such trials in 256 swing from 1/6 to 7/8 with the sampling seed alone.)
    assert s["eval/step_acc"] >= 0.6, s["eval/step_acc"]
    after_misleading = df.query("last_misleading > 0")
    assert len(after_misleading) >= 20 and after_misleading["success"].mean() <= 0.02

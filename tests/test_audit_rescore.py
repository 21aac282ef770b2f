"""``audit --rescore MODEL``: a text log (TRL, verl) gets its gradient weights from the model's per-token distributions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from skillgate_lib import readers
from skillgate_lib.audit.cli import main as audit_main
from skillgate_lib.audit.measures import run_audit
from skillgate_lib.env import regimes
from skillgate_lib.policy.batching import pack, response_logits
from skillgate_lib.policy.gradients import logit_grad_norm
from skillgate_lib.policy.rollout import Episode


def _trl_log(root, env, tokenizer, groups: int = 3, size: int = 4):
    """A TRL completions file of kit episodes: ``groups`` prompts x ``size`` demonstrations, reads of several names."""
    rows = []
    for k, task in enumerate(env.sample_tasks(groups, split="train", seed=0)):
        slate = env.slate(task, seed=k)
        for j in range(size):
            name = [slate.oracle, slate.of("misleading")[0], slate.of("relevant")[0], slate.oracle][j % 4]
            text = env.demonstration(task, slate, [name])
            rows.append({"step": 0, "prompt": env.prompt(task, slate), "completion": text, "correctness": float(j % 2)})
    (root / "completions").mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(root / "completions" / "completions_00000.parquet")
    return root


class _Uniform:
    """A stand-in policy with the same distribution at every token: g is one constant, so Gradient Share equals Share."""

    tokenizer = None
    rows = 0

    def __call__(self, prompt, response):
        self.rows += 1
        return np.full(len(readers.make_tokenizer(None).offsets(response)), 0.7)


def test_a_uniform_policy_gives_gradient_share_equal_to_share(tmp_path):
    from skillgate_lib.policy.models import load_policy

    _, tok = load_policy("tiny")
    log = _trl_log(tmp_path / "run", regimes.get("paper").env(), tok)
    plain = run_audit(log, fmt="trl", n_boot=50)
    assert np.isnan(plain.overall["gshare_median"])  # a text log has no gradient weights of its own
    fake = _Uniform()
    result = run_audit(log, fmt="trl", n_boot=50, rescore=fake)
    assert fake.rows == 12
    assert result.overall["gshare_median"] == pytest.approx(result.overall["share_median"])
    assert result.overall["share_median"] == pytest.approx(plain.overall["share_median"])


def test_the_rescorer_gives_the_models_own_gradient_weights():
    """Per response token, g from the rescorer's one forward equals g from the kit's own update path (packed episode,
    shared-prompt logits) on the same tokens."""
    from skillgate_lib.audit.rescore import Rescorer

    rescorer = Rescorer("tiny", threads=1, progress=False)
    env = regimes.get("paper").env()
    task = env.sample_tasks(1, split="train", seed=3)[0]
    slate = env.slate(task, seed=3)
    prompt, response = env.prompt(task, slate), env.demonstration(task, slate, [slate.oracle])
    g = rescorer(prompt, response)
    tok = rescorer.tokenizer
    ep = Episode(task, slate, 0, tok(prompt, add_special_tokens=False)["input_ids"],
                 response_ids=tok(response, add_special_tokens=False)["input_ids"])
    ep.policy_mask = [True] * len(ep.response_ids)
    packed = pack([ep], tok.pad_token_id)
    with torch.no_grad():
        want = logit_grad_norm(response_logits(rescorer.model, packed, share_prompts=False)[0], packed["response_ids"][0])
    assert len(g) == len(ep.response_ids) and rescorer.rows == 1
    np.testing.assert_allclose(g, want.numpy(), atol=1e-5)
    assert ((g >= 0) & (g < np.sqrt(2))).all() and g.std() > 0


def test_audit_rescore_reports_gradient_share_for_a_trl_log(tmp_path, capsys):
    from skillgate_lib.policy.models import load_policy

    _, tok = load_policy("tiny")
    log = _trl_log(tmp_path / "run", regimes.get("paper").env(), tok)
    assert audit_main([str(log), "--format", "trl", "--no-figures", "--rescore", "tiny", "--n-boot", "50"]) == 0
    out = capsys.readouterr().out
    assert "no gradient weights" not in out and "Gradient Share" in out
    assert audit_main([str(log), "--format", "trl", "--no-figures", "--n-boot", "50", "--tokenizer", "whitespace"]) == 0
    assert "no gradient weights" in capsys.readouterr().out


class _OtherTokens(_Uniform):
    """A policy whose tokenizer splits the response into one token more than the audit's."""

    def __call__(self, prompt, response):
        return np.append(super().__call__(prompt, response), 0.7)


def test_a_tokenizer_other_than_the_audits_is_refused_naming_the_row(tmp_path):
    from skillgate_lib.logs import ArtifactError
    from skillgate_lib.policy.models import load_policy

    _, tok = load_policy("tiny")
    log = _trl_log(tmp_path / "run", regimes.get("paper").env(), tok)
    with pytest.raises(ArtifactError, match=r"row 0.*'completion': the rescoring model's tokenizer gives"):
        run_audit(log, fmt="trl", n_boot=50, rescore=_OtherTokens())


def test_a_verl_log_is_rescored_too(tmp_path):
    import json

    from skillgate_lib.policy.models import load_policy

    _, tok = load_policy("tiny")
    trl = pd.read_parquet(_trl_log(tmp_path / "trl", regimes.get("paper").env(), tok) / "completions" /
                          "completions_00000.parquet")
    (tmp_path / "verl").mkdir()
    (tmp_path / "verl" / "0.jsonl").write_text("".join(
        json.dumps({"input": r.prompt, "output": r.completion, "score": r.correctness, "step": 0}) + "\n"
        for r in trl.itertuples()))
    fake = _Uniform()
    result = run_audit(tmp_path / "verl", fmt="verl", n_boot=50, rescore=fake)
    assert fake.rows == 12 and result.overall["gshare_median"] == pytest.approx(result.overall["share_median"])

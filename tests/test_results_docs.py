"""The README and docs/results.md: numbers generated from committed files, a README that is a guide."""

from __future__ import annotations

import re

import pytest

from skillgate_lib import paths
from skillgate_lib.report import docs, markdown

ROOT = paths.REPO_ROOT
DOCS = [ROOT / "README.md", ROOT / "docs" / "results.md"]


@pytest.fixture(scope="module")
def blocks():
    return docs.generated_blocks()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_generated_block_is_what_the_committed_files_give(doc, blocks):
    old, new = docs.refresh_document(doc, blocks)
    assert old == new, f"{doc.name}: a generated block is stale or edited by hand; run `make figures`"


def test_docs_results_holds_every_generated_table(blocks):
    text = DOCS[1].read_text()
    named = set(re.findall(r"<!-- generated: ([a-z0-9_]+) -->", text))
    assert named == set(blocks) - {"verdict"}, sorted(set(blocks) ^ named)


def test_a_number_typed_into_a_block_is_caught(tmp_path, blocks):
    doc = tmp_path / "doc.md"
    good = f"intro\n<!-- generated: verdict -->\n{blocks['verdict']()}<!-- end generated -->\n"
    doc.write_text(good)
    assert docs.refresh_document(doc, blocks)[1] == good
    typed = re.sub(r"\d+\.\d", "9.9", good, count=1)
    assert typed != good
    doc.write_text(typed)
    old, new = docs.refresh_document(doc, blocks)
    assert old != new and new == good
    doc.write_text("<!-- generated: no_such_table -->\nx\n<!-- end generated -->\n")
    with pytest.raises(ValueError, match="doc.md:1: unknown generated block 'no_such_table'"):
        docs.refresh_document(doc, blocks)


def test_leading_number_reads_the_estimate_of_an_interval_cell():
    assert markdown.leading_number("98.0 [96.9, 98.7]") == 98.0
    assert markdown.leading_number("-0.6 [-0.8, -0.4]") == -0.6
    with pytest.raises(ValueError, match="no number"):
        markdown.leading_number("[1, 2]")
    assert markdown.interval_cell("-1.7 [-3.4, +0.0]") == (-1.7, -3.4, 0.0)
    assert markdown.interval_cell(markdown.interval_pp(1.25, -0.5, 3.0)) == (1.2, -0.5, 3.0)
    with pytest.raises(ValueError, match="not 'estimate \\[low, high\\]'"):
        markdown.interval_cell("98.0 %")


def test_readme_is_a_short_guide_with_the_verdict_up_front():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines"
    head = "\n".join(lines[:40])
    assert "<!-- generated: verdict -->" in head and "<!-- end generated -->" in head, "the verdict is not in the first 40 lines"
    verdict = head.split("<!-- generated: verdict -->")[1].split("<!-- end generated -->")[0]
    # room for the intervals and caveats its words need (tests/test_verdict_words.py) and for the pretrained rate
    # study's sentence when it lands (tests/test_pretrained_report.py), still one screen
    assert len(verdict.strip().splitlines()) <= docs.VERDICT_LINES and re.search(r"\d+\.\d", verdict)
    assert re.search(r"!\[[^\]]*\]\(figures/\w+\.png\)", head), "no headline figure in the first 40 lines"
    text = "\n".join(lines)
    for needed in ("make reproduce", "make test", "docs/results.md", "docs/integrations.md", "16 of the 21",
                   "python -m skillgate_lib audit", "torch==2.13.0"):
        assert needed in text, f"README.md does not say {needed!r}"


def _headline_files(tmp_path, success, oracle_read, speed):
    """A figures folder and a data folder with table 1's files, SkillGate minus outcome-only given as (mean, lo, hi)."""
    import json

    import pandas as pd

    figures, data = tmp_path / "figures", tmp_path / "data"
    (data / "runs" / "study" / docs.HEADLINE_STUDY).mkdir(parents=True)
    figures.mkdir()
    (data / "runs" / "study" / docs.HEADLINE_STUDY / "plan.json").write_text(json.dumps({"regime": "starved"}))
    pd.DataFrame({"method": ["outcome", "skillgate"], "speed": [0.02, 0.05]}).to_csv(figures / "results_table.csv")
    row = {"baseline": "outcome", "seeds": 8}
    for name, (m, lo, hi) in {"success": success, "oracle_read": oracle_read, "speed": speed}.items():
        row |= {name: m, f"{name}_lo": lo, f"{name}_hi": hi}
    pd.DataFrame([row]).to_csv(figures / "results_table_paired.csv", index=False)
    return figures, data


def test_the_headline_says_reproduced_only_when_success_and_the_choice_both_rise(tmp_path):
    level = docs.headline_sentence(*_headline_files(tmp_path / "a", (-0.1, -1.6, 1.3), (0.4, -5.6, 6.4), (0.03, 0.02, 0.04)))
    assert level.startswith("**The paper's headline table is not reproduced at kit scale.** In `starved`")
    assert "learns the choice faster than outcome-only GRPO (choice speed (on-policy) 0.050 vs 0.020 logit/step" in level
    assert "the two end level within 6.4 pp in oracle-read and 1.6 pp in success (8 paired seeds" in level
    won = docs.headline_sentence(*_headline_files(tmp_path / "b", (3.0, 1.0, 5.0), (9.0, 2.0, 16.0), (0.0, -0.01, 0.01)))
    assert won.startswith("**The paper's headline table is reproduced at kit scale.**")
    assert "not shown faster than outcome-only" in won and "in oracle-read it ends above it" in won and "in success it ends above it" in won
    mixed = docs.headline_sentence(*_headline_files(tmp_path / "c", (-3.0, -5.0, -1.0), (9.0, 2.0, 16.0), (0.03, 0.02, 0.04)))
    assert "not reproduced" in mixed and "in success it ends below it (-3.0 [-5.0, -1.0] pp" in mixed


def test_the_edge_supplement_counts_the_runs_that_repeat_table_1(tmp_path):
    import shutil

    root = tmp_path / "runs" / "study"
    for name in (docs.HEADLINE_STUDY, docs.HEADLINE_STUDY + "-edge"):
        shutil.copytree(paths.DATA_DIR / "runs" / "study" / name, root / name)
    text = docs.supplement(tmp_path, docs.HEADLINE_STUDY + "-edge")
    assert "| `selection_bc` | 3 | lr 0.000111 |" in text and "`selection_bc`: 8 of 8 test records equal" in text
    record = root / (docs.HEADLINE_STUDY + "-edge") / "selection_bc-lr0.000111-seed3" / "test.json"
    import json

    rec = json.loads(record.read_text())
    record.write_text(json.dumps(rec | {"test/success": rec["test/success"] + 1 / 1024}))
    assert "`selection_bc`: 7 of 8 test records equal" in docs.supplement(tmp_path, docs.HEADLINE_STUDY + "-edge")

"""benchmarks/README.md says what the committed benchmark records hold: its measured blocks are generated."""

from __future__ import annotations

import json

import pytest

import repo_scripts

readme_records = repo_scripts.load("benchmarks/readme_records.py")


def test_the_readmes_blocks_are_rendered_from_the_committed_records():
    text = readme_records.README.read_text()
    for name in readme_records.BLOCKS:
        assert f"<!-- generated: {name} -->" in text, f"benchmarks/README.md has no block {name!r}"
    assert readme_records.render(text) == text, "stale: run python benchmarks/readme_records.py"


def test_a_block_shows_its_records_ratio():
    record = json.loads((readme_records.RECORDS / "study.json").read_text())
    assert f"**{record['ratio_together_over_alone']:.2f}x**" in readme_records.study_block(record)


def test_a_block_without_a_renderer_is_an_error():
    with pytest.raises(ValueError, match="no renderer"):
        readme_records.render("<!-- generated: nothing -->\nold\n<!-- end generated -->")

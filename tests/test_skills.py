"""SKILL.md parsing, the committed libraries and tokenizer, and slate composition."""

from __future__ import annotations

import collections
import filecmp

import numpy as np
import pytest

from skillgate_lib import paths
from skillgate_lib.env import DOMAINS, SkillSlateEnv, write_library
from skillgate_lib.env.skills import (
    Candidate,
    LibraryError,
    SkillFileError,
    Slate,
    SlateError,
    load_library,
    make_slate,
    parse_skill_md,
)
from skillgate_lib.env.tokenizer import build_tokenizer, load_tokenizer, token_spans


@pytest.fixture(scope="module")
def library():
    return load_library()


def _write(tmp_path, name, text):
    path = tmp_path / "dom" / name / "SKILL.md"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


GOOD = "---\nname: {name}\ndescription: does a thing\nmetadata:\n  family: f\n  variant: v\n---\nrule : add 1 .\n"


def test_parse_good_file(tmp_path):
    s = parse_skill_md(_write(tmp_path, "my-skill", GOOD.format(name="my-skill")))
    assert (s.name, s.description, s.body, s.domain, s.family, s.variant) == ("my-skill", "does a thing", "rule : add 1 .", "dom", "f", "v")


@pytest.mark.parametrize(
    "text, match",
    [
        ("rule : add 1 .\n", "missing YAML front matter"),
        ("---\nname: x\ndescription: y\nrule\n", "never closed"),
        ("---\nname: [x\n---\nbody\n", "not valid YAML"),
        ("---\n- a\n---\nbody\n", "mapping"),
        ("---\ndescription: y\n---\nbody\n", "'name'"),
        ("---\nname: x\n---\nbody\n", "'description'"),
        ("---\nname: x\ndescription: '  '\n---\nbody\n", "'description'"),
        ("---\nname: Bad Name\ndescription: y\n---\nbody\n", "'name'"),
        ("---\nname: other\ndescription: y\n---\nbody\n", "directory"),
        ("---\nname: x\ndescription: y\n---\n\n", "body"),
        ("---\nname: x\ndescription: y\nmetadata: 3\n---\nbody\n", "'metadata'"),
    ],
)
def test_parse_errors_name_file_and_field(tmp_path, text, match):
    path = _write(tmp_path, "x", text)
    with pytest.raises(SkillFileError, match=match) as err:
        parse_skill_md(path)
    assert str(path) in str(err.value) and isinstance(err.value, ValueError)


def test_yaml_is_parsed_safely(tmp_path):
    path = _write(tmp_path, "x", "---\nname: !!python/object/apply:os.system ['true']\ndescription: y\n---\nbody\n")
    with pytest.raises(SkillFileError, match="not valid YAML"):
        parse_skill_md(path)


def test_duplicate_name_names_both_files(tmp_path):
    a = _write(tmp_path / "a", "dup", GOOD.format(name="dup"))
    b = _write(tmp_path / "b", "dup", GOOD.format(name="dup"))
    with pytest.raises(LibraryError, match="duplicate") as err:
        load_library(tmp_path)
    assert str(a) in str(err.value) and str(b) in str(err.value)


def test_empty_library_is_an_error(tmp_path):
    with pytest.raises(LibraryError, match="no SKILL.md"):
        load_library(tmp_path)


def test_committed_library_shape(library):
    per_domain = collections.Counter(s.domain for s in library.values())
    assert set(per_domain) == set(DOMAINS) and min(per_domain.values()) >= 30
    for s in library.values():
        assert s.path == paths.DATA_DIR / "skills" / s.domain / s.name / "SKILL.md"
        assert s.name == f"{s.domain}-{s.family}-{s.variant}" and s.variant not in s.description
    # a family's look-alikes share their description and differ in the name's variant word and the table
    fam = [s for s in library.values() if (s.domain, s.family) == ("grid", "march")]
    assert len(fam) == 6 and len({s.description for s in fam}) == 1 and len({s.body for s in fam}) == 6
    assert all(len(s.body.split()) == len(DOMAINS["grid"].symbols) for s in fam)


def test_committed_files_match_the_generator(tmp_path, library):
    write_library(tmp_path / "skills")
    committed = paths.DATA_DIR / "skills"
    fresh = sorted(p.relative_to(tmp_path / "skills") for p in (tmp_path / "skills").rglob("SKILL.md"))
    assert fresh == sorted(p.relative_to(committed) for p in committed.rglob("SKILL.md"))
    _, mismatch, errors = filecmp.cmpfiles(committed, tmp_path / "skills", [str(p) for p in fresh], shallow=False)
    assert not mismatch and not errors, "run `python scripts/make_skills.py`"
    assert load_tokenizer().get_vocab() == build_tokenizer(SkillSlateEnv(library).vocabulary()).get_vocab()


def test_tokenizer_names_are_three_tokens_and_spans_decode(library):
    tok = load_tokenizer()
    assert (tok.pad_token, tok.bos_token, tok.eos_token, tok.unk_token) == ("<pad>", "<s>", "</s>", "<unk>")
    for s in library.values():
        ids = tok(s.name.replace("-", " ") + " " + s.body, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids and len(ids) == 3 + len(s.body.split())  # one token per word and per entry
    text = "<read> ledger credit amber </read> step 1"
    s = text.index("ledger")
    (a, b), = token_spans(tok, text, [(s, s + len("ledger credit amber"))])
    assert (a, b) == (1, 4) and tok.decode(tok(text, add_special_tokens=False)["input_ids"][a:b]) == "ledger credit amber"
    with pytest.raises(ValueError, match="covers no token"):
        token_spans(tok, text, [(6, 7)])


class _T:
    task_id = "t"

    def __init__(self, oracle):
        self.oracle = oracle


def test_slate_composition_and_cue(library):
    rng = np.random.default_rng(0)
    for name in ["ledger-credit-amber", "grid-slant-ivory", "calendar-surge-jade"]:
        sl = make_slate(library, _T(name), rng)
        cats = collections.Counter(c.category for c in sl.candidates)
        assert len(sl.candidates) == 16 and cats == {"oracle": 1, "misleading": 5, "relevant": 5, "irrelevant": 5}
        o = library[name]
        for c in sl.candidates:
            s = library[c.name]
            assert c.description == s.description and sl.category(c.name) == c.category
            assert {"misleading": (s.domain, s.family) == (o.domain, o.family),
                    "relevant": s.domain == o.domain and s.family != o.family,
                    "irrelevant": s.domain != o.domain, "oracle": s is o}[c.category]
        # the cue (the variant word) names exactly one slate candidate: the oracle
        assert [c.name for c in sl.candidates if c.name.endswith("-" + o.variant)] == [name] == [sl.oracle]
    assert sl.category("not-there") is None


def test_slate_custom_sizes_and_determinism(library):
    sl = make_slate(library, _T("cipher-triad-teal"), np.random.default_rng(3), sizes=(1, 2, 0, 7))
    assert collections.Counter(c.category for c in sl.candidates) == {"oracle": 1, "misleading": 2, "irrelevant": 7}
    again = make_slate(library, _T("cipher-triad-teal"), np.random.default_rng(3), sizes=(1, 2, 0, 7))
    assert sl == again
    other = make_slate(library, _T("cipher-triad-teal"), np.random.default_rng(4), sizes=(1, 2, 0, 7))
    assert sl != other


@pytest.mark.parametrize(
    "oracle, sizes, match",
    [
        ("ledger-credit-amber", (1, 6, 5, 5), "6 misleading"),
        ("ledger-credit-amber", (1, 5, 26, 5), "26 relevant"),
        ("ledger-credit-amber", (0, 5, 5, 5), "exactly one oracle"),
        ("ledger-credit-amber", (2, 5, 5, 5), "exactly one oracle"),
        ("no-such-skill", (1, 5, 5, 5), "'oracle'"),
    ],
)
def test_unfillable_slates(library, oracle, sizes, match):
    with pytest.raises(SlateError, match=match):
        make_slate(library, _T(oracle), np.random.default_rng(0), sizes)


def test_slate_without_oracle_is_an_error():
    with pytest.raises(SlateError, match="0 oracle"):
        Slate((Candidate("a", "x", "relevant"),))
    with pytest.raises(SlateError, match="twice"):
        Slate((Candidate("a", "x", "oracle"), Candidate("a", "x", "relevant")))
    with pytest.raises(SlateError, match="'category'"):
        Slate((Candidate("a", "x", "oracle"), Candidate("b", "x", "oracel")))

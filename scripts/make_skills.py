"""Write the embedded skill libraries (data/skills/) and the word-level tokenizer (data/tokenizer/).

Deterministic: rerunning rewrites the same bytes; the outputs are committed and
tests/test_skills.py fails when they drift from the spec in skillgate_lib/env.py.

    python scripts/make_skills.py [--data DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from skillgate_lib import paths
from skillgate_lib.env import SkillSlateEnv, write_library
from skillgate_lib.env.skills import load_library
from skillgate_lib.env.tokenizer import build_tokenizer


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=paths.DATA_DIR, help="data directory to write skills/ and tokenizer/ under")
    args = ap.parse_args(argv)
    written = write_library(args.data / "skills")
    env = SkillSlateEnv(load_library(args.data / "skills"))
    tok = build_tokenizer(env.vocabulary())
    tok.save_pretrained(str(args.data / "tokenizer"))
    print(f"wrote {len(written)} SKILL.md files under {args.data / 'skills'} and a {len(tok)}-word tokenizer under {args.data / 'tokenizer'}")


if __name__ == "__main__":
    main()

"""Where the kit's files live. Override with environment variables, never by editing code."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root (the package is installed in editable mode from it).
REPO_ROOT = Path(__file__).resolve().parents[1]
#: Committed inputs: skill libraries, the tokenizer, small run artifacts.
DATA_DIR = Path(os.environ.get("SKILLGATE_DATA", REPO_ROOT / "data"))
#: Regenerated figures (PNG + PDF + the CSV behind each).
FIGURES_DIR = Path(os.environ.get("SKILLGATE_FIGURES", REPO_ROOT / "figures"))
#: Build products: executed notebooks, scratch runs, caches. Ignored by git.
BUILD_DIR = Path(os.environ.get("SKILLGATE_BUILD", REPO_ROOT / "build"))

"""The repository describes itself: the README's layout matches the tree, pointers resolve, modules stay small."""

from __future__ import annotations

import re
import subprocess

from skillgate_lib import paths

ROOT = paths.REPO_ROOT


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines() if (ROOT / p).exists()]


def _layout() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("## Layout", 1)[1].split("```")[1]


def test_readme_layout_names_every_top_level_folder_and_library_module():
    layout = _layout()
    words = set(re.findall(r"[A-Za-z0-9_.]+", layout))
    folders = {p.split("/")[0] for p in _tracked() if "/" in p}
    assert not {f for f in folders if f + "/" not in layout and f not in words}, "top-level folders missing"
    lib = [p.split("/")[1:] for p in _tracked() if p.startswith("skillgate_lib/") and p.endswith(".py")]
    names = {parts[0][:-3] for parts in lib if len(parts) == 1 and parts[0] not in ("__init__.py", "__main__.py")}
    names |= {parts[0] for parts in lib if len(parts) == 2 and parts[1] == "__init__.py"}
    assert not names - words, f"skillgate_lib modules the README's layout does not name: {sorted(names - words)}"


def test_every_pointer_to_design_notes_resolves_inside_the_repository():
    outside = "DESIGN" + ".md"  # spelled apart so that this file does not match itself
    text_files = [p for p in _tracked() if p.endswith((".py", ".md", ".ipynb", ".yaml", ".toml", ".sh", "Makefile"))]
    for rel in text_files:
        text = (ROOT / rel).read_text(errors="replace")
        assert outside not in text, f"{rel}: points to a {outside} that is not in the repository"
        for doc in re.findall(r"docs/[A-Za-z0-9_.-]+\.md", text):
            assert (ROOT / doc).exists(), f"{rel}: points to {doc}, which does not exist"

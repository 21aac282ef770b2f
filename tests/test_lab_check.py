"""scripts/lab_check.py, the browser check, on a scratch repository whose notebooks fail in known ways.

The slow test drives JupyterLab in Debian's Chromium through playwright and skips (with the
script's own SKIPPED message) where either is missing. The scratch repository has no nbstripout
filter, so the lab's save of a run notebook is a change git sees: the check must report it and
then put the notebook back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import repo_scripts

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "lab_check.py"


def _load():
    return repo_scripts.load("scripts/lab_check.py")


lab_check = _load()

OK = [  # a heading "Figure 1", a figure, a harmless stderr warning, a Markdown table
    nbformat.v4.new_markdown_cell("# OK\n\n## Figure 1 · a line"),
    nbformat.v4.new_code_cell("import sys, warnings\nimport matplotlib.pyplot as plt\n"
                              "print('progress', file=sys.stderr)\nwarnings.warn('harmless')"),
    nbformat.v4.new_code_cell("plt.plot([1, 2]); plt.show()"),
    nbformat.v4.new_code_cell("from IPython.display import Markdown\ndisplay(Markdown('| a | b |\\n|---|---|\\n| 1 | 2 |'))"),
]
BAD = [  # a Markdown table (table 1's crop), a squashed figure, a narrow one, an error, a cell never run
    nbformat.v4.new_markdown_cell("# Bad"),
    nbformat.v4.new_code_cell("import base64, io\nimport matplotlib.pyplot as plt\n"
                              "from IPython.display import HTML, Image, Markdown\n"
                              "display(Markdown('| a | b |\\n|---|---|\\n| 1 | 2 |'))\n"
                              "fig = plt.figure(figsize=(6, 4)); plt.plot([1, 2])\n"
                              "buf = io.BytesIO(); fig.savefig(buf, format='png'); plt.close(fig)\npng = buf.getvalue()\n"
                              "src = 'data:image/png;base64,' + base64.b64encode(png).decode()\n"
                              "display(HTML(f'<img src=\"{src}\" style=\"width:600px;height:60px\">'))"),
    nbformat.v4.new_code_cell("display(Image(png, width=120))"),
    nbformat.v4.new_code_cell("1 / 0"),
    nbformat.v4.new_code_cell("print('never run')"),
]


def _scratch_repo(root: Path) -> dict[str, bytes]:
    (root / "notebooks").mkdir(parents=True)
    (root / ".gitignore").write_text(".ipynb_checkpoints/\n")
    for name, cells in (("02_ok", OK), ("04_bad", BAD)):
        nb = nbformat.v4.new_notebook()
        nb.cells = cells
        nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
        nbformat.write(nb, root / "notebooks" / f"{name}.ipynb")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "scratch"], cwd=root, check=True)
    return {p.name: p.read_bytes() for p in (root / "notebooks").glob("*.ipynb")}


def test_missing_browser_skips_with_install_hint(capsys):
    assert lab_check.main(["--chromium", "/nonexistent/chromium"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("SKIPPED:") and "apt-get install -y chromium" in out and "pip install playwright" in out
    assert "no `playwright install`" in out  # its browser download is not what the check uses


@pytest.mark.slow
def test_lab_check_finds_errors_squashed_figures_and_the_saved_notebook(tmp_path):
    missing = lab_check.missing_requirements()
    if missing:
        pytest.skip(f"SKIPPED: {missing}. {lab_check.INSTALL}")
    repo, out = tmp_path / "repo", tmp_path / "out"
    originals = _scratch_repo(repo)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--root", str(repo), "--out", str(out), "--timeout", "240",
                           "--label", "t", "--screenshot-cell", "1"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((out / "report.json").read_text())
    by = {r["notebook"]: r for r in report["results"]}
    ok, bad = by["02_ok"], by["04_bad"]

    assert ok["failures"] == [], ok  # a stderr warning is not an error
    assert (ok["executed"], ok["code_cells"], ok["errors"], ok["figures"], ok["squashed"]) == (3, 3, 0, 1, 0)
    assert (bad["executed"], bad["code_cells"], bad["errors"], bad["figures"], bad["squashed"]) == (3, 4, 1, 2, 2)
    failures = "\n".join(bad["failures"])
    assert "cell 3 [3]: error output ZeroDivisionError" in failures
    assert "code cell(s) not run: [4]" in failures
    assert "cell 1 [1]: figure 1" in failures and "squashed" in failures
    assert "cell 2 [2]: figure 1" in failures and "120 px wide" in failures

    for name in ("02_ok.png", "04_bad.png", "04_bad_error_cell3.png", "figure1_t.png", "table1_t.png",
                 "02_ok_cell1.png"):
        assert (out / name).stat().st_size > 1000, name
    # the lab's save put outputs into both notebooks (no nbstripout filter here): reported, then undone
    dirty = [g for g in report["general"] if g.startswith("git:")]
    assert len(dirty) == 2 and all("the lab's save" in g for g in dirty), report["general"]
    for p in (repo / "notebooks").glob("*.ipynb"):
        assert p.read_bytes() == originals[p.name], p
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True)
    assert status.stdout == ""
    assert "PASSED" not in proc.stdout and "FAILED:" in proc.stdout

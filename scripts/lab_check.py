"""A user test in a real browser: every notebook run in JupyterLab, as a reader runs it.

Starts JupyterLab headless on a free localhost port with a random token (from the repository
root, ``--ServerApp.root_dir`` the repository, settings and workspaces in a temporary folder),
drives Debian's Chromium through playwright, and for each notebook: opens it, clicks
Run > Run All Cells (``runmenu:run-all``), waits until the kernel is idle and no cell is queued (every non-empty code
cell with an execution count, or a cell stopped the run with an error), then checks

* no error output in any cell. JupyterLab renders an ``output_type: error`` output exactly like
  a stderr stream (both ``.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]``,
  same classes), so the check reads each output's type from the lab's own notebook model
  (``--LabApp.expose_app_in_browser``) and marks its rendered node: an error output is
  ``.jp-OutputArea-child[data-lab-check-output="error"] > .jp-OutputArea-output``;
  stderr streams (warnings, progress bars) are not errors;
* every rendered figure image (``img`` in an output area): loaded, displayed at least 300 px
  wide, and its displayed height/width ratio within 3x of its natural one (not squashed);

saves a full-page screenshot ``OUT/<notebook>.png`` (the viewport grown to the notebook's
height), saves the notebook with Ctrl+S (what the lab's autosave would write), closes it and
shuts its kernel down. At the end it shuts the lab down and checks ``git status --porcelain``:
no tracked file under ``notebooks/``, ``figures/`` or ``data/`` may have changed during the run,
compared as git stores it (through the repository's clean filters, so with the nbstripout filter
a saved notebook's outputs are no change); changes present before the run, and notebooks changed
by someone else meanwhile, are listed apart and not counted. Unless ``--keep-outputs``, each
notebook the lab saved is then put back to its bytes from before the run, so the working tree
is left as found.

Reader crops: ``OUT/figure1_<label>.png`` (notebook 02: the first figure after a heading
containing "Figure 1", else the output of the cell calling ``audit.figures``) and
``OUT/table1_<label>.png`` (notebook 04: the first rendered Markdown table output).

Prints a table (notebook, seconds, cells, errors, figures, squashed), the failures with their
notebook and cell (0-based index in the notebook's JSON, as ``cell 6 [7]`` with its execution
count), and exits 1 on any failure, 0 when all pass or when playwright or Chromium is missing
(then a SKIPPED line says how to install them; playwright's own browser download is not used).

Usage::

    .venv/bin/python scripts/lab_check.py                      # every notebooks/0*.ipynb
    .venv/bin/python scripts/lab_check.py --only 01 02         # by prefix
    .venv/bin/python scripts/lab_check.py notebooks/03_skillgate_lora_finetune.ipynb --timeout 600
    .venv/bin/python scripts/lab_check.py --label before --screenshot-cell 6
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
WATCHED = ("notebooks", "figures", "data")
MIN_WIDTH = 300  # px: a figure displayed narrower than this is flagged
MAX_RATIO_CHANGE = 3.0  # displayed h/w against natural h/w, either way
MAX_SHOT_HEIGHT = 32000  # px: the tallest full-page screenshot taken
VIEWPORT = {"width": 1440, "height": 900}
MAIN_TAB = "#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current"
INSTALL = ("install both, then rerun:\n"
           "    sudo apt-get install -y chromium        # Debian's package `chromium`: /usr/bin/chromium\n"
           "    .venv/bin/pip install playwright         # the Python client only; no `playwright install`")


def missing_requirements(chromium: str = CHROMIUM) -> str | None:
    """Why the check cannot run here (one line per missing piece), or None when it can."""
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the Python package playwright is not installed")
    if not (Path(chromium).is_file() and os.access(chromium, os.X_OK)):
        missing.append(f"{chromium} (Debian's chromium) is missing")
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        missing.append("jupyterlab is not installed (.venv/bin/pip install -e '.[notebook]')")
    return "; ".join(missing) or None


# --------------------------------------------------------------------------- the lab's side (JS)

# Helpers evaluated in the page; `path` is the notebook's path relative to the lab's root.
JS_PANEL = """
(path) => {
  const app = window.jupyterapp;
  if (!app) return null;
  for (const w of app.shell.widgets('main')) {
    if (w.context && w.context.path === path && w.content && w.content.widgets) return w;
  }
  return null;
}
"""

JS_STATE = """
(path) => {
  const panel = (%s)(path);
  if (!panel) return {ready: false};
  const session = panel.sessionContext && panel.sessionContext.session;
  const kernel = session && session.kernel;
  const cells = panel.content.widgets.map((cell, index) => {
    const m = cell.model;
    const out = {index, type: m.type};
    if (m.type !== 'code') return out;
    out.empty = m.sharedModel.getSource().trim() === '';
    out.count = m.executionCount;
    out.state = m.executionState || 'idle';
    out.prompt = (cell.node.querySelector('.jp-InputArea-prompt') || {}).textContent || '';
    out.errors = [];
    for (let i = 0; i < m.outputs.length; i++) {
      const o = m.outputs.get(i);
      if (o.type === 'error') {
        const j = o.toJSON();
        out.errors.push(`${j.ename}: ${j.evalue}`.slice(0, 300));
      }
    }
    return out;
  });
  return {ready: true, kernel: kernel ? kernel.status : (panel.sessionContext.hasNoKernel ? 'none' : 'starting'),
          dirty: panel.context.model.dirty, cells};
}
""" % JS_PANEL

# Marks every rendered output with its model type, then measures the figures and counts the
# error outputs found through the DOM selector (a cross-check of the model's count).
JS_MEASURE = """
(args) => {
  const [path, minWidth, maxRatio] = args;
  const panel = (%s)(path);
  const figures = [];
  let domErrors = 0;
  panel.content.widgets.forEach((cell, index) => {
    if (cell.model.type !== 'code' || !cell.outputArea) return;
    const outputs = cell.model.outputs;
    cell.outputArea.widgets.forEach((child, i) => {
      if (i < outputs.length) child.node.setAttribute('data-lab-check-output', outputs.get(i).type);
    });
    domErrors += cell.node.querySelectorAll(
      '.jp-OutputArea-child[data-lab-check-output="error"] > .jp-OutputArea-output').length;
    cell.node.querySelectorAll('.jp-OutputArea-output img').forEach((img, k) => {
      const r = img.getBoundingClientRect();
      const f = {cell: index, count: cell.model.executionCount, k,
                 natural: [img.naturalWidth, img.naturalHeight], shown: [Math.round(r.width), Math.round(r.height)],
                 problems: []};
      if (!img.complete || !img.naturalWidth) f.problems.push('not loaded');
      else {
        if (r.width < minWidth) f.problems.push(`displayed ${Math.round(r.width)} px wide (< ${minWidth})`);
        const natural = img.naturalHeight / img.naturalWidth;
        const shown = r.width > 0 ? r.height / r.width : Infinity;
        const change = Math.max(shown / natural, natural / shown);
        if (!(change <= maxRatio)) f.problems.push(
          `squashed: h/w ${shown.toFixed(3)} displayed vs ${natural.toFixed(3)} natural (${change.toFixed(1)}x)`);
      }
      img.setAttribute('data-lab-check-figure', `${index}-${k}`);
      figures.push(f);
    });
  });
  return {figures, domErrors};
}
""" % JS_PANEL

# Scrolls the notebook to its top and returns how many more px of viewport it needs to show its last
# cell whole (negative: it fits). Off-screen cells are laid out at estimated heights, so call it again
# after growing the viewport.
JS_EXTRA_HEIGHT = """
(path) => {
  const panel = (%s)(path);
  const cells = panel.content.widgets;
  let outer = panel.content.node.querySelector('.jp-WindowedPanel-outer') || panel.content.node;
  for (let n = cells[0].node; n && n !== panel.node; n = n.parentElement) {
    const y = getComputedStyle(n).overflowY;
    if ((y === 'auto' || y === 'scroll') && n.scrollHeight > n.clientHeight) { outer = n; break; }
  }
  outer.scrollTop = 0;
  const last = cells[cells.length - 1].node.getBoundingClientRect().bottom;
  return Math.ceil(last + 24 - outer.getBoundingClientRect().bottom);
}
""" % JS_PANEL

# The element a reader wants of each notebook: marks it and returns a description, or null.
JS_FIND_FIGURE1 = """
(path) => {
  const panel = (%s)(path);
  const cells = panel.content.widgets;
  const firstImg = (from, only) => {
    for (let i = from; i < (only ? from + 1 : cells.length); i++) {
      const img = cells[i].node.querySelector('.jp-OutputArea-output img');
      if (img) return [i, img.closest('.jp-OutputArea-output')];
    }
    return null;
  };
  let hit = null, how = '';
  for (let i = 0; i < cells.length && !hit; i++) {
    if (cells[i].model.type !== 'markdown') continue;
    const heads = Array.from(cells[i].node.querySelectorAll('h1,h2,h3,h4,h5,h6'));
    if (heads.some(h => /Figure\\s*1\\b/.test(h.textContent))) { hit = firstImg(i + 1, false); how = 'after the "Figure 1" heading'; }
  }
  if (!hit) {
    for (let i = 0; i < cells.length && !hit; i++) {
      if (cells[i].model.type === 'code' && cells[i].model.sharedModel.getSource().includes('audit.figures')) {
        hit = firstImg(i, true); how = 'output of the cell calling audit.figures';
      }
    }
  }
  if (!hit) return null;
  hit[1].setAttribute('data-lab-check-crop', 'figure1');
  return {cell: hit[0], how};
}
""" % JS_PANEL

JS_FIND_TABLE1 = """
(path) => {
  const panel = (%s)(path);
  const cells = panel.content.widgets;
  for (let i = 0; i < cells.length; i++) {
    if (cells[i].model.type !== 'code') continue;
    const t = cells[i].node.querySelector('.jp-OutputArea-output.jp-RenderedMarkdown table');
    if (t) {
      t.closest('.jp-OutputArea-output').setAttribute('data-lab-check-crop', 'table1');
      return {cell: i, how: 'first rendered Markdown table output'};
    }
  }
  return null;
}
""" % JS_PANEL

# notebook prefix -> (crop name, finder)
CROPS = {"02": ("figure1", JS_FIND_FIGURE1), "04": ("table1", JS_FIND_TABLE1)}


# --------------------------------------------------------------------------- results

@dataclass
class Result:
    notebook: str
    seconds: float = 0.0
    code_cells: int = 0
    executed: int = 0
    errors: int = 0
    figures: int = 0
    squashed: int = 0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    screenshots: list[str] = field(default_factory=list)
    saved_hash: str | None = None


def _cell(c: dict) -> str:
    count = c.get("count")
    return f"cell {c['index'] if 'index' in c else c['cell']}" + (f" [{count}]" if count is not None else "")


def _sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


# --------------------------------------------------------------------------- git

def git_changes(root: Path) -> dict[str, str] | None:
    """``git status --porcelain`` lines under the watched folders, by path; None outside a git checkout."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", *WATCHED], cwd=root,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    lines = {}
    for line in out.splitlines():
        path = line[3:].split(" -> ")[-1].strip('"')
        lines[path] = line
    return lines


def git_blob(root: Path, rel: str) -> str | None:
    """The object id git would store for the file as it is now (its clean filters applied)."""
    try:
        return subprocess.run(["git", "hash-object", "--", rel], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _outputs(path: Path) -> int:
    try:
        return sum(len(c.get("outputs") or []) for c in json.loads(path.read_text())["cells"])
    except (OSError, ValueError, KeyError):
        return 0


# --------------------------------------------------------------------------- the lab

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """JupyterLab on 127.0.0.1 with a token, its settings and workspaces in a temporary folder."""

    def __init__(self, root: Path, log: Path, start_timeout: float = 180.0):
        self.root, self.token, self.tmp = root, secrets.token_hex(24), Path(tempfile.mkdtemp(prefix="lab_check_"))
        settings = self.tmp / "settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True)
        # no news or update pop-up over the screenshots (and no request for them: there is no network)
        (settings / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False}))
        for attempt in range(3):
            self.port = _free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
                   "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
                   f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
                   f"--LabApp.user_settings_dir={self.tmp / 'settings'}",
                   f"--LabApp.workspaces_dir={self.tmp / 'workspaces'}"]
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                cmd.append("--allow-root")
            env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(self.tmp / "runtime"))
            self.log = log.open("a")
            self.proc = subprocess.Popen(cmd, cwd=root, stdout=self.log, stderr=subprocess.STDOUT, env=env)
            deadline = time.monotonic() + start_timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    self.api("GET", "/api/status")
                    return
                except (urllib.error.URLError, OSError):
                    time.sleep(0.5)
            self._stop()
        raise RuntimeError(f"JupyterLab did not start (see {log})")

    def api(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def shutdown_kernels_of(self, rel: str) -> None:
        for s in self.api("GET", "/api/sessions") or []:
            if s.get("path") == rel:
                self.api("DELETE", f"/api/sessions/{s['id']}")

    def _stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.api("POST", "/api/shutdown")  # shuts the kernels down too
            except (urllib.error.URLError, OSError):
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        self.log.close()

    def close(self) -> None:
        self._stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


# --------------------------------------------------------------------------- one notebook

def _dismiss_dialogs(page, result: Result, context: str) -> int:
    """Cancels every open dialog, each reported as a failure; returns how many there were."""
    dialogs, seen = page.locator(".jp-Dialog"), 0
    while dialogs.count() and seen < 5:
        seen += 1
        title = dialogs.first.locator(".jp-Dialog-header").inner_text().strip()
        body = " ".join(dialogs.first.locator(".jp-Dialog-body").inner_text().split())
        if title == "File Changed":  # the lab's save found a newer file on disk: someone else's edit
            result.failures.append(f"not saved {context}: the notebook changed on disk during the run (a concurrent "
                                   "edit?); the lab's 'File Changed' dialog was cancelled and the file on disk kept")
        else:
            result.failures.append(f"dialog {context}: {title!r}: {body[:200]!r}")
        cancel = dialogs.first.locator(".jp-Dialog-button", has_text="Cancel")
        if cancel.count():
            cancel.first.click()
        else:
            page.keyboard.press("Escape")
        page.wait_for_timeout(500)
    return seen


def check_notebook(browser, lab: Lab, path: Path, args, result: Result) -> None:
    rel = path.relative_to(lab.root).as_posix()
    stem, out = path.stem, Path(args.out)
    context = browser.new_context(viewport=dict(VIEWPORT))
    page = context.new_page()
    try:
        workspace = f"lab-check-{stem}-{secrets.token_hex(3)}"  # a fresh workspace: nothing restored
        page.goto(f"{lab.url}/lab/workspaces/{workspace}/tree/{rel}?token={lab.token}", timeout=120_000)
        page.wait_for_function(f"(p) => {{ const s = ({JS_STATE})(p); return s.ready && s.kernel === 'idle'; }}",
                               arg=rel, timeout=180_000, polling=500)
        state = page.evaluate(JS_STATE, rel)
        code = [c for c in state["cells"] if c["type"] == "code"]
        result.code_cells = len(code)
        result.notes.append(f"{len(state['cells'])} cells, {len(code)} code")

        # Run > Run All Cells, as a reader clicks it
        page.locator(MAIN_TAB).first.click()  # the notebook's tab: the current document
        started = time.monotonic()
        try:
            page.locator(".lm-MenuBar-item", has_text=re.compile(r"^\s*Run\s*$")).first.click()
            page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').first.click(timeout=10_000)
        except Exception as exc:  # noqa: BLE001 - fall back to the same command, noted
            result.notes.append(f"menu click failed ({type(exc).__name__}); ran runmenu:run-all directly")
            page.keyboard.press("Escape")
            page.evaluate("() => window.jupyterapp.commands.execute('runmenu:run-all')")

        settled, finished, deadline = 0, started, started + args.timeout
        while True:
            page.wait_for_timeout(1000)
            state = page.evaluate(JS_STATE, rel)
            cells = [c for c in state["cells"] if c["type"] == "code"]
            running = [c for c in cells if c["state"] == "running" or "*" in c["prompt"]]
            todo = [c for c in cells if c["count"] is None and not c["empty"]]
            errored = any(c["errors"] for c in cells)
            if state["kernel"] in ("dead", "autorestarting", "restarting"):
                result.failures.append(f"the kernel died during the run ({state['kernel']}; out of memory?)")
                break
            done = state["kernel"] == "idle" and not running and (not todo or errored)
            settled = settled + 1 if done else 0
            if settled == 1:
                finished = time.monotonic()
            if settled >= 3:  # the same for 3 s: not a gap between two queued cells
                break
            if time.monotonic() > deadline:
                where = ", ".join(_cell(c) for c in running[:3]) or "none running"
                result.failures.append(f"timed out after {args.timeout:.0f} s (kernel {state['kernel']}; {where})")
                page.evaluate("() => window.jupyterapp.commands.execute('notebook:interrupt-kernel')")
                page.wait_for_timeout(3000)
                state = page.evaluate(JS_STATE, rel)
                cells = [c for c in state["cells"] if c["type"] == "code"]
                break
        result.seconds = (finished if settled >= 3 else time.monotonic()) - started
        _dismiss_dialogs(page, result, "during the run")

        result.executed = sum(c["count"] is not None for c in cells)
        for c in cells:
            for e in c["errors"]:
                result.errors += 1
                result.failures.append(f"{_cell(c)}: error output {e}")
        not_run = [c["index"] for c in cells if c["count"] is None and not c["empty"]]
        if not_run:
            result.failures.append(f"{len(not_run)} code cell(s) not run: {not_run}")

        # grow the viewport to the whole notebook: everything laid out, one full-page screenshot
        page.evaluate("() => document.fonts.ready")
        height = VIEWPORT["height"]
        for _ in range(6):
            extra = page.evaluate(JS_EXTRA_HEIGHT, rel)
            if extra <= 0 or height >= MAX_SHOT_HEIGHT:
                break
            height = min(height + extra, MAX_SHOT_HEIGHT)
            page.set_viewport_size({"width": VIEWPORT["width"], "height": height})
            page.wait_for_timeout(1000)
        if extra > 0:
            result.notes.append(f"screenshot cut at {height} px ({extra} px of the notebook left out)")
        page.wait_for_function("""() => Array.from(document.querySelectorAll('.jp-OutputArea-output img'))
                                  .every(i => i.complete)""", timeout=30_000)
        measured = page.evaluate(JS_MEASURE, [rel, MIN_WIDTH, MAX_RATIO_CHANGE])
        result.figures = len(measured["figures"])
        if measured["domErrors"] != result.errors:
            result.notes.append(f"{measured['domErrors']} error outputs rendered for {result.errors} in the model")
        for f in measured["figures"]:
            if f["problems"]:
                result.squashed += 1
                result.failures.append(f"{_cell(f)}: figure {f['k'] + 1} (natural {f['natural'][0]}x{f['natural'][1]}, "
                                       f"shown {f['shown'][0]}x{f['shown'][1]}): " + "; ".join(f["problems"]))
        shot = out / f"{stem}.png"
        page.evaluate(JS_EXTRA_HEIGHT, rel)  # back at the top
        page.wait_for_timeout(300)
        page.screenshot(path=str(shot), full_page=True)
        result.screenshots.append(str(shot))
        for c in cells:
            if c["errors"]:
                err_shot = out / f"{stem}_error_cell{c['index']}.png"
                page.locator(".jp-Notebook .jp-Cell").nth(c["index"]).screenshot(path=str(err_shot))
                result.screenshots.append(str(err_shot))

        crop = CROPS.get(stem[:2])
        if crop:
            name, finder = crop
            found = page.evaluate(finder, rel)
            if found:
                target = out / f"{name}_{args.label}.png"
                page.locator(f'[data-lab-check-crop="{name}"]').first.screenshot(path=str(target))
                result.screenshots.append(str(target))
                result.notes.append(f"{name}: cell {found['cell']} ({found['how']})")
            else:
                result.failures.append(f"{name}: no such element rendered (nothing to crop)")
        if args.screenshot_cell is not None:
            cell_loc = page.locator(".jp-Notebook .jp-Cell")
            if args.screenshot_cell < cell_loc.count():
                target = out / f"{stem}_cell{args.screenshot_cell}.png"
                cell_loc.nth(args.screenshot_cell).screenshot(path=str(target))
                result.screenshots.append(str(target))
            else:
                result.notes.append(f"no cell {args.screenshot_cell} to screenshot")
        page.set_viewport_size(dict(VIEWPORT))

        # save as a reader does (Ctrl+S; the lab's autosave writes the same file)
        page.locator(MAIN_TAB).first.click()
        page.keyboard.press("Control+s")
        try:
            page.wait_for_function(f"""(p) => {{ const s = ({JS_STATE})(p);
                                       return (s.ready && !s.dirty) || !!document.querySelector('.jp-Dialog'); }}""",
                                   arg=rel, timeout=60_000, polling=250)
        except Exception:  # noqa: BLE001 - reported below
            pass
        if not _dismiss_dialogs(page, result, "on save"):
            if page.evaluate(JS_STATE, rel).get("dirty"):
                result.failures.append("Ctrl+S did not save the notebook within 60 s")
            else:
                result.saved_hash = _sha(path)
    finally:
        context.close()
        try:
            lab.shutdown_kernels_of(rel)
        except (urllib.error.URLError, OSError) as exc:
            result.notes.append(f"kernel shutdown: {exc}")


# --------------------------------------------------------------------------- the run

def select_notebooks(root: Path, given: list[str], only: list[str] | None) -> list[Path]:
    paths = [Path(p).resolve() for p in given] if given else sorted((root / "notebooks").glob("0*.ipynb"))
    if only:
        paths = [p for p in paths if any(p.name.startswith(o) for o in only)]
    return paths


def print_table(results: list[Result]) -> None:
    head = ("notebook", "seconds", "cells", "errors", "figures", "squashed")
    rows = [(r.notebook, f"{r.seconds:.0f}", f"{r.executed}/{r.code_cells}", str(r.errors), str(r.figures),
             str(r.squashed)) for r in results]
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    fmt = lambda row: "  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(row, widths)))  # noqa: E731
    print(fmt(head))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(fmt(row))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="*", help="notebooks to check (default: notebooks/0*.ipynb)")
    ap.add_argument("--only", nargs="+", metavar="PREFIX", help="only notebooks whose name starts so: --only 02 04")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per notebook for Run All (default 300)")
    ap.add_argument("--out", default="build/lab_check", help="screenshots, report.json and lab.log, under the repository root (default build/lab_check)")
    ap.add_argument("--label", default="now", help="suffix of the reader crops figure1_<label>.png, table1_<label>.png")
    ap.add_argument("--screenshot-cell", type=int, metavar="N", help="also screenshot cell N (0-based) of each notebook")
    ap.add_argument("--keep-outputs", action="store_true",
                    help="leave the notebooks as the lab saved them (default: restore their bytes from before the run)")
    ap.add_argument("--chromium", default=CHROMIUM, help=f"the browser (default {CHROMIUM})")
    ap.add_argument("--root", default=str(REPO_ROOT), help=argparse.SUPPRESS)  # the tests point it at a scratch repo
    args = ap.parse_args(argv)

    missing = missing_requirements(args.chromium)
    if missing:
        print(f"SKIPPED: lab_check needs a browser it can drive: {missing}.\n{INSTALL}")
        return 0
    from playwright.sync_api import sync_playwright

    root = Path(args.root).resolve()
    given = [str(Path(n).resolve()) for n in args.notebooks]  # as named from where the command ran
    os.chdir(root)
    notebooks = select_notebooks(root, given, args.only)
    if not notebooks:
        print("no notebook selected", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.out = str(out)

    before = git_changes(root) or {}
    before_blob = {rel: git_blob(root, rel) for rel, line in before.items() if not line.startswith("??")}
    ran_blob = {p.relative_to(root).as_posix(): git_blob(root, p.relative_to(root).as_posix()) for p in notebooks}
    originals = {p: p.read_bytes() for p in notebooks}
    original_hash = {p: hashlib.sha256(b).hexdigest() for p, b in originals.items()}
    results: list[Result] = []
    general: list[str] = []
    print(f"lab_check: {len(notebooks)} notebook(s), timeout {args.timeout:.0f} s each, out {out}", flush=True)
    (out / "lab.log").unlink(missing_ok=True)  # this run's server log only
    lab = Lab(root, out / "lab.log")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=args.chromium, headless=True)
            try:
                for path in notebooks:
                    result = Result(path.stem)
                    results.append(result)
                    print(f"  {path.stem} ...", flush=True)
                    try:
                        check_notebook(browser, lab, path, args, result)
                    except Exception as exc:  # noqa: BLE001 - one notebook's failure does not stop the others
                        result.failures.append(f"check aborted: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
                    print(f"  {path.stem}: {result.seconds:.0f} s, {len(result.failures)} failure(s)", flush=True)
            finally:
                browser.close()
    finally:
        lab.close()

    # what the run changed in git's view: tracked files under notebooks/, figures/, data/, compared as
    # git stores them (through the repository's clean filters, e.g. nbstripout on notebooks)
    after = git_changes(root)
    if after is None:
        general.append("note: not a git checkout; the clean-tree check was not run")
    else:
        ran = {p.relative_to(root).as_posix(): (p, r) for p, r in zip(notebooks, results)}
        for rel, line in sorted(after.items()):
            if line.startswith("??"):
                if rel not in before:
                    general.append(f"note: new untracked file: {line}")
                continue
            blob = git_blob(root, rel)
            if rel in ran:
                path, r = ran[rel]
                if blob == ran_blob[rel]:
                    general.append(f"note: changed before the run, not by it (not counted): {line}")
                    if r.saved_hash and _outputs(path):
                        general.append(f"note: the lab saved {rel} with {_outputs(path)} outputs; git sees no "
                                       "change from them (its clean filter strips them)")
                elif r.saved_hash and _sha(path) == r.saved_hash:
                    general.append(f"git: {line}  (the lab's save of the notebook it ran: "
                                   f"{_outputs(path)} outputs written into it)")
                else:
                    general.append(f"warn: {line}  (changed during the run, not by this check's save: "
                                   "a concurrent edit?)")
            elif rel in before and blob == before_blob.get(rel):
                general.append(f"note: changed before the run, not by it (not counted): {line}")
            elif rel.startswith("notebooks/") and rel.endswith(".ipynb"):
                general.append(f"warn: {line}  (a notebook this run did not open: a concurrent edit?)")
            else:
                general.append(f"git: {line}" + ("  (already changed before the run, and again during it)"
                                                 if rel in before else ""))
        for rel, (path, r) in ran.items():
            if r.saved_hash and rel not in after and _outputs(path):
                general.append(f"note: the lab saved {rel} with {_outputs(path)} outputs; git sees no change "
                               "(its clean filter strips them)")

    # leave the notebooks as found
    for path, result in zip(notebooks, results):
        now = _sha(path)
        if args.keep_outputs or not result.saved_hash or now != result.saved_hash or now == original_hash[path]:
            continue
        path.write_bytes(originals[path])
        general.append(f"note: restored {path.relative_to(root)} to its bytes from before the run "
                       "(--keep-outputs leaves the lab's save)")

    print()
    print_table(results)
    failed = any(r.failures for r in results) or any(g.startswith("git:") for g in general)
    print()
    for r in results:
        for f in r.failures:
            print(f"FAIL {r.notebook}: {f}")
    for g in general:
        print(("FAIL " if g.startswith("git:") else "") + g)
    for r in results:
        for n in r.notes:
            print(f"note {r.notebook}: {n}")
    print("\nscreenshots:")
    for r in results:
        for s in r.screenshots:
            print(f"  {s}")
    report = {"results": [r.__dict__ for r in results], "general": general, "failed": failed}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    print(f"\n{'FAILED' if failed else 'PASSED'}: {sum(len(r.failures) for r in results) + sum(g.startswith('git:') for g in general)}"
          f" failure(s) in {len(results)} notebook(s); report {out / 'report.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

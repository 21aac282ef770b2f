"""Execute the numbered notebooks headless with papermill.

The committed notebooks carry no outputs, and their metadata are what JupyterLab
writes when it opens them (:func:`lab_metadata`), so opening one changes nothing;
executed copies are build products written to ``build/notebooks/``. A *profile*
(``notebooks/profiles.yaml``) maps notebook names to papermill parameters: ``ci`` is
the notebooks' own defaults (sized for CI), ``full`` what ``make reproduce`` runs,
``figures`` only rebuilds figures from committed artifacts.

A notebook run this way writes what git tracks only where its profile says so: the
notebooks' own defaults send figures and tables to ``build/``, and the ``figures``,
``full`` and ``paper`` profiles pass ``figures_dir`` to write ``figures/``. Progress bars
(:func:`progress_bar`) are widgets in JupyterLab and plain text lines here, where the
kernel's stderr goes to the terminal.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import yaml

from skillgate_lib import paths

NOTEBOOK_DIR = paths.REPO_ROOT / "notebooks"
PROFILES_FILE = NOTEBOOK_DIR / "profiles.yaml"


def notebook_paths() -> list[Path]:
    """The numbered notebooks in reading order."""
    return sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key repeated in one mapping (plain YAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
        repeated = sorted({k for k in keys if keys.count(k) > 1}, key=str)
        if repeated:
            raise ValueError(f"{getattr(self, 'name', 'profiles')}:{node.start_mark.line + 1}: key(s) {repeated} "
                             "given more than once in one mapping; each profile and parameter once")
        return super().construct_mapping(node, deep=deep)


def _read_profiles(file: Path) -> dict:
    if not file.exists():
        return {}
    with file.open() as stream:  # the stream's name is the file's, for the error above
        return yaml.load(stream, Loader=_UniqueKeyLoader) or {}


def load_profile(name: str, file: Path = PROFILES_FILE) -> dict[str, dict]:
    """``{notebook stem: parameters}`` for one profile; notebooks absent from it are skipped
    unless the profile is ``ci``, which runs every notebook with its own defaults."""
    profiles = _read_profiles(file)
    if name == "ci":
        return {p.stem: {} for p in notebook_paths()}
    if name not in (profiles or {}):
        raise ValueError(f"{file}: no profile {name!r}; profiles are: ci, {', '.join(profiles or {})}")
    entries = {k: v for k, v in (profiles[name] or {}).items() if k != "expected_minutes"}
    known = {p.stem for p in notebook_paths()}
    for stem in entries:
        if stem not in known:
            raise ValueError(f"{file}: profile {name!r} names notebook {stem!r}, which is not in {NOTEBOOK_DIR}")
    return {stem: dict(entries[stem] or {}) for stem in sorted(entries)}


def expected_minutes(name: str, file: Path = PROFILES_FILE) -> float | None:
    """The measured wall time of a profile on 2 CPU cores (its ``expected_minutes``), if recorded."""
    profiles = _read_profiles(file)
    value = ((profiles or {}).get(name) or {}).get("expected_minutes")
    return float(value) if value is not None else None


#: Set in a kernel's environment by :func:`run_notebook`: the notebook runs headless, so its
#: progress bars are text lines on stderr (streamed to the terminal) rather than widgets.
HEADLESS_ENV = "SKILLGATE_HEADLESS"


def _in_kernel() -> bool:
    """Whether this code runs inside a Jupyter kernel (the test tqdm.auto uses)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in shell.config


def progress_bar(*args, **kwargs):
    """A tqdm bar: a widget in a notebook opened in JupyterLab, text lines everywhere else.

    Text lines are what a terminal and a headless run need: a papermill run streams the
    kernel's stderr to the terminal (``make reproduce``), where a widget would show nothing.
    Arguments are tqdm's.
    """
    if _in_kernel() and os.environ.get(HEADLESS_ENV) != "1":
        try:
            import ipywidgets  # noqa: F401  (tqdm.notebook draws with it)
            from tqdm.notebook import tqdm as widget_bar
        except ImportError:
            pass
        else:
            return widget_bar(*args, **kwargs)
    from tqdm import tqdm as text_bar

    return text_bar(*args, **kwargs)


#: The kernel every notebook runs on (papermill, the tests and JupyterLab alike).
KERNEL = "python3"


def _kernel_config():
    """Kernel-manager settings for headless runs: CurveZMQ encryption of the kernel's TCP
    sockets where ``jupyter_client`` offers it (ipykernel warns on every start without it)."""
    from jupyter_client.manager import KernelManager
    from traitlets.config import Config

    config = Config()
    if "transport_encryption" in KernelManager.class_trait_names():
        config.KernelManager.transport_encryption = "auto"
    return config


def lab_metadata(kernel_name: str = KERNEL) -> dict:
    """The notebook metadata JupyterLab writes when it opens a notebook on ``kernel_name``.

    The lab sets ``kernelspec`` from the kernel's spec and ``language_info`` from the
    running kernel's ``kernel_info`` reply, and marks the notebook changed unless both
    already hold exactly that; so this starts the kernel and asks it. ``language_info``
    holds the kernel's Python version.
    """
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec = KernelSpecManager().get_kernel_spec(kernel_name)
    km = KernelManager(kernel_name=kernel_name, config=_kernel_config())
    km.start_kernel()
    client = km.client()
    try:
        client.start_channels()
        client.wait_for_ready(timeout=60)
        language_info = client.kernel_info(reply=True, timeout=60)["content"]["language_info"]
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)
    return {"kernelspec": {"display_name": spec.display_name, "language": spec.language, "name": kernel_name},
            "language_info": language_info}


def run_notebook(path: Path, out_dir: Path, parameters: dict | None = None, stream: bool = False) -> Path:
    """Execute one notebook with papermill; return the executed copy's path.

    ``stream``: pass the kernel's stderr through to this process's, so progress bars of long
    cells (a comparison's GRPO steps, with their ETA) show while the notebook runs. In the
    executed copy each cell's stream output is one block with carriage returns applied, so a
    progress bar is one line, as in the lab, not one output per update. The kernel runs with
    :data:`HEADLESS_ENV` set, so its bars are text, not widgets.
    """
    import sys

    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / path.name
    previous = os.environ.get(HEADLESS_ENV)
    os.environ[HEADLESS_ENV] = "1"  # the kernel inherits this process's environment
    try:
        pm.execute_notebook(
            str(path),
            str(out),
            parameters=parameters or {},
            cwd=str(path.parent),
            kernel_name=KERNEL,
            config=_kernel_config(),
            coalesce_streams=True,
            progress_bar=False,
            log_output=False,
            stderr_file=sys.stderr if stream else None,
        )
    finally:
        if previous is None:
            del os.environ[HEADLESS_ENV]
        else:
            os.environ[HEADLESS_ENV] = previous
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skillgate_lib notebooks", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="ci", help="parameter profile from notebooks/profiles.yaml (default: ci)")
    parser.add_argument("--out", type=Path, default=paths.BUILD_DIR / "notebooks", help="where executed copies go")
    parser.add_argument("--only", nargs="*", help="notebook name prefixes to run, e.g. 01 03")
    args = parser.parse_args(argv)
    plan = load_profile(args.profile)
    if args.only:
        plan = {stem: p for stem, p in plan.items() if any(stem.startswith(o) for o in args.only)}
        if not plan:
            parser.error(f"--only {' '.join(args.only)} matches no notebook in profile {args.profile!r}")
    minutes = expected_minutes(args.profile) if not args.only else None
    if minutes is not None:
        print(f"[notebooks] profile {args.profile}: {len(plan)} notebooks, expected wall time about {minutes:.0f} min "
              f"on 2 CPU cores (notebooks/profiles.yaml says how it was obtained)", flush=True)
    total = time.perf_counter()
    for stem, params in plan.items():
        start = time.perf_counter()
        print(f"[notebooks] {stem} {params or '(defaults)'}", flush=True)
        run_notebook(NOTEBOOK_DIR / f"{stem}.ipynb", args.out, params, stream=True)
        print(f"[notebooks] {stem} done in {time.perf_counter() - start:.1f}s", flush=True)
    print(f"[notebooks] profile {args.profile} done in {(time.perf_counter() - total) / 60:.1f} min; executed copies in "
          f"{args.out}", flush=True)
    return 0

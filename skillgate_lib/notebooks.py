"""Execute the numbered notebooks headless with papermill.

The committed notebooks carry no outputs, and their metadata are what JupyterLab
writes when it opens them (:func:`lab_metadata`), so opening one changes nothing;
executed copies are build products written to ``build/notebooks/``. A *profile*
(``notebooks/profiles.yaml``) maps notebook names to papermill parameters: ``ci`` is
the notebooks' own defaults (sized for CI), ``full`` the sizes the README's results
come from, ``figures`` only rebuilds figures from committed artifacts.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml

from skillgate_lib import paths

NOTEBOOK_DIR = paths.REPO_ROOT / "notebooks"
PROFILES_FILE = NOTEBOOK_DIR / "profiles.yaml"


def notebook_paths() -> list[Path]:
    """The numbered notebooks in reading order."""
    return sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))


def load_profile(name: str, file: Path = PROFILES_FILE) -> dict[str, dict]:
    """``{notebook stem: parameters}`` for one profile; notebooks absent from it are skipped
    unless the profile is ``ci``, which runs every notebook with its own defaults."""
    profiles = yaml.safe_load(file.read_text()) if file.exists() else {}
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
    profiles = yaml.safe_load(file.read_text()) if file.exists() else {}
    value = ((profiles or {}).get(name) or {}).get("expected_minutes")
    return float(value) if value is not None else None


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
    progress bar is one line, as in the lab, not one output per update.
    """
    import sys

    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / path.name
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

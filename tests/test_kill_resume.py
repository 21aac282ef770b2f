"""A training run killed with SIGKILL (anywhere, even mid-write) resumes to the same numbers.

Each case runs ``python -m skillgate_lib train`` in a subprocess, kills it, resumes it
with ``--resume`` and compares everything the run left (metrics, trajectories, the final
adapter) with an uninterrupted run of the same config.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest
import torch

from skillgate_lib import logs
from skillgate_lib.runs import train

pytestmark = pytest.mark.slow

# A driver that kills its own process at a chosen point: halfway through writing the
# n-th checkpoint, or halfway through the metrics line of a given training step.
DRIVER = textwrap.dedent("""
    import io, json, os, signal, sys
    import torch
    from skillgate_lib import logs
    from skillgate_lib.runs import train

    mode, at, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    calls = [0]
    if mode == "checkpoint":
        real_save = torch.save
        def save(obj, f, *args, **kwargs):
            calls[0] += 1
            if calls[0] == at:
                buf = io.BytesIO()
                real_save(obj, buf, *args, **kwargs)
                f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
                f.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            return real_save(obj, f, *args, **kwargs)
        torch.save = save
    elif mode == "metrics":
        real_log = logs.RunWriter.log_metrics
        def log(self, row):
            if row["split"] == "train" and row["step"] == at:
                line = json.dumps(row, default=float)
                with self.metrics_path.open("a") as fh:
                    fh.write(line[: len(line) // 2])
                    fh.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            return real_log(self, row)
        logs.RunWriter.log_metrics = log
    train.train_main(argv)
""")


def _argv(tiny_model_dir, run_dir) -> list[str]:
    return ["--model", str(tiny_model_dir), "--credit", "skillgate", "--steps", "4", "--prompts-per-step", "2",
            "--group-size", "4", "--max-new-tokens", "48", "--eval-every", "2", "--eval-tasks", "8",
            "--log-train-every", "1", "--checkpoint-every", "2", "--threads", "1", "--lr", "1e-2",
            "--no-filter-groups", "--run-dir", str(run_dir)]  # a 2-step model never succeeds: keep its groups


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("full") / "run"
    assert train.train_main(_argv(tiny_model_dir, run_dir)) == 0
    return run_dir


def _run(args: list[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)


def _assert_same_run(a, b) -> None:
    ma, mb = logs.read_metrics(a), logs.read_metrics(b)
    cols = [c for c in ma.columns if not c.startswith("time/")]
    pd.testing.assert_frame_equal(ma[cols], mb[cols])
    ta, tb = logs.read_run(a), logs.read_run(b)
    pd.testing.assert_frame_equal(ta, tb)
    assert logs.read_samples(a) == logs.read_samples(b)
    from safetensors.torch import load_file

    wa, wb = load_file(a / "adapter" / "adapter_model.safetensors"), load_file(b / "adapter" / "adapter_model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not list(b.glob(".*.tmp")) and not list((b / "trajectories").glob(".*.tmp")), "partial writes left behind"


def _resume(tiny_model_dir, run_dir) -> None:
    proc = _run(["-m", "skillgate_lib", "train", *_argv(tiny_model_dir, run_dir), "--resume"])
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out.decode()[-3000:]


@pytest.mark.parametrize("mode,at", [("checkpoint", 2), ("metrics", 3)], ids=["mid-checkpoint", "mid-metrics-line"])
def test_killed_mid_write_resumes_to_the_same_numbers(tiny_model_dir, uninterrupted, tmp_path, mode, at):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    run_dir = tmp_path / "run"
    proc = _run([str(driver), mode, str(at), *_argv(tiny_model_dir, run_dir)])
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == -9, f"the driver was meant to die by SIGKILL: {out.decode()[-3000:]}"
    if mode == "checkpoint":  # the second checkpoint (step 4) was cut: the step-2 one survives
        assert torch.load(run_dir / "checkpoint.pt", weights_only=False)["step"] == 2
        assert list(run_dir.glob(".checkpoint.pt.*.tmp")), "the kill should have left a partial temp file"
    else:
        assert not (run_dir / "metrics.jsonl").read_text().endswith("\n"), "the kill should have cut a line"
    _resume(tiny_model_dir, run_dir)
    _assert_same_run(uninterrupted, run_dir)


def test_killed_from_outside_resumes_to_the_same_numbers(tiny_model_dir, uninterrupted, tmp_path):
    """SIGKILL from another process as soon as step 3 is logged (wherever the run is then)."""
    run_dir = tmp_path / "run"
    proc = _run(["-m", "skillgate_lib", "train", *_argv(tiny_model_dir, run_dir)])
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        if metrics.exists() and any(json.loads(ln).get("step", 0) >= 3 for ln in metrics.read_text().splitlines()
                                    if ln.endswith("}")):
            proc.kill()
            break
        time.sleep(0.05)
    proc.communicate(timeout=60)
    assert proc.returncode == -9, "the run finished before it could be killed"
    _resume(tiny_model_dir, run_dir)
    _assert_same_run(uninterrupted, run_dir)


def test_damaged_log_is_not_resumed_and_left_as_is(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    train.train_main([*_argv(tiny_model_dir, run_dir), "--steps", "2"])
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    lines[1] = lines[1][:10]
    damaged = "\n".join(lines) + "\n"
    (run_dir / "metrics.jsonl").write_text(damaged)
    with pytest.raises(logs.ArtifactError, match=r"metrics.jsonl: line 2: .*damaged"):
        train.train_main([*_argv(tiny_model_dir, run_dir), "--resume"])
    assert (run_dir / "metrics.jsonl").read_text() == damaged

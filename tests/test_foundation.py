"""The shared helpers: seeding, savefig, the notebook profiles, the CLI dispatcher."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from skillgate_lib import __main__ as cli
from skillgate_lib import notebooks
from skillgate_lib.plots import savefig
from skillgate_lib.seeding import seed_everything


def test_seed_everything_repeats_numbers():
    a = seed_everything(7).random(5)
    b = seed_everything(7).random(5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, seed_everything(8).random(5))


@pytest.mark.parametrize("bad", [-1, 1.5, "3"])
def test_seed_everything_rejects_bad_seed(bad):
    with pytest.raises(ValueError, match="seed"):
        seed_everything(bad)


def test_savefig_writes_png_pdf_and_csv(tmp_path):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    written = savefig("fig_test", fig, data=pd.DataFrame({"x": [0, 1]}), out_dir=tmp_path)
    assert sorted(written) == ["csv", "pdf", "png"]
    assert (tmp_path / "fig_test.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "fig_test.pdf").read_bytes()[:4] == b"%PDF"
    assert pd.read_csv(tmp_path / "fig_test.csv")["x"].tolist() == [0, 1]
    plt.close(fig)


@pytest.mark.parametrize("bad", ["fig.png", "a/b", "", "../x"])
def test_savefig_rejects_unstable_names(bad, tmp_path):
    with pytest.raises(ValueError, match="figure name"):
        savefig(bad, out_dir=tmp_path)


def test_unknown_profile_is_a_clear_error(tmp_path):
    f = tmp_path / "profiles.yaml"
    f.write_text("full: {}\n")
    with pytest.raises(ValueError, match="no profile 'nope'"):
        notebooks.load_profile("nope", f)


def test_profile_expected_minutes_is_not_a_notebook(tmp_path):
    f = tmp_path / "profiles.yaml"
    stem = notebooks.notebook_paths()[0].stem
    f.write_text(f"full:\n  expected_minutes: 25\n  {stem}: {{n: 1}}\nfigures:\n  {stem}: {{}}\n")
    assert notebooks.load_profile("full", f) == {stem: {"n": 1}}
    assert notebooks.expected_minutes("full", f) == 25 and notebooks.expected_minutes("figures", f) is None


def test_committed_profiles_name_existing_notebooks():
    for name in ("full", "paper", "figures"):
        assert notebooks.load_profile(name), name
    assert notebooks.expected_minutes("full") <= 30, "make reproduce is meant to finish within 30 minutes"


def test_cli_rejects_unknown_command(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["notebooks", "warmstart", "train", "evaluate", "compare", "audit"])
def test_every_command_prints_its_help(command, capsys):
    from skillgate_lib.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0 and "usage:" in capsys.readouterr().out

"""`layerwise plot` and `layerwise export-pattern` on run directories (hand-written logs and a tiny run)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from layerwise.cli import main
from test_finetune import base_args, read_metrics, run_cli, write_cola


def write_run(root: Path, name: str, records: list[dict]) -> Path:
    """A run directory root/name holding only metrics.jsonl with `records`."""
    run = root / name
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return run


def fake_run(root: Path, name: str, rates: bool = True) -> Path:
    lines = []
    for step in (10, 20, 30):
        record = {"step": step, "epoch": step / 30, "loss": 1.0 / step, "lr": 1e-5, "examples_per_s": 5.0,
                  "task_loss": 0.9 / step}
        if rates:
            record.update({"drop/layer0": 0.1 * step / 10, "drop/layer1": 0.05, "drop/layer1/head0": 0.05})
        lines.append(record)
        lines.append({"step": step, "eval": {"matthews": step / 3, "accuracy": 50.0}, "best": True})
    return write_run(root, name, lines)


def test_plot_heatmap_and_curves_of_several_runs(tmp_path, capsys):
    a, b = fake_run(tmp_path, "a"), fake_run(tmp_path, "b", rates=False)
    out = tmp_path / "figs"
    assert main(["plot", str(a), str(b), "--output-dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["a-drop_pattern.png", "convergence.png"]
    assert all(p.stat().st_size > 1000 for p in out.iterdir())
    assert main(["plot", str(a)]) == 0 and (a / "convergence.png").is_file()  # one run: into its directory
    capsys.readouterr()


def test_mean_drop_matrix_averages_runs_at_the_steps_all_logged(tmp_path):
    from layerwise.plots import drop_heatmap, mean_drop_matrix

    a = write_run(tmp_path, "a", [{"step": 10, "drop/layer0": 0.1, "drop/layer1": 0.3},
                                    {"step": 20, "drop/layer0": 0.2, "drop/layer1": 0.4},
                                    {"step": 30, "drop/layer0": 0.9, "drop/layer1": 0.9}])
    b = write_run(tmp_path, "b", [{"step": 10, "drop/layer0": 0.3, "drop/layer1": 0.1},
                                    {"step": 20, "drop/layer0": 0.4}])  # stopped early, layer1 missing at 20
    steps, rates = mean_drop_matrix([a, b])
    assert steps.tolist() == [10, 20]
    np.testing.assert_allclose(rates, [[0.2, 0.3], [0.2, 0.4]])
    figure = drop_heatmap([a, b], tmp_path / "mean.png", title="cola attendout, seeds 0, 1")
    assert figure.stat().st_size > 1000
    from layerwise.errors import DataError

    with pytest.raises(DataError, match="no drop/layerN"):
        mean_drop_matrix([a, write_run(tmp_path, "none", [{"step": 10, "loss": 1.0}])])


def test_plot_errors_are_one_line(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "missing")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    run = fake_run(tmp_path, "norates", rates=False)
    assert main(["plot", str(run), "--kind", "heatmap"]) == 2
    assert "no run logged drop rates" in capsys.readouterr().err
    (run / "metrics.jsonl").write_text('{"step": 1}\nnot json\n', encoding="utf-8")
    assert main(["plot", str(run)]) == 2
    err = capsys.readouterr().err
    assert "metrics.jsonl:2: not a JSON record" in err and len(err.strip().splitlines()) == 1


def test_export_pattern_from_metrics(tmp_path, capsys):
    run = fake_run(tmp_path, "a")
    assert main(["export-pattern", str(run)]) == 0
    assert json.loads((run / "pattern.json").read_text())["rates"] == pytest.approx([0.3, 0.05])
    assert main(["export-pattern", str(run), "--which", "overall", "--output", str(tmp_path / "p.json")]) == 0
    assert json.loads((tmp_path / "p.json").read_text())["rates"] == pytest.approx([0.2, 0.05])
    assert main(["export-pattern", str(fake_run(tmp_path, "b", rates=False))]) == 2
    assert "no drop/layerN entries" in capsys.readouterr().err


def test_attendout_pattern_drives_scheduled_bernoulli(tiny_bert, tmp_path, capsys):
    data = write_cola(tmp_path / "data")
    learned = tmp_path / "attendout"
    assert run_cli(*base_args(tiny_bert, data, learned, "--dropout", "attendout", "--init-rate", "0.3")) == 0
    assert main(["export-pattern", str(learned)]) == 0
    rates = json.loads((learned / "pattern.json").read_text())["rates"]
    assert len(rates) == 2 and all(0 < r < 0.9 for r in rates)
    baseline = tmp_path / "baseline"
    assert run_cli(*base_args(tiny_bert, data, baseline, "--dropout", "scheduled_bernoulli",
                              "--pattern", str(learned / "pattern.json"))) == 0
    assert "drop/layer1" in read_metrics(baseline)[0]
    assert main(["plot", str(learned), str(baseline), "--output-dir", str(tmp_path / "figs")]) == 0
    names = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert names == ["attendout-drop_pattern.png", "baseline-drop_pattern.png", "convergence.png"]
    capsys.readouterr()


def test_convergence_curve_is_the_mean_over_seeds_with_a_std_band(tmp_path):
    from layerwise.plots import convergence, mean_curve

    steps, mean, std = mean_curve([[(10, 1.0), (20, 3.0)], [(10, 3.0), (20, 5.0), (30, 7.0)]])
    assert steps.tolist() == [10, 20, 30] and mean.tolist() == [2.0, 4.0, 7.0]
    assert std[:2] == pytest.approx([2 ** 0.5, 2 ** 0.5]) and np.isnan(std[2])  # one run at step 30: no band
    seeds = [fake_run(tmp_path, f"seed{k}") for k in range(2)]
    path = convergence({"attendout": seeds, "standard": [fake_run(tmp_path, "std")]}, tmp_path / "c.png")
    assert path.is_file() and path.stat().st_size > 1000


def test_plot_labels_runs_of_the_same_name_by_path(tmp_path):
    from layerwise.commands.plot import run_labels

    a, b, c = fake_run(tmp_path / "x", "run"), fake_run(tmp_path / "y", "run"), fake_run(tmp_path, "other")
    assert run_labels([a, b, c]) == {str(a): [a], str(b): [b], "other": [c]}

"""reproduce end to end on a tiny model and tiny data: the pooling grid with its table, skip on rerun, resume of an
interrupted run, and the attendout grid with the attendout -> scheduled_bernoulli dependency."""
from __future__ import annotations

import json
import re
import shutil

import pytest
import yaml

from layerwise.cli import main
from tiny import write_tiny_data


def table_rows(root):
    """The table lines of root/attendout.md."""
    return [line for line in (root / "attendout.md").read_text(encoding="utf-8").splitlines() if line[:1] == "|"]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return write_tiny_data(tmp_path_factory.mktemp("data"))


def test_pooling_grid_table_skip_and_resume(tiny_bert, tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["reproduce", "pooling", "--model", str(tiny_bert), "--data-dir", str(tiny_data), "--output-dir",
            str(out), "--seeds", "2", "--poolers", "avg_last,layer_att_cls", "--objectives", "supervised",
            "--pooler-lrs", "1e-3", "--max-steps", "2", "--eval-subset", "12", "--device", "cpu",
            "--set", "train.batch_size=4", "--set", "max_length=16", "--set", "static_sentences=8",
            "--set", "train.checkpoint_every=1"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "trained 4, resumed 0, already finished 0, failed 0" in printed
    runs = sorted((out / "runs").iterdir())
    assert len(runs) == 4 and all((r / "eval.json").is_file() and (r / "extras.json").is_file() for r in runs)
    md = (out / "pooling.md").read_text(encoding="utf-8")
    rows = [line for line in md.splitlines() if line.startswith("| supervised")]
    assert [r.split("|")[3].strip() for r in rows] == ["full", "full", "static", "cls_last", "avg_last"]
    cells = [[c.strip() for c in r.split("|")] for r in rows]
    assert all(" ± " in c[5] and c[9] == "2" for c in cells)  # mean ± std over 2 seeds
    paired = re.compile(r"^[+-]\d+\.\d\d \(p (n/a|\d\.\d{3}|\d\.\de-\d\d), 2 seeds\)$")
    assert cells[0][10] == "ref." and all(paired.match(c[10]) for c in cells[1:]), [c[10] for c in cells]
    data = json.loads((out / "pooling.json").read_text(encoding="utf-8"))
    full = next(r for r in data["rows"] if r["pooler"] == "layer_att_cls" and r["mode"] == "full")
    assert full["n"] == 2 and len(full["metrics"]["STS-B test"]["values"]) == 2 and "alignment" in full["metrics"]
    assert (out / "pooling.png").is_file()

    stamps = {r.name: (r / "eval.json").stat().st_mtime_ns for r in runs}
    assert main(args) == 0  # rerun: nothing is retrained
    assert "trained 0, resumed 0, already finished 4" in capsys.readouterr().out
    assert stamps == {r.name: (r / "eval.json").stat().st_mtime_ns for r in runs}

    victim = next(r for r in runs if "layer_att_cls" in r.name and "seed1" in r.name)
    assert (victim / "checkpoints" / "step-1").is_dir()
    (victim / "eval.json").unlink()  # interrupted after its step-1 checkpoint
    (victim / "extras.json").unlink()
    assert main(args) == 0
    assert "trained 0, resumed 1, already finished 3" in capsys.readouterr().out
    assert (victim / "eval.json").is_file() and (victim / "extras.json").is_file()
    assert all((r / "eval.json").stat().st_mtime_ns == stamps[r.name] for r in runs if r != victim)
    steps = [json.loads(line)["step"] for line in (victim / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and max(steps) == 2


def test_attendout_grid_runs_scheduled_bernoulli_on_the_learned_pattern(tiny_bert, tmp_path, capsys):
    from test_finetune import write_cola

    data, out = write_cola(tmp_path / "data", train=24, dev=10), tmp_path / "out"
    variants = tmp_path / "variants.yaml"
    variants.write_text("variants:\n  coop:\n    dropout: attendout\n    drop: {objective: cooperative}\n"
                        "per_task:\n  cola: {max_length: 32}\n", encoding="utf-8")
    assert main(["reproduce", "attendout", "--config", str(variants), "--model", str(tiny_bert), "--data-dir",
                 str(data), "--output-dir", str(out), "--seeds", "1", "--tasks", "cola", "--strategies",
                 "standard,scheduled_bernoulli,coop", "--max-steps", "2", "--device", "cpu", "--set",
                 "train.batch_size=8", "--set", "train.log_every=1"]) == 0
    printed = capsys.readouterr().out
    order = [line.split()[2].rsplit("-", 2)[0] for line in printed.splitlines()
             if line.startswith("[reproduce] running")]
    assert order == ["finetune-cola-standard", "finetune-cola-attendout", "finetune-cola-scheduled_bernoulli",
                     "finetune-cola-coop"]
    coop = yaml.safe_load(next((out / "runs").glob("finetune-cola-coop-seed0-*")).joinpath("config.yaml").read_text())
    assert coop["dropout"] == "attendout" and coop["drop"]["objective"] == "cooperative"
    attendout = next((out / "runs").glob("finetune-cola-attendout-seed0-*"))
    scheduled = next((out / "runs").glob("finetune-cola-scheduled_bernoulli-seed0-*"))
    pattern = json.loads((attendout / "pattern.json").read_text(encoding="utf-8"))
    assert len(pattern["rates"]) == 2
    config = yaml.safe_load((scheduled / "config.yaml").read_text(encoding="utf-8"))
    assert config["drop"]["pattern"] == str((attendout / "pattern.json").resolve())
    md = (out / "attendout.md").read_text(encoding="utf-8")
    assert "| strategy | cola matthews | cola p |" in md and "| standard |" in md and "ref." in md
    assert "| attendout |" in md and "n/a" in md  # one seed: no p-value
    assert "| coop |" in md and "`coop` = attendout with drop.objective=cooperative" in md
    assert "Config-file settings: `per_task.cola`: max_length=32." in md  # the table says what it ran
    assert "`--set`: train.batch_size=8, train.log_every=1." in md
    assert yaml.safe_load((scheduled / "config.yaml").read_text(encoding="utf-8"))["max_length"] == 32
    summary = json.loads((out / "attendout.json").read_text(encoding="utf-8"))
    assert summary["tasks"]["cola"]["strategies"]["attendout"]["paired"]["n"] == 1
    assert (out / "convergence-cola.png").is_file() and (out / "drop-heatmap-cola.png").is_file()
    assert (out / "drop-heatmap-cola-coop.png").is_file()  # a variant of attendout gets its own heatmap


def test_archive_keeps_records_without_weights_rebuilds_the_report_and_is_skipped(tiny_bert, tmp_path, capsys):
    from test_finetune import write_cola

    data, out, kept = write_cola(tmp_path / "data", train=24, dev=10), tmp_path / "out", tmp_path / "kept"
    grid = ["reproduce", "attendout", "--model", str(tiny_bert), "--data-dir", str(data), "--seeds", "1", "--tasks",
            "cola", "--strategies", "standard,scheduled_bernoulli", "--max-steps", "2", "--device", "cpu", "--set",
            "train.batch_size=8", "--set", "train.log_every=1"]
    assert main([*grid, "--output-dir", str(out)]) == 0
    assert main([*grid, "--output-dir", str(out), "--archive", str(kept)]) == 0
    assert "archived 3 finished run(s) of 3" in capsys.readouterr().out
    runs = sorted((kept / "runs").iterdir())
    assert len(runs) == 3 and all(path.is_file() for run in runs for path in run.iterdir())
    assert all((out / "runs" / run.name / "best").is_dir() for run in runs)  # the weights stayed behind
    attendout = next(run for run in runs if "-attendout-" in run.name)
    assert {"config.yaml", "metrics.jsonl", "results.json", "pattern.json"} <= {p.name for p in attendout.iterdir()}

    assert main([*grid, "--output-dir", str(kept), "--report"]) == 0
    assert table_rows(kept) == table_rows(out)  # the main table and the paired-test table, cell for cell
    starts = ("| standard |", "| attendout |", "| scheduled_bern")
    assert sum(row.startswith(starts) for row in table_rows(kept)) >= 3
    assert (kept / "convergence-cola.png").is_file() and (kept / "drop-heatmap-cola.png").is_file()

    restored = tmp_path / "restored"
    shutil.copytree(kept / "runs", restored / "runs")
    capsys.readouterr()
    assert main([*grid, "--output-dir", str(restored)]) == 0
    assert "[reproduce] running" not in capsys.readouterr().out  # every archived run counts as finished


def test_keep_records_copies_each_run_as_it_finishes(tiny_bert, tmp_path, capsys, monkeypatch):
    from layerwise.reproduce import archive
    from test_finetune import write_cola

    data, out, kept = write_cola(tmp_path / "data", train=24, dev=10), tmp_path / "out", tmp_path / "kept"
    grid = ["reproduce", "attendout", "--model", str(tiny_bert), "--data-dir", str(data), "--seeds", "1", "--tasks",
            "cola", "--strategies", "standard,scheduled_bernoulli", "--max-steps", "2", "--device", "cpu", "--set",
            "train.batch_size=8", "--output-dir", str(out)]
    copies: list[tuple[str, int]] = []  # (run copied, records already kept at that moment)
    real_copy = archive.copy_records

    def spy(run_dir, target):
        copies.append((run_dir.name, len(list((kept / "runs").glob("*"))) if (kept / "runs").is_dir() else 0))
        return real_copy(run_dir, target)

    monkeypatch.setattr(archive, "copy_records", spy)
    assert main([*grid, "--keep-records", str(kept)]) == 0
    assert [name.rsplit("-", 2)[0] for name, _ in copies] == [
        "finetune-cola-standard", "finetune-cola-attendout", "finetune-cola-scheduled_bernoulli"]
    assert [already for _, already in copies] == [0, 1, 2]  # one run at a time, right after it finished
    runs = sorted((kept / "runs").iterdir())
    assert [run.name for run in runs] == sorted(p.name for p in (out / "runs").iterdir())
    assert all(path.is_file() for run in runs for path in run.iterdir())  # records only, no weights
    assert main([*grid[:-1], str(kept), "--report"]) == 0
    assert table_rows(kept) == table_rows(out)

    shutil.rmtree(kept)
    copies.clear()
    assert main([*grid, "--keep-records", str(kept)]) == 0  # nothing left to train: the finished runs are kept
    assert len(copies) == 3 and len(list((kept / "runs").iterdir())) == 3


@pytest.mark.parametrize("option, extra, needle", [
    ("--archive", ["--report"], "run it alone"), ("--archive", [], "is the output directory itself"),
    ("--keep-records", [], "is the output directory itself"), ("--keep-records", ["--dry-run"], "trains nothing")])
def test_archive_bad_combinations_are_one_line_errors(tiny_bert, tmp_path, capsys, option, extra, needle):
    out = tmp_path / "out"
    target = str(out) if not extra else str(tmp_path / "kept")
    code = main(["reproduce", "attendout", "--model", str(tiny_bert), "--data-dir", str(tmp_path), "--output-dir",
                 str(out), "--tasks", "cola", option, target, *extra])
    err = capsys.readouterr().err
    assert code != 0 and needle in err and "Traceback" not in err


def test_keep_records_under_a_shard_copies_only_that_shards_runs(tiny_bert, tmp_path):
    from test_finetune import write_cola

    data, out = write_cola(tmp_path / "data", train=24, dev=10), tmp_path / "out"
    grid = ["reproduce", "attendout", "--model", str(tiny_bert), "--data-dir", str(data), "--seeds", "1", "--tasks",
            "cola", "--strategies", "standard,none", "--max-steps", "1", "--device", "cpu", "--set",
            "train.batch_size=8", "--output-dir", str(out)]
    assert main(grid) == 0
    kept = {}
    for k in (0, 1):
        assert main([*grid, "--shard", f"{k}/2", "--keep-records", str(tmp_path / f"kept{k}")]) == 0
        kept[k] = {run.name.rsplit("-", 2)[0] for run in (tmp_path / f"kept{k}" / "runs").iterdir()}
    assert kept == {0: {"finetune-cola-standard"}, 1: {"finetune-cola-none"}}


def test_time_limit_stops_a_training_run_with_a_checkpoint_and_a_rerun_resumes_it(tiny_bert, tmp_path, capsys,
                                                                                 monkeypatch):
    from layerwise.training import stopping
    from layerwise.training.loop import Trainer
    from test_finetune import write_cola
    from test_reliability_helpers import after_optimizer_step

    def time_is_up(_) -> None:  # the first run outlasts the limit: its clock jumps past it at step 1
        if stopping._LIMIT[0] is not None:
            stopping._LIMIT[0] = (0.0, stopping._LIMIT[0][1])

    monkeypatch.setattr(Trainer, "_optimizer_step", after_optimizer_step(1, time_is_up))
    data, out = write_cola(tmp_path / "data", train=24, dev=10), tmp_path / "out"
    grid = ["reproduce", "attendout", "--model", str(tiny_bert), "--data-dir", str(data), "--seeds", "1", "--tasks",
            "cola", "--strategies", "standard,none", "--max-steps", "3", "--device", "cpu", "--set",
            "train.batch_size=8", "--output-dir", str(out)]
    assert main([*grid, "--time-limit", "1h"]) == 0
    lines = capsys.readouterr().out.splitlines()
    stopped = [line for line in lines if line.startswith("[reproduce] stopped finetune-cola-")]
    assert len(stopped) == 1 and "at step 1 of 3 (--time-limit)" in stopped[0], lines
    assert "2 run(s) left; rerun the same command to resume it and go on" in stopped[0]
    run_dir = next((out / "runs").iterdir())
    assert (run_dir / "checkpoints" / "step-1").is_dir() and not (run_dir / "results.json").exists()
    assert not (out / "failures.jsonl").exists()

    assert main(grid) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"[reproduce] resuming {run_dir.name}" in lines
    assert all((run / "results.json").is_file() for run in (out / "runs").iterdir())

"""reproduce under torchrun: every run of the grid trained by 2 gloo processes together (rank 0 plans, logs, reports
and records failures), the same results as one process with the same global batch, skip/resume decided on rank 0,
a failure on one rank recorded without hanging, and the launcher's option checks."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from layerwise.cli import main
from tiny import make_tiny_model_dir, write_tiny_data

TESTS = Path(__file__).resolve().parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny model without dropout (two processes then train exactly what one does) and tiny data."""
    root = tmp_path_factory.mktemp("dist")
    model = make_tiny_model_dir(root / "model", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return model, write_tiny_data(root / "data")


def _args(setup, out: Path) -> list[str]:
    model, data = setup
    return ["reproduce", "pooling", "--model", str(model), "--data-dir", str(data), "--output-dir", str(out),
            "--seeds", "2", "--poolers", "avg_last", "--objectives", "supervised", "--max-steps", "2",
            "--eval-subset", "12", "--device", "cpu", "--set", "train.batch_size=4", "--set", "train.lr=1e-3",
            "--set", "max_length=16", "--set", "static_sentences=8", "--set", "train.checkpoint_every=1"]


def _torchrun(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(TORCHRUN + args, capture_output=True, text=True, timeout=300, cwd=TESTS)


def _dev(run: Path) -> dict:
    return json.loads((run / "eval.json").read_text(encoding="utf-8"))["trained"]["full"]["stsb_dev"]


def test_torchrun_grid_equals_one_process_and_reports_once(setup, tmp_path, capsys):
    assert main(_args(setup, tmp_path / "one")) == 0
    capsys.readouterr()
    proc = _torchrun(["-m", "layerwise.cli", *_args(setup, tmp_path / "two")])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = proc.stdout
    one, two = (sorted((tmp_path / n / "runs").iterdir()) for n in ("one", "two"))
    assert [r.name for r in two] == [r.name for r in one] and len(two) == 2  # same keys: batch_size is global
    for run in two:
        assert out.count(f"[reproduce] running {run.name}") == 1 and out.count(f"finished {run.name}") == 1
        assert yaml.safe_load((run / "config.yaml").read_text())["train"]["batch_size"] == 2  # per process
    assert out.count("trained 2, resumed 0, already finished 0, failed 0") == 1
    assert out.count("pooling.md") == 1 and (tmp_path / "two" / "pooling.md").is_file()
    assert not (tmp_path / "two" / "failures.jsonl").exists()
    for a, b in zip(one, two):
        assert _dev(b)["spearman"] == pytest.approx(_dev(a)["spearman"], abs=1e-6)
        assert _dev(b)["pearson"] == pytest.approx(_dev(a)["pearson"], abs=1e-3)

    victim = two[1]
    stamp = (two[0] / "eval.json").stat().st_mtime_ns
    (victim / "eval.json").unlink()  # interrupted after its step-1 checkpoint: resumed by both processes
    proc = _torchrun(["-m", "layerwise.cli", *_args(setup, tmp_path / "two")])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.count("trained 0, resumed 1, already finished 1, failed 0") == 1
    assert proc.stdout.count(f"[reproduce] resuming {victim.name}") == 1
    assert (victim / "eval.json").is_file() and (two[0] / "eval.json").stat().st_mtime_ns == stamp


def test_failure_on_rank1_only_is_recorded_once_and_the_grid_goes_on(setup, tmp_path):
    out = tmp_path / "out"
    proc = _torchrun([str(TESTS / "dist_worker.py"), "-seed0-", *_args(setup, out)])
    assert proc.returncode == 1, proc.stderr[-3000:]  # a run failed in this invocation
    lines = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert len(lines) == 1 and "-seed0-" in lines[0]["key"] and lines[0]["rank"] == 1
    assert "injected failure on rank 1" in lines[0]["error"]
    assert proc.stdout.count("FAILED") == 1 and "trained 1, resumed 0, already finished 0, failed 1" in proc.stdout
    seed1 = next((out / "runs").glob("embed-sup-avg_last-seed1-*"))
    assert (seed1 / "eval.json").is_file() and (out / "pooling.md").is_file()  # the next run trained after it


@pytest.mark.parametrize("rank", ["0", "1"])
def test_launcher_options(setup, tmp_path, capsys, monkeypatch, rank):
    """Under a launcher (env only, no process group needed): --shard is refused in one line on rank 0 (quietly
    elsewhere); --dry-run and --report are rank 0's alone; an indivisible global batch is refused."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    args = _args(setup, tmp_path)
    assert main(args + ["--shard", "0/2", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert (len(err.strip().splitlines()) == 1 and "--shard" in err and "torchrun" in err) if rank == "0" else not err
    assert main(args + ["--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert ("ESTIMATED time left" in printed) if rank == "0" else printed == ""
    assert main(args + ["--set", "train.batch_size=5"]) == 2
    err = capsys.readouterr().err
    assert ("train.batch_size 5" in err and "divide" in err) if rank == "0" else not err
    assert not (tmp_path / "runs").exists()

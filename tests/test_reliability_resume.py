"""Issue 8, parts 2, 3 and 5b: kill -9 and resume, interrupted checkpoint saves, NaN losses, bounded checkpoints."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from test_reliability_helpers import REPO, error_lines, python_cli, run_cli, write_data

STEPS = 40


def train_args(data: Path, model: Path, out: Path, *extra: str) -> list[str]:
    """40 steps of batch 4 over 28 triplets (7 batches an epoch, ~6 epochs); a checkpoint after every step."""
    return ["train-embed", "--data-dir", str(data), "--model", str(model), "--output-dir", str(out),
            "--max-steps", str(STEPS), "--batch-size", "4", "--eval-every", "5", "--log-every", "1",
            "--set", "train.checkpoint_every=1", "--set", "train.progress=false", "--static-sentences", "8", *extra]


def final_tensors(run: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for name in ("model.safetensors", "pooler.safetensors"):
        tensors.update({f"{name}:{k}": v for k, v in load_file(str(run / "final" / name)).items()})
    return tensors


def comparable_metrics(run: Path) -> list[dict]:
    """metrics.jsonl without the wall-clock fields."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    return [{k: v for k, v in r.items() if k != "examples_per_s"} for r in records]


def comparable_eval(run: Path) -> str:
    results = json.loads((run / "eval.json").read_text(encoding="utf-8"))
    results.pop("train_seconds")
    return json.dumps(results, sort_keys=True)  # NaN-safe equality (the tiny model's STS scores can be NaN)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_data(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, data: Path, tiny_bert: Path) -> Path:
    """The uninterrupted run, in a subprocess like the killed one."""
    out = tmp_path_factory.mktemp("reference") / "run"
    proc = subprocess.run(python_cli(*train_args(data, tiny_bert, out)), capture_output=True, text=True, cwd=REPO,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return out


def assert_same_run(run: Path, reference: Path) -> None:
    got, want = final_tensors(run), final_tensors(reference)
    assert got.keys() == want.keys()
    for key in want:
        assert torch.equal(got[key], want[key]), f"{key} differs after resume"
    assert comparable_metrics(run) == comparable_metrics(reference) or \
        json.dumps(comparable_metrics(run)) == json.dumps(comparable_metrics(reference))
    assert comparable_eval(run) == comparable_eval(reference)


def test_sigkill_mid_run_then_resume_matches_an_uninterrupted_run(tmp_path: Path, data: Path, tiny_bert: Path,
                                                                  reference_run: Path, capsys):
    out = tmp_path / "run"
    proc = subprocess.Popen(python_cli(*train_args(data, tiny_bert, out)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=REPO)
    deadline = time.monotonic() + 300
    killed_after = None
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            steps = [int(p.name[5:]) for p in (out / "checkpoints").glob("step-*") if p.name[5:].isdigit()]
            if steps and max(steps) >= 3:  # some checkpoints written, most of the 40 steps still to go
                killed_after = max(steps)
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.01)
    finally:
        if proc.poll() is None and killed_after is None:
            proc.kill()
        proc.wait(timeout=60)
    assert killed_after is not None, f"the run ended before a checkpoint appeared: {proc.stderr.read()!r}"
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "eval.json").exists(), "the run finished before the kill: the test proved nothing"
    assert not (out / "final").exists()

    # A save interrupted by the kill leaves at most a *.tmp directory; plant more debris of the same kinds:
    # a temp dir that claims a later step and a step dir without its state file. Resume must ignore both.
    bogus = out / "checkpoints" / f"step-{STEPS - 1}.tmp"
    bogus.mkdir(parents=True, exist_ok=True)
    (bogus / "trainer_state.json").write_text('{"global_step": 39}', encoding="utf-8")
    partial = out / "checkpoints" / f"step-{STEPS - 2}"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"\0" * 10)

    code, _, err = run_cli(train_args(data, tiny_bert, out, "--resume"), capsys)
    assert code == 0, err
    assert_same_run(out, reference_run)


def test_interrupted_checkpoint_save_keeps_the_previous_one(tmp_path: Path, monkeypatch):
    """A crash while writing step-N leaves step-(N-1) intact and no step-N; the temp dir is never listed."""
    from layerwise.training import checkpoint as ckpt

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    root = tmp_path / "checkpoints"
    ckpt.save_checkpoint(root / "step-1", model, optimizer, scheduler, {"global_step": 1}, {})
    saved = {k: v.clone() for k, v in model.state_dict().items()}

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed during torch.save")

    with torch.no_grad():
        model.weight.add_(1.0)
    monkeypatch.setattr(ckpt.torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(root / "step-2", model, optimizer, scheduler, {"global_step": 2}, {})
    monkeypatch.undo()
    assert (root / "step-2.tmp").is_dir() and not (root / "step-2").exists()
    assert ckpt.list_checkpoints(root) == [root / "step-1"]
    state = ckpt.load_checkpoint(root / "step-1", model, optimizer, scheduler, {})
    assert state["global_step"] == 1
    for key, value in model.state_dict().items():
        assert torch.equal(value, saved[key])
    # the next save of the same step replaces the leftover temp dir
    ckpt.save_checkpoint(root / "step-2", model, optimizer, scheduler, {"global_step": 2}, {})
    assert ckpt.list_checkpoints(root) == [root / "step-1", root / "step-2"]
    assert not (root / "step-2.tmp").exists()


def test_keep_last_bounds_the_checkpoints_on_disk(tmp_path: Path, data: Path, tiny_bert: Path, capsys):
    out = tmp_path / "run"
    argv = train_args(data, tiny_bert, out, "--keep-last", "2")
    argv[argv.index("--max-steps") + 1] = "8"
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-6", "step-7"]
    assert (out / "best" / "model.safetensors").is_file()  # the best model is kept besides the last N


# ----------------------------------------------------------------------------------------------- NaN losses


@pytest.fixture
def nan_objective():
    """Swap the registered `supervised` objective for one that returns NaN on the calls listed in `bad` (1-based).

    (A new name would not do: train-embed reads triplets only for the objectives supervised and hybrid.)
    The registry entry is restored afterwards.
    """
    from layerwise.registry import OBJECTIVES

    OBJECTIVES.names()  # load the built-ins first
    original = OBJECTIVES._items["supervised"]
    impl = original() if isinstance(original, type) else original  # a class (instantiated per run) or a function
    calls = {"n": 0, "bad": set()}

    def nan_at(encoder, batch, cfg):
        calls["n"] += 1
        loss = impl(encoder, batch, cfg)
        return loss * float("nan") if calls["n"] in calls["bad"] else loss

    OBJECTIVES._items["supervised"] = nan_at
    yield calls
    OBJECTIVES._items["supervised"] = original


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_checkpoint(tmp_path: Path, data: Path, tiny_bert: Path,
                                                                      nan_objective, capsys):
    nan_objective["bad"] = {4}
    out = tmp_path / "run"
    code, _, err = run_cli(train_args(data, tiny_bert, out), capsys)
    assert code == 3
    assert "Traceback" not in err
    [line] = error_lines(err)
    assert "loss is nan at step 4" in line and "step-3" in line and "on_nan=skip" in line
    assert not (out / "eval.json").exists() and not (out / "final").exists()
    from layerwise.training.checkpoint import list_checkpoints

    kept = list_checkpoints(out / "checkpoints")
    assert kept and kept[-1].name == "step-3"
    state = json.loads((kept[-1] / "trainer_state.json").read_text(encoding="utf-8"))
    assert state["global_step"] == 3
    weights = load_file(str(kept[-1] / "model.safetensors"))
    assert all(torch.isfinite(t).all() for t in weights.values())


def test_nan_loss_skipped_with_on_nan_skip(tmp_path: Path, data: Path, tiny_bert: Path, nan_objective, capsys):
    nan_objective["bad"] = {3, 5}
    out = tmp_path / "run"
    argv = train_args(data, tiny_bert, out, "--set", "train.on_nan=skip")
    argv[argv.index("--max-steps") + 1] = "8"
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    results = json.loads((out / "eval.json").read_text(encoding="utf-8"))
    assert results["skipped_batches"] == 2
    assert results["steps"] == 8  # skipped batches are not optimizer steps
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in records if "skipped_batch" in r] == [3, 4]


def test_divergence_in_a_subprocess_exits_3_without_traceback(tmp_path: Path, data: Path, tiny_bert: Path):
    out = tmp_path / "run"
    argv = train_args(data, tiny_bert, out, "--lr", "1e30")
    argv[argv.index("--max-steps") + 1] = "8"
    proc = subprocess.run(python_cli(*argv), capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    [line] = error_lines(proc.stderr)
    assert line.startswith("layerwise train-embed: error: loss is nan at step ") or "loss is inf" in line
    assert not (out / "eval.json").exists()

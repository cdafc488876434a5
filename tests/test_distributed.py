"""Distributed contrastive training (2 CPU processes, gloo) and GradCache equal the single-process big batch."""
from __future__ import annotations

import random

import pytest
import torch
import torch.multiprocessing as mp

from dist_worker import contrastive_grads, worker
from tiny import WORDS

rng = random.Random(0)
TRIPLETS = [tuple(" ".join(rng.sample(WORDS, 5)) for _ in range(3)) for _ in range(8)]
SENTENCES = [" ".join(rng.sample(WORDS, 6)) for _ in range(8)]


def _assert_same(reference, other):
    loss_a, grads_a = reference
    loss_b, grads_b = other
    assert loss_b == pytest.approx(loss_a, rel=1e-5)
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], atol=2e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("objective", ["supervised", "unsupervised", "hybrid"])
def test_grad_cache_equals_plain_backward(tiny_bert, objective):
    plain = contrastive_grads(str(tiny_bert), objective, TRIPLETS, SENTENCES, 8, grad_cache=0)
    cached = contrastive_grads(str(tiny_bert), objective, TRIPLETS, SENTENCES, 8, grad_cache=3)
    _assert_same(plain, cached)


@pytest.mark.parametrize("objective,grad_cache", [("supervised", 0), ("hybrid", 0), ("supervised", 2)])
def test_two_gloo_processes_equal_one_process_with_the_doubled_batch(tiny_bert, tmp_path, objective, grad_cache):
    single = contrastive_grads(str(tiny_bert), objective, TRIPLETS, SENTENCES, 8, grad_cache=0)
    args = (str(tiny_bert), objective, TRIPLETS, SENTENCES, 4, grad_cache)
    mp.spawn(worker, args=(2, str(tmp_path / "init"), str(tmp_path), args), nprocs=2, join=True)
    for rank in (0, 1):
        result = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        _assert_same(single, (result["loss"], result["grads"]))


def test_torchrun_runs_train_embed_on_two_processes(tiny_bert, tmp_path):
    """The real launcher: two gloo processes, one run directory written by the main process only."""
    import json
    import subprocess
    import sys

    from tiny import write_tiny_data

    data = write_tiny_data(tmp_path / "data")
    out = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "layerwise.cli",
               "train-embed", "--model", str(tiny_bert), "--data-dir", str(data), "--output-dir", str(out),
               "--batch-size", "4", "--max-steps", "3", "--eval-every", "2", "--max-length", "16",
               "--static-sentences", "10", "--set", "train.progress=false"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("trained, mode full") == 1
    results = json.loads((out / "eval.json").read_text())
    assert results["steps"] == 3
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if "eval" in line] == [2, 3]


def _write_tiny_cola(root):
    rng = random.Random(1)
    folder = root / "glue" / "CoLA"
    folder.mkdir(parents=True)
    for split, n in (("train", 32), ("dev", 8)):
        rows = [f"src\t{rng.randint(0, 1)}\t\t{' '.join(rng.sample(WORDS, 5))} ." for _ in range(n)]
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def _finetune_command(model, data, out, dropout, processes, batch_size):
    import sys

    launcher = ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes)]
                if processes > 1 else [sys.executable])
    return launcher + ["-m", "layerwise.cli", "finetune", "--model", str(model), "--task", "cola", "--data-dir",
                       str(data), "--dropout", dropout, "--output-dir", str(out), "--batch-size", str(batch_size),
                       "--max-steps", "3", "--seed", "0", "--set", "train.progress=false"]


def test_torchrun_finetune_equals_one_process_with_the_doubled_batch(tmp_path):
    """No dropout anywhere: two processes of batch 4 must train the same weights as one process of batch 8."""
    import subprocess

    from safetensors.torch import load_file

    from tiny import make_tiny_model_dir

    model = make_tiny_model_dir(tmp_path / "model", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    data = _write_tiny_cola(tmp_path / "data")
    for name, processes, batch in (("one", 1, 8), ("two", 2, 4)):
        proc = subprocess.run(_finetune_command(model, data, tmp_path / name, "none", processes, batch),
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    one, two = (load_file(str(tmp_path / n / "final" / "model.safetensors")) for n in ("one", "two"))
    assert one.keys() == two.keys()
    for key in one:
        torch.testing.assert_close(two[key], one[key], atol=1e-5, rtol=1e-4, msg=key)


def test_torchrun_finetune_with_attendout_saves_gnet_once(tmp_path):
    import subprocess

    data = _write_tiny_cola(tmp_path / "data")
    from tiny import make_tiny_model_dir

    model = make_tiny_model_dir(tmp_path / "model")
    proc = subprocess.run(_finetune_command(model, data, tmp_path / "run", "attendout", 2, 4),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("run directory:") == 1
    assert (tmp_path / "run" / "results.json").is_file() and (tmp_path / "run" / "gnet").is_dir()


def test_sigterm_on_one_torchrun_process_stops_both_with_one_checkpoint_and_resume_finishes(tiny_bert, tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    from tiny import write_tiny_data

    data, out = write_tiny_data(tmp_path / "data"), tmp_path / "run"
    args = ["train-embed", "--model", str(tiny_bert), "--data-dir", str(data), "--output-dir", str(out),
            "--batch-size", "4", "--max-steps", "6", "--eval-every", "4", "--max-length", "16",
            "--static-sentences", "10", "--set", "train.progress=false"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    worker_file = str(Path(__file__).with_name("dist_worker.py"))
    proc = subprocess.run([*launcher, worker_file, "--sigterm-rank1-at", "2", *args], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode != 0
    assert "stopped at step 2 of 6 (another process was asked to stop)" in proc.stderr, proc.stderr[-3000:]
    assert "stopped at step 2 of 6 (SIGTERM)" in proc.stderr  # rank 1, which got the signal
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-2"] and not (out / "eval.json").exists()

    proc = subprocess.run([*launcher, "-m", "layerwise.cli", *args, "--resume"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "eval.json").read_text())["steps"] == 6

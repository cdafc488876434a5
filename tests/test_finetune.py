"""`layerwise finetune`: tiny models on small files for every strategy, bad input, and the real default model."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from layerwise.cli import main
from layerwise.training.checkpoint import STATE_FILE, list_checkpoints
from layerwise.training.finetune import FinetuneConfig, finetune

WORDS = "the man dog cat plays runs eats sits on in park street happy sad big small".split()


def sentence(i: int) -> str:
    return " ".join(WORDS[(i * k + 3) % len(WORDS)] for k in range(1, 4 + i % 5)) + "."


def write_cola(root: Path, train: int = 40, dev: int = 12) -> Path:
    folder = root / "glue" / "CoLA"
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", train), ("dev", dev)):
        rows = [f"src\t{i % 2}\t{'' if i % 2 else '*'}\t{sentence(i)}" for i in range(n)]
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def run_cli(*args: str) -> int:
    return main(["finetune", "--progress", "false", *args])


def base_args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["--model", str(model), "--data-dir", str(data), "--output-dir", str(out), "--max-steps", "3",
            "--batch-size", "8", "--log-every", "1", *extra]


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("strategy, extra", [
    ("none", []), ("standard", ["--rate", "0.2"]), ("attendout", ["--granularity", "token"]),
    ("layerdrop", ["--rate", "0.3"]), ("attn_layerdrop", []), ("scheduled_bernoulli", ["--rates", "0.1,0.3"]),
])
def test_every_strategy_runs_and_logs_drop_rates(tiny_bert, tmp_path, strategy, extra):
    data, run = write_cola(tmp_path / "data"), tmp_path / "run"
    assert run_cli(*base_args(tiny_bert, data, run, "--dropout", strategy, *extra)) == 0
    logs = read_metrics(run)
    train_lines = [r for r in logs if "loss" in r]
    assert [r["step"] for r in train_lines] == [1, 2, 3] and all("task_loss" in r for r in train_lines)
    if strategy != "none":
        assert all("drop/layer0" in r and "drop/layer1" in r for r in train_lines)
    assert any("eval" in r and "matthews" in r["eval"] for r in logs)
    results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert results["steps"] == 3 and results["dropout"] == strategy
    pattern = json.loads((run / "drop_pattern.json").read_text(encoding="utf-8"))
    assert len(pattern["overall"]) == 2
    assert (run / "best" / "config.json").is_file() and (run / "config.yaml").is_file()
    assert (run / "gnet" / "best" / "gnet.safetensors").is_file() == (strategy == "attendout")
    assert "layerwise" not in (run / "best" / "config.json").read_text(encoding="utf-8")


def test_regression_and_mnli_two_dev_splits(tiny_roberta, tmp_path):
    data = tmp_path / "data"
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    (data / "STS-B").mkdir(parents=True)
    for split in ("train", "dev"):
        rows = [f"{i}\tg\tf\t2012\t{i}\ts\ts\t{sentence(i)}\t{sentence(i + 1)}\t{i % 6}" for i in range(20)]
        (data / "STS-B" / f"{split}.tsv").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    assert run_cli(*base_args(tiny_roberta, data, tmp_path / "stsb", "--task", "stsb")) == 0
    assert set(read_metrics(tmp_path / "stsb")[-1]["eval"]) == {"spearman", "pearson"}
    header = "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tgold_label"
    labels = ("entailment", "neutral", "contradiction")
    (data / "MNLI").mkdir()
    for split in ("train", "dev_matched", "dev_mismatched"):
        rows = [f"{i}\t1\t1\tg\t{sentence(i)}\t{sentence(i + 2)}\t{labels[i % 3]}" for i in range(18)]
        (data / "MNLI" / f"{split}.tsv").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    assert run_cli(*base_args(tiny_roberta, data, tmp_path / "mnli", "--task", "MNLI", "--dropout", "attendout")) == 0
    assert set(read_metrics(tmp_path / "mnli")[-1]["eval"]) == {"accuracy", "accuracy_mm"}


def one_line_error(capsys, code: int, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("layerwise finetune: error:"), err
    assert all(n in err for n in needles), err
    return err


def test_bad_input_is_one_line_and_exit_2(tiny_bert, tmp_path, capsys):
    data = write_cola(tmp_path / "data")
    run = str(tmp_path / "run")
    one_line_error(capsys, run_cli("--task", "colaa", "--data-dir", str(data)), "did you mean 'cola'")
    one_line_error(capsys, run_cli("--dropout", "atendout", "--data-dir", str(data)), "did you mean 'attendout'")
    one_line_error(capsys, run_cli("--task", "rte", "--data-dir", str(data), "--output-dir", run),
                   "no rte train file found")
    dev = data / "glue" / "CoLA" / "dev.tsv"
    dev.write_text("src\t1\t\tFine.\nsrc\t1\tOnly three\n", encoding="utf-8")
    one_line_error(capsys, run_cli(*base_args(tiny_bert, data, Path(run))), "dev.tsv:2", "expected 4")
    dev.write_text("src\t1\t\tFine.\nsrc\tyes\t\tBad label.\n", encoding="utf-8")
    one_line_error(capsys, run_cli(*base_args(tiny_bert, data, Path(run))), "dev.tsv:2", "bad label 'yes'")
    one_line_error(capsys, run_cli("--set", "drop.rate=1.5", "--data-dir", str(data)), "drop.rate")
    assert not Path(run).exists()  # nothing written for bad input


@pytest.mark.slow
def test_default_model_on_200_cola_examples(real_data, tmp_path):
    cfg = FinetuneConfig(task="cola", data_dir=str(real_data), dropout="attendout", subset=200)
    cfg.train.max_steps, cfg.train.batch_size, cfg.train.log_every, cfg.train.progress = 3, 16, 1, False
    done = finetune(cfg, tmp_path / "run", log=lambda _: None)
    assert done.results["steps"] == 3 and done.results["train_examples"] == 200
    assert done.results["eval_examples"] == {"dev": 200}
    assert "matthews" in done.results["best_eval"]
    logs = read_metrics(tmp_path / "run")
    assert all(f"drop/layer{i}" in logs[0] and f"drop/layer{i}/head11" in logs[0] for i in range(6))
    # The saved model is a plain transformers model: loaded with no layerwise code, same predictions.
    texts = ["The book was read by the student.", "Book the read student the was."]
    script = (
        "import json, sys, torch\n"
        "from transformers import AutoModelForSequenceClassification, AutoTokenizer\n"
        f"path = {str(tmp_path / 'run' / 'best')!r}\n"
        "model = AutoModelForSequenceClassification.from_pretrained(path).eval()\n"
        "tok = AutoTokenizer.from_pretrained(path)\n"
        f"with torch.no_grad(): logits = model(**tok({texts!r}, padding=True, return_tensors='pt')).logits\n"
        "assert not any(m.startswith('layerwise') for m in sys.modules)\n"
        "print(json.dumps(logits.tolist()))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    model = done.model.eval()
    with torch.no_grad():
        expected = model(**done.tokenizer(texts, padding=True, return_tensors="pt")).logits
    assert torch.allclose(torch.tensor(json.loads(out.stdout.strip().splitlines()[-1])), expected, atol=1e-5)


def test_resume_reproduces_the_uninterrupted_run(tiny_bert, tmp_path):
    from safetensors.torch import load_file

    data = write_cola(tmp_path / "data")
    cfg = FinetuneConfig(model=str(tiny_bert), data_dir=str(data), dropout="attendout")
    cfg.train.max_steps, cfg.train.batch_size, cfg.train.checkpoint_every, cfg.train.progress = 4, 8, 2, False
    cfg.train.log_every = 1
    run = tmp_path / "run"
    finetune(cfg, run, log=lambda _: None)
    first = {name: load_file(str(run / name)) for name in ("final/model.safetensors", "gnet/final/gnet.safetensors")}
    assert (run / "checkpoints" / "step-2").is_dir()
    (run / "results.json").unlink()
    last = list_checkpoints(run / "checkpoints")[-1]
    before = json.loads((last / STATE_FILE).read_text(encoding="utf-8"))["train_seconds"]
    finetune(cfg, run, resume=True, log=lambda _: None)
    for name, tensors in first.items():
        again = load_file(str(run / name))
        assert all(torch.equal(tensors[k], again[k]) for k in tensors), name
    assert [r["step"] for r in read_metrics(run) if "loss" in r] == [1, 2, 3, 4]
    # the resumed run's training time counts the time before its checkpoint too (dry-run estimates read it)
    after = json.loads((run / "results.json").read_text(encoding="utf-8"))["train_seconds"]  # rounded to 0.1 s
    assert before > 0 and after >= round(before, 1)

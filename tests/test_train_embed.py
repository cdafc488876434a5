"""train-embed on a tiny model and tiny data in the real layouts: objectives, run directory, resume, refusal."""
from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.torch import load_file

import layerwise
from layerwise.cli import main
from layerwise.registry import OBJECTIVES
from tiny import write_tiny_data


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return write_tiny_data(tmp_path_factory.mktemp("data"))


def _train(model, data, out, *extra):
    return main(["train-embed", "--model", str(model), "--data-dir", str(data), "--output-dir", str(out),
                 "--batch-size", "4", "--max-steps", "4", "--eval-every", "2", "--max-length", "16",
                 "--static-sentences", "20", "--set", "train.progress=false", *extra])


@pytest.mark.parametrize("objective", OBJECTIVES.names())
def test_each_objective_trains_and_writes_a_complete_run(tiny_bert, tiny_data, tmp_path, objective, capsys):
    out = tmp_path / "run"
    assert _train(tiny_bert, tiny_data, out, "--objective", objective, "--pooler", "layer_att_cls") == 0
    for name in ("config.yaml", "metrics.jsonl", "eval.json", "best/model.safetensors", "best/pooler.safetensors",
                 "best/layerwise_pooler.json", "best/tokenizer.json", "final/model.safetensors"):
        assert (out / name).exists(), name
    results = json.loads((out / "eval.json").read_text())
    assert set(results["trained"]) == {"full", "static", "cls_last", "avg_last"}
    assert results["steps"] == 4
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if "eval" in line] == [2, 4]
    assert all(np.isfinite(line["loss"]) for line in lines if "loss" in line)
    printed = capsys.readouterr().out
    assert "untrained (layer_att_cls)" in printed and "trained, mode static" in printed
    static = load_file(str(out / "best" / "pooler.safetensors"))["attention.static_weights"]
    assert abs(float(static.sum()) - 1) < 1e-5 and float(static.std()) > 0  # calibrated, not the uniform default


def test_training_changes_the_backbone_and_pooler(tiny_bert, tiny_data, tmp_path):
    out = tmp_path / "run"
    assert _train(tiny_bert, tiny_data, out, "--pooler", "weighted_layers", "--set", "train.lr=1e-3") == 0
    before = layerwise.load(str(tiny_bert), pooling="weighted_layers")
    after = layerwise.load(str(out / "final"))
    texts = ["a man is playing", "the dog runs"]
    assert not np.allclose(before.encode(texts), after.encode(texts))
    assert not np.allclose(after.pooler.layer_weights.detach().numpy(), 1.0)


def test_refuses_existing_run_and_resumes_a_finished_one(tiny_bert, tiny_data, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(tiny_bert, tiny_data, out, "--pooler", "avg_last") == 0
    capsys.readouterr()
    assert _train(tiny_bert, tiny_data, out, "--pooler", "avg_last") == 2
    err = capsys.readouterr().err
    assert "already holds a finished run" in err and "--overwrite" in err and len(err.strip().splitlines()) == 1
    assert _train(tiny_bert, tiny_data, out, "--pooler", "avg_last", "--resume") == 0
    assert "already finished" in capsys.readouterr().out
    assert _train(tiny_bert, tiny_data, out, "--pooler", "avg_last", "--overwrite") == 0


def test_same_seed_gives_same_weights(tiny_bert, tiny_data, tmp_path):
    for name in ("a", "b"):
        assert _train(tiny_bert, tiny_data, tmp_path / name, "--pooler", "layer_att_res") == 0
    a, b = (load_file(str(tmp_path / n / "final" / "pooler.safetensors")) for n in ("a", "b"))
    for key in a:
        np.testing.assert_array_equal(a[key].numpy(), b[key].numpy())


def test_config_file_and_set_overrides(tiny_bert, tiny_data, tmp_path, capsys):
    config = tmp_path / "cfg.yaml"
    config.write_text(f"model: {tiny_bert}\npooler: cls_last\ntrain:\n  batch_size: 4\n  lr: 1.0e-4\n")
    out = tmp_path / "run"
    code = main(["train-embed", "--config", str(config), "--data-dir", str(tiny_data), "--output-dir", str(out),
                 "--max-steps", "2", "--set", "train.lr=3e-5", "--set", "train.progress=false"])
    assert code == 0
    resolved = (out / "config.yaml").read_text()
    assert "pooler: cls_last" in resolved and "lr: 3.0e-05" in resolved and "batch_size: 4" in resolved


@pytest.mark.parametrize("args,needle", [
    (["--set", "train.bacth_size=4"], "unknown key 'train.bacth_size' (did you mean 'train.batch_size'?)"),
    (["--batch-size", "0"], "train.batch_size (--batch-size) must be > 0"),
    (["--pooler", "layer_atn"], "unknown pooler 'layer_atn'"),
    (["--objective", "supervise"], "did you mean 'supervised'"),
    (["--set", "temperature=hot"], "temperature: expected a number"),
])
def test_bad_options_are_one_line_errors(tiny_bert, tiny_data, tmp_path, capsys, args, needle):
    out = tmp_path / "run"
    assert _train(tiny_bert, tiny_data, out, *args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_bad_config_file_key_is_named(tiny_bert, tiny_data, tmp_path, capsys):
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"train": {"epochz": 2}}))
    assert _train(tiny_bert, tiny_data, tmp_path / "run", "--config", str(config)) == 2
    assert f"{config}: unknown key 'train.epochz' (did you mean 'train.epochs'?)" in capsys.readouterr().err


def test_bad_data_leaves_no_run_directory(tiny_bert, tmp_path, capsys):
    data = write_tiny_data(tmp_path / "data")
    (data / "senteval" / "SNLI" / "labels.dev").write_text("entailment\nmaybe\n")
    out = tmp_path / "run"
    assert _train(tiny_bert, data, out) == 2
    err = capsys.readouterr().err
    assert "labels.dev" in err and "line counts differ" in err
    assert not out.exists()


def test_missing_data_dir_is_named(tiny_bert, tmp_path, capsys):
    assert _train(tiny_bert, tmp_path / "nowhere", tmp_path / "run") == 2
    assert "SNLI folder not found" in capsys.readouterr().err


def test_unreadable_model_path(tiny_data, tmp_path, capsys):
    empty = tmp_path / "empty_model"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    assert _train(empty, tiny_data, tmp_path / "run") == 2
    assert "no weights" in capsys.readouterr().err

"""Reporters beside metrics.jsonl: TensorBoard event files that match it, W&B through a stand-in, clear errors."""
from __future__ import annotations

import json
import sys
import types

import pytest

from layerwise.cli import build_parser, main
from layerwise.config import config_from_args
from layerwise.errors import ConfigError
from layerwise.training.embed import EmbedConfig
from layerwise.training.reporting import (
    REPORTERS, TensorBoardReporter, check_reporters, make_reporters, reporter_names, scalars,
)
from tiny import write_tiny_data


def _event_scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_scalar_names():
    train = {"step": 10, "epoch": 0.5, "loss": 1.5, "lr": 2e-5, "examples_per_s": 30.0, "task_loss": 1.2,
             "drop/layer0": 0.1, "drop/layer0/head1": 0.2, "note": "text"}
    assert scalars(train) == {"train/epoch": 0.5, "train/loss": 1.5, "train/lr": 2e-5, "train/examples_per_s": 30.0,
                              "train/task_loss": 1.2, "drop/layer0": 0.1, "drop/layer0/head1": 0.2}
    assert scalars({"step": 20, "eval": {"matthews": 31.0, "accuracy": 70}, "best": True}) == {
        "eval/matthews": 31.0, "eval/accuracy": 70.0}


def test_report_to_flag_parses_a_comma_list(monkeypatch):
    import layerwise.training.reporting as reporting

    monkeypatch.setattr(reporting, "check_reporters", lambda names: None)  # wandb need not be installed to parse
    parser = build_parser()
    args = parser.parse_args(["train-embed", "--report-to", "tensorboard,wandb"])
    assert config_from_args(EmbedConfig, args).train.report_to == ["tensorboard", "wandb"]
    args = parser.parse_args(["train-embed", "--report-to", "tensorboard, wandb"])
    assert reporter_names(config_from_args(EmbedConfig, args).train.report_to) == ["tensorboard", "wandb"]
    assert reporter_names(["tensorboard", " wandb", "none", "TensorBoard"]) == ["tensorboard", "wandb"]
    args = parser.parse_args(["finetune", "--set", "train.report_to=[tensorboard]"])
    from layerwise.training.finetune import FinetuneConfig

    assert config_from_args(FinetuneConfig, args).train.report_to == ["tensorboard"]
    assert make_reporters([], ".") == [] and make_reporters(["none"], ".") == []


def test_unknown_reporter_names_the_closest(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown reporter 'tensorbord' \(did you mean 'tensorboard'\?\)"):
        make_reporters(["tensorbord"], tmp_path)
    with pytest.raises(ConfigError, match="wandb"):
        check_reporters(["wandbb"])
    assert set(REPORTERS.names()) == {"tensorboard", "wandb"}


@pytest.mark.parametrize("name, module, package", [
    ("tensorboard", "torch.utils.tensorboard", "pip install tensorboard"),
    ("wandb", "wandb", "pip install wandb"),
])
def test_missing_package_says_what_to_install(tmp_path, monkeypatch, name, module, package):
    monkeypatch.setitem(sys.modules, module, None)  # the import fails, installed or not
    monkeypatch.setitem(sys.modules, module.split(".")[-1], None)
    with pytest.raises(ConfigError, match=package):
        make_reporters([name], tmp_path)
    with pytest.raises(ConfigError, match=package):
        check_reporters([name])


def test_wandb_reporter_with_a_stand_in(tmp_path, monkeypatch):
    calls = {"log": [], "finish": 0}

    class Run:
        id = "run-1"

        def log(self, values, step):
            calls["log"].append((step, values))

        def finish(self):
            calls["finish"] += 1

    def init(**kwargs):
        calls["init"] = kwargs
        return Run()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    monkeypatch.setenv("WANDB_PROJECT", "demo")
    (tmp_path / "config.yaml").write_text("model: tiny\ntrain:\n  lr: 0.001\n", encoding="utf-8")
    [reporter] = make_reporters(["wandb"], tmp_path)
    reporter.log({"step": 2, "loss": 0.5, "lr": 1e-3})
    reporter.log({"step": 2, "eval": {"stsb_dev_spearman": 12.5}, "best": True})
    reporter.log({"step": 3, "skipped_batch": float("nan")})  # nothing finite to send
    reporter.close()
    assert calls["init"]["project"] == "demo" and calls["init"]["name"] == tmp_path.name
    assert calls["init"]["config"] == {"model": "tiny", "train": {"lr": 0.001}}
    assert calls["log"] == [(2, {"train/loss": 0.5, "train/lr": 1e-3}), (2, {"eval/stsb_dev_spearman": 12.5})]
    assert calls["finish"] == 1
    reporter.log({"step": 4, "eval": {"stsb_dev_spearman": 13.0}})  # after close: the same run continues
    reporter.close()
    assert calls["init"]["id"] == "run-1" and calls["init"]["resume"] == "allow"
    assert calls["log"][-1] == (4, {"eval/stsb_dev_spearman": 13.0}) and calls["finish"] == 2


def test_tensorboard_restart_purges_the_steps_it_logs_again(tmp_path):
    pytest.importorskip("tensorboard")
    first = TensorBoardReporter(tmp_path)
    for step in (1, 2, 3, 4):
        first.log({"step": step, "loss": float(step)})
    first.close()
    second = TensorBoardReporter(tmp_path)  # a resumed run: continues from its checkpoint at step 2
    for step in (3, 4, 5):
        second.log({"step": step, "loss": 10.0 * step})
    second.close()
    assert _event_scalars(tmp_path / "tensorboard")["train/loss"] == [
        (1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0), (5, 50.0)]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return write_tiny_data(tmp_path_factory.mktemp("data"))


def test_train_embed_writes_tensorboard_scalars_matching_metrics(tiny_bert, tiny_data, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    assert main(["train-embed", "--model", str(tiny_bert), "--data-dir", str(tiny_data), "--output-dir", str(out),
                 "--pooler", "avg_last", "--batch-size", "4", "--max-steps", "4", "--eval-every", "2",
                 "--log-every", "1", "--max-length", "16", "--set", "train.progress=false",
                 "--set", "train.report_to=[tensorboard]"]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    events = _event_scalars(out / "tensorboard")
    expected: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        for tag, value in scalars(record).items():
            expected.setdefault(tag, []).append((record["step"], value))
    assert {"train/loss", "train/lr", "train/examples_per_s", "eval/stsb_dev_spearman"} <= set(expected)
    assert set(events) == set(expected)
    for tag, points in expected.items():
        assert [s for s, _ in events[tag]] == [s for s, _ in points], tag
        assert [v for _, v in events[tag]] == pytest.approx([v for _, v in points], rel=1e-6, abs=1e-9), tag
    assert [s for s, _ in events["train/loss"]] == [1, 2, 3, 4]
    assert [s for s, _ in events["eval/stsb_dev_spearman"]] == [2, 4]
    capsys.readouterr()
    assert main(["plot", str(out), "--kind", "curves"]) == 0  # the run stays readable by `layerwise plot`
    assert (out / "convergence.png").is_file()


def test_train_embed_without_tensorboard_is_a_one_line_error(tiny_bert, tiny_data, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    assert main(["train-embed", "--model", str(tiny_bert), "--data-dir", str(tiny_data), "--output-dir",
                 str(tmp_path / "run"), "--pooler", "avg_last", "--batch-size", "4", "--max-steps", "2",
                 "--max-length", "16", "--set", "train.progress=false", "--report-to", "tensorboard"]) == 2
    err = capsys.readouterr().err
    assert "pip install tensorboard" in err and len(err.strip().splitlines()) == 1


def test_finetune_drop_rates_reach_tensorboard(tiny_bert, tmp_path):
    pytest.importorskip("tensorboard")
    folder = tmp_path / "data" / "glue" / "CoLA"
    folder.mkdir(parents=True)
    words = "the man dog cat plays runs eats sits on in park street happy sad big small".split()
    for split, n in (("train", 16), ("dev", 8)):
        rows = [f"src\t{i % 2}\t\t{' '.join(words[(i * k) % len(words)] for k in range(1, 5))} ." for i in range(n)]
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    assert main(["finetune", "--progress", "false", "--model", str(tiny_bert), "--data-dir", str(tmp_path / "data"),
                 "--output-dir", str(out), "--max-steps", "2", "--batch-size", "8", "--log-every", "1",
                 "--dropout", "attendout", "--report-to", "tensorboard"]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    events = _event_scalars(out / "tensorboard")
    for record in records:
        for tag, value in scalars(record).items():
            assert (record["step"], pytest.approx(value, rel=1e-6, abs=1e-9)) in events[tag], tag
    assert {"drop/layer0", "drop/layer1", "train/task_loss", "eval/matthews"} <= set(events)

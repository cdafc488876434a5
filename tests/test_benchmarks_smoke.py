"""Smoke test of the benchmark scripts: each main() runs on the tiny model with tiny sizes and prints a parsable
RESULT_JSON line. No timing is asserted (benchmarks report ratios; they are not timed tests)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tiny import write_tiny_data

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))


@pytest.fixture(scope="module")
def bench_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bench_data")
    write_tiny_data(root)
    return root


def run(module_name: str, argv: list[str], capsys) -> dict:
    import importlib

    import _common

    module = importlib.import_module(module_name)
    returned = module.main(argv)
    printed = _common.parse_result(capsys.readouterr().out)
    assert printed.keys() == returned.keys() or module_name == "scale"
    assert printed["env"]["torch"] and printed["command"]
    return printed


def test_encode(tiny_bert, bench_data, tmp_path, capsys):
    result = run("encode", ["--model", str(tiny_bert), "--data-dir", str(bench_data), "--sentences", "6",
                            "--repeats", "1", "--corpus", "20", "--batch-size", "4", "--matmul-size", "64",
                            "--work-dir", str(tmp_path), "--score-paths", "onnx-int8"], capsys)
    assert set(result["paths"]) == {"st", "fp32", "onnx", "onnx-int8", "onnx-int8-pc"}
    assert result["paths"]["fp32"]["max_abs_diff_vs_st"] < 1e-5  # same model, same batches: same embeddings
    assert result["paths"]["onnx"]["max_abs_diff_vs_fp32"] < 1e-4
    assert result["paths"]["st"]["speedup_vs_st"] == pytest.approx(1.0)
    assert 0 < result["paths"]["fp32"]["fraction_of_peak"]
    assert set(result["corpus"]["paths"]) == {"st", "fp32", "onnx-int8-pc"}
    assert "onnx-int8" in result["full_split_spearman"]


def test_train(tiny_bert, bench_data, capsys):
    result = run("train", ["--model", str(tiny_bert), "--data-dir", str(bench_data), "--steps", "3", "--skip", "1",
                           "--batch-size", "4", "--max-length", "16", "--repeats", "1", "--dev-pairs", "8"], capsys)
    assert set(result["sides"]) == {"layerwise", "sentence-transformers"}
    assert result["speedup"] > 0
    assert all("stsb_dev_spearman" in side for side in result["sides"].values())


def test_pooling_cost(tiny_bert, bench_data, capsys):
    result = run("pooling_cost", ["--model", str(tiny_bert), "--data-dir", str(bench_data), "--sentences", "6",
                                  "--repeats", "1", "--batch-size", "4"], capsys)
    assert set(result["sides"]) == {"avg_last/full", "layer_att_cls/full", "layer_att_res/full",
                                    "layer_att_cls/static", "layer_att_res/static"}
    assert result["sides"]["avg_last/full"]["ratio_vs_avg_last"] == pytest.approx(1.0)


def test_attendout_cost(tiny_bert, bench_data, capsys):
    result = run("attendout_cost", ["--model", str(tiny_bert), "--data-dir", str(bench_data), "--steps", "1",
                                    "--repeats", "1", "--batch-size", "4", "--max-length", "16",
                                    "--predict-sentences", "8"], capsys)
    assert set(result["train"]) == {"standard", "attendout", "none"}
    assert result["predict"]["same_parameters_and_config_keys"]


def test_attendout_cost_on_glue_pairs(tiny_bert, bench_data, capsys):
    rte = bench_data / "glue" / "RTE"
    rte.mkdir(parents=True, exist_ok=True)
    rows = [f"{i}\tA premise sentence number {i} that is long.\tA hypothesis {i}.\t"
            f"{'entailment' if i % 2 else 'not_entailment'}" for i in range(6)]
    (rte / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n" + "\n".join(rows) + "\n")
    result = run("attendout_cost", ["--model", str(tiny_bert), "--data-dir", str(bench_data), "--task", "rte",
                                    "--steps", "1", "--repeats", "1", "--batch-size", "4", "--max-length", "32",
                                    "--predict-sentences", "4"], capsys)
    assert result["inputs"] == "rte" and result["padded_length"][0] > 12  # both texts of each pair are encoded


def test_scale(tiny_bert, bench_data, tmp_path, capsys):
    plot = tmp_path / "scale.png"
    result = run("scale", ["--model", str(tiny_bert), "--data-dir", str(bench_data), "--sizes", "10,30",
                           "--batch-size", "8", "--plot", str(plot)], capsys)
    assert {int(n) for n in result["sizes"]} == {10, 30}
    assert all(r["runs"][0]["shape"][0] == int(n) for n, r in result["sizes"].items())
    assert plot.is_file() and "time_loglog_slope" in result

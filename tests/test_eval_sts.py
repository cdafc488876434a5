"""STS-B reader and STS evaluators (fake encoder; the real model only in slow tests)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from test_eval_fakes import HashEncoder
from layerwise.data.sts import StsPairs, find_stsb, read_stsb
from layerwise.errors import DataError
from layerwise.evaluation.sts import evaluate_pairs, evaluate_stsb

ROWS = [
    "main-captions\tMSRvid\t2012test\t0001\t5.000\tA man is playing a flute.\tA man is playing the flute.",
    'main-news\theadlines\t2013\t0002\t1.200\tHe said "no" to them.\tThe cat sat on a mat.\tsrc1\tsrc2',
    "main-forums\tdeft\t2014\t0003\t3.000\tA dog runs in the park.\tA dog is running in a park.",
    "main-captions\tMSRvid\t2012test\t0004\t0.000\tA woman slices onions.\tStocks fell sharply today.",
]


def write(path: Path, lines: list[str], ending: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ending.join(lines) + ending, encoding="utf-8")
    return path


def test_read_stsb_7_and_9_fields_and_quotes(tmp_path):
    pairs = read_stsb(write(tmp_path / "sts-dev.csv", ROWS))
    assert len(pairs) == 4
    assert pairs.sentences1[1] == 'He said "no" to them.'
    assert pairs.sentences2[1] == "The cat sat on a mat."
    np.testing.assert_allclose(pairs.scores, [5.0, 1.2, 3.0, 0.0])


def test_read_stsb_bad_score_names_line(tmp_path):
    bad = ROWS[:2] + [ROWS[2].replace("3.000", "three")]
    with pytest.raises(DataError, match=r"sts-dev.csv:3: .*numeric score"):
        read_stsb(write(tmp_path / "sts-dev.csv", bad))


def test_read_stsb_too_few_columns(tmp_path):
    with pytest.raises(DataError, match=r":2: expected at least 7"):
        read_stsb(write(tmp_path / "sts-dev.csv", [ROWS[0], "a\tb\tc"]))


def test_find_stsb_layouts(tmp_path):
    a = write(tmp_path / "one" / "stsbenchmark" / "sts-test.csv", ROWS)
    assert find_stsb(tmp_path / "one", "test") == a
    b = write(tmp_path / "two" / "senteval" / "STS" / "STSBenchmark" / "sts-dev.csv", ROWS)
    assert find_stsb(tmp_path / "two", "dev") == b
    assert find_stsb(tmp_path / "one" / "stsbenchmark", "test") == a
    with pytest.raises(DataError, match="tried"):
        find_stsb(tmp_path / "one", "train")
    with pytest.raises(DataError, match="unknown STS-B split"):
        find_stsb(tmp_path / "one", "validation")


def test_evaluate_pairs_encodes_unique_once():
    enc = HashEncoder()
    s = ["a b c", "d e f", "a b c"]
    pairs = StsPairs(s, ["a b", "x y", "a b c"], np.array([3.0, 0.0, 5.0]))
    result = evaluate_pairs(enc, pairs)
    assert set(result) == {"spearman", "pearson", "n"} and result["n"] == 3
    assert len(enc.calls) == 1 and len(enc.calls[0]) == 4  # distinct texts only
    assert result["spearman"] == pytest.approx(100.0)
    assert -100.0 <= result["pearson"] <= 100.0


def test_evaluate_stsb_on_written_file(tmp_path):
    write(tmp_path / "stsbenchmark" / "sts-dev.csv", ROWS)
    result = evaluate_stsb(HashEncoder(), tmp_path, split="dev", batch_size=2)
    assert result["n"] == 4 and result["spearman"] > 50


def test_read_real_stsb(real_data):
    for split, n in {"train": 5749, "dev": 1500, "test": 1379}.items():
        assert len(read_stsb(find_stsb(real_data, split))) == n

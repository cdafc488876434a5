"""GLUE task table, readers and metric functions (hand-computed values; small files written here)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from layerwise.data.glue import get_task, read_split
from layerwise.errors import ConfigError, DataError
from layerwise.evaluation.glue_metrics import accuracy, f1, glue_scores, matthews, pearson_r, spearman_r
from layerwise.registry import TASKS

# ---------------------------------------------------------------------------------------------- metrics
P, Y = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]  # TP 2, FP 1, FN 1, TN 1


def test_accuracy_f1_matthews_by_hand():
    assert accuracy(P, Y) == pytest.approx(3 / 5)
    assert f1(P, Y) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert matthews(P, Y) == pytest.approx((2 * 1 - 1 * 1) / math.sqrt(3 * 3 * 2 * 2))
    assert matthews(Y, Y) == pytest.approx(1.0) and matthews([1 - y for y in Y], Y) == pytest.approx(-1.0)


def test_degenerate_cases():
    assert matthews([1, 1, 1], [0, 1, 1]) == 0.0  # constant predictions
    assert f1([0, 0], [0, 0]) == 0.0  # nothing positive anywhere
    assert accuracy([], []) == 0.0


def test_matthews_multiclass_matches_the_formula():
    # confusion rows=true, cols=pred: [[2,1,0],[0,2,0],[1,0,1]]; c=5, s=7, t=[3,2,2], p=[3,3,1]
    y = [0, 0, 0, 1, 1, 2, 2]
    p = [0, 0, 1, 1, 1, 0, 2]
    expected = (5 * 7 - (3 * 3 + 3 * 2 + 1 * 2)) / math.sqrt((49 - (9 + 9 + 1)) * (49 - (9 + 4 + 4)))
    assert matthews(p, y) == pytest.approx(expected)


def test_correlations_by_hand():
    assert pearson_r([1, 2, 3], [1, 2, 4]) == pytest.approx(3 / math.sqrt(2 * 42 / 9))
    assert spearman_r([1, 2, 3], [1, 2, 4]) == pytest.approx(1.0)
    assert spearman_r([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(1 - 6 * 2 / (4 * 15))


def test_glue_scores_are_percentages_with_suffix():
    scores = glue_scores(("f1", "accuracy"), P, Y, suffix="_mm")
    assert scores == pytest.approx({"f1_mm": 100 * 2 / 3, "accuracy_mm": 60.0})


# ---------------------------------------------------------------------------------------------- table


def test_task_table():
    assert {"cola", "sst2", "mrpc", "rte", "qnli", "stsb", "mnli", "qqp"} <= set(TASKS.names())
    assert get_task("CoLA").metric == "matthews" and get_task("STS-B").is_regression
    assert get_task("mnli").num_labels == 3 and get_task("mnli").eval_splits == ("dev_matched", "dev_mismatched")
    assert get_task("mrpc").metrics == ("f1", "accuracy")
    with pytest.raises(ConfigError, match="did you mean 'cola'"):
        get_task("colla")


# ---------------------------------------------------------------------------------------------- readers


def write(path: Path, lines: list[str], bom: bool = False, final_newline: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + ("\n" if final_newline else "")
    path.write_text(("\ufeff" if bom else "") + text, encoding="utf-8")
    return path


def test_cola_without_header_and_final_newline(tmp_path):
    write(tmp_path / "glue/CoLA/dev.tsv", ["gj04\t1\t\tThe dog barks.", 'gj04\t0\t*\tHe said "dog the".'],
          final_newline=False)
    ex = read_split(get_task("cola"), tmp_path, "dev")
    assert ex.texts == [("The dog barks.",), ('He said "dog the".',)] and ex.labels == [1, 0]


def test_task_folder_itself_is_accepted(tmp_path):
    write(tmp_path / "dev.tsv", ["index\tsentence1\tsentence2\tlabel", "0\tA b.\tC d.\tnot_entailment"])
    ex = read_split(get_task("rte"), tmp_path, "dev")
    assert ex.texts == [("A b.", "C d.")] and ex.labels == [1]


def test_mrpc_with_bom_and_crlf(tmp_path):
    lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\r", '1\t1\t2\tHe said "hi".\tHe said hello.\r']
    write(tmp_path / "MRPC/train.tsv", lines, bom=True)
    ex = read_split(get_task("mrpc"), tmp_path, "train")
    assert ex.texts == [('He said "hi".', "He said hello.")] and ex.labels == [1]


def test_sst_senteval_layout(tmp_path):
    write(tmp_path / "senteval/SST/binary/sentiment-dev", ["a fine movie .\t1", "dull .\t0"])
    ex = read_split(get_task("sst2"), tmp_path, "dev")
    assert ex.texts == [("a fine movie .",), ("dull .",)] and ex.labels == [1, 0]


def test_sst_glue_layout(tmp_path):
    write(tmp_path / "glue/SST-2/train.tsv", ["sentence\tlabel", "great fun \t1"])
    assert read_split(get_task("sst2"), tmp_path, "train").labels == [1]


def test_mnli_matched_and_mismatched(tmp_path):
    header = "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tlabel1\tgold_label"
    for split, label in (("dev_matched", "neutral"), ("dev_mismatched", "contradiction")):
        write(tmp_path / f"glue/MNLI/{split}.tsv", [header, f"0\t1\t1e\tfiction\tP.\tH.\t{label}\t{label}"])
    task = get_task("mnli")
    assert [read_split(task, tmp_path, s).labels for s in task.eval_splits] == [[1], [2]]


def test_qqp_and_stsb_glue_layouts(tmp_path):
    write(tmp_path / "QQP/dev.tsv", ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "7\t1\t2\tHow?\tWhy?\t0"])
    assert read_split(get_task("qqp"), tmp_path, "dev").texts == [("How?", "Why?")]
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    write(tmp_path / "STS-B/dev.tsv", [header, "0\tmain-news\tf\t2012\t1\tnone\tnone\tA.\tB.\t3.800"])
    assert read_split(get_task("stsb"), tmp_path, "dev").labels == [3.8]


def test_stsb_release_layout_7_and_9_fields(tmp_path):
    rows = ["g\tf\t2012\t1\t5.000\tA man.\tA man.", 'g\tf\t2013\t2\t1.5\tSaid "x".\tNo.\tsrc1\tsrc2']
    write(tmp_path / "stsbenchmark/sts-dev.csv", rows)
    ex = read_split(get_task("stsb"), tmp_path, "dev")
    assert ex.labels == [5.0, 1.5] and ex.texts[1] == ('Said "x".', "No.")


def test_subset_is_seeded_and_ordered(tmp_path):
    write(tmp_path / "CoLA/train.tsv", [f"s\t{i % 2}\t\tSentence {i}." for i in range(50)])
    ex = read_split(get_task("cola"), tmp_path, "train")
    small = ex.subset(10, seed=3)
    assert len(small) == 10 and small.lines == sorted(small.lines) and small.texts == ex.subset(10, seed=3).texts
    assert ex.subset(0) is ex and ex.subset(100) is ex


@pytest.mark.parametrize("lines, message", [
    (["s\t1\tThe dog barks."], r"dev.tsv:1: expected 4 tab-separated fields, got 3"),
    (["s\t1\t\tOk.", "s\t2\t\tBad label."], r"dev.tsv:2: bad label '2'; expected one of 0, 1"),
    ([], "no examples"),
])
def test_reader_errors_name_file_and_line(tmp_path, lines, message):
    write(tmp_path / "CoLA/dev.tsv", lines)
    with pytest.raises(DataError, match=message):
        read_split(get_task("cola"), tmp_path, "dev")


def test_missing_file_and_missing_column_and_bad_score(tmp_path):
    with pytest.raises(DataError, match="no rte train file found"):
        read_split(get_task("rte"), tmp_path, "train")
    write(tmp_path / "RTE/dev.tsv", ["index\tsentence1\tlabel", "0\tA.\tentailment"])
    with pytest.raises(DataError, match=r"dev.tsv:1: header lacks column\(s\) 'sentence2'"):
        read_split(get_task("rte"), tmp_path, "dev")
    write(tmp_path / "stsbenchmark/sts-dev.csv", ["g\tf\t2012\t1\tabc\tA.\tB."])
    with pytest.raises(DataError, match="expected a numeric score, got 'abc'"):
        read_split(get_task("stsb"), tmp_path, "dev")


def test_real_data_counts(real_data):
    counts = {("cola", "train"): 8551, ("cola", "dev"): 1043, ("sst2", "train"): 67349, ("sst2", "dev"): 872,
              ("mrpc", "train"): 3668, ("mrpc", "dev"): 408, ("rte", "train"): 2490, ("rte", "dev"): 277,
              ("qnli", "dev"): 5463, ("stsb", "train"): 5749, ("stsb", "dev"): 1500}
    for (task, split), n in counts.items():
        assert len(read_split(get_task(task), real_data, split)) == n, (task, split)

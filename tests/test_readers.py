"""Training-data readers: SimCSE's nli_for_simcse.csv, generic CSV/TSV/JSONL triplets, text lines, SNLI grouping."""
from __future__ import annotations

import json

import pytest

from layerwise.data.readers import (
    Triplet, read_lines, read_nli_csv, read_snli_triplets, read_table, read_triplet_table,
)
from layerwise.errors import DataError


def test_nli_for_simcse_csv_with_quotes_and_commas(tmp_path):
    path = tmp_path / "nli_for_simcse.csv"
    path.write_text('sent0,sent1,hard_neg\n"A man, tall, walks.",A person walks.,"He said ""no""."\n'
                    "Dogs run.,Animals move.,Cats sleep.\n", encoding="utf-8")
    assert read_nli_csv(path) == [Triplet("A man, tall, walks.", "A person walks.", 'He said "no".'),
                                  Triplet("Dogs run.", "Animals move.", "Cats sleep.")]


def test_generic_tsv_jsonl_with_named_columns_and_no_quoting_in_tsv(tmp_path):
    tsv = tmp_path / "t.tsv"
    tsv.write_text('id\tq\tpos\tneg\n1\tsays "hi"\tgreets\tleaves\n', encoding="utf-8")
    assert read_triplet_table(tsv, ("q", "pos", "neg")) == [Triplet('says "hi"', "greets", "leaves")]
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(json.dumps({"anchor": "a", "positive": "b", "negative": "c", "x": 1}) + "\n\n", encoding="utf-8")
    assert read_triplet_table(jsonl) == [Triplet("a", "b", "c")]


@pytest.mark.parametrize("name,content,needle", [
    ("bad.csv", "sent0,sent1\na,b\n", "header lacks column(s) hard_neg"),
    ("bad.tsv", "anchor\tpositive\tnegative\na\tb\n", "bad.tsv:2: expected 3 fields, found 2"),
    ("bad.jsonl", '{"anchor": "a", "positive": "b", "negative": ""}\n', "bad.jsonl:1: empty or non-text value"),
    ("bad.jsonl", "{not json\n", "bad.jsonl:1: not valid JSON"),
    ("bad.parquet", "x", "unknown format '.parquet'"),
])
def test_table_errors_name_file_line_and_expectation(tmp_path, name, content, needle):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    columns = ("sent0", "sent1", "hard_neg") if name.endswith(".csv") else ("anchor", "positive", "negative")
    with pytest.raises(DataError, match=needle.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        read_table(path, columns)


def test_text_lines_drop_blank_lines_and_optionally_a_cut_last_line(tmp_path):
    path = tmp_path / "wiki.txt"
    path.write_text("\ufefffirst sentence\r\n\r\nsecond sentence\ncut in the mid", encoding="utf-8")
    assert read_lines(path) == ["first sentence", "second sentence", "cut in the mid"]
    with pytest.warns(UserWarning, match="dropped as truncated"):
        assert read_lines(path, drop_unterminated_last=True) == ["first sentence", "second sentence"]


def test_snli_grouped_by_premise_pairs_entailments_with_contradictions(tmp_path):
    rows = [("P1", "e1", "entailment"), ("P1", "n1", "neutral"), ("P1", "c1", "contradiction"),
            ("P1", "e2", "entailment"), ("P2", "e3", "entailment"), ("P2", "n2", "neutral")]
    for split in ("dev",):
        for index, name in enumerate(("s1", "s2", "labels")):
            (tmp_path / f"{name}.{split}").write_text("\n".join(r[index] for r in rows) + "\n", encoding="utf-8")
    assert read_snli_triplets(tmp_path, splits=("dev",)) == [Triplet("P1", "e1", "c1"), Triplet("P1", "e2", "c1")]


def test_real_snli_dev_and_test_give_the_documented_count(real_data):
    triplets = read_snli_triplets(real_data / "senteval" / "SNLI")
    assert len(triplets) == 6339  # one per entailment hypothesis whose premise also has a contradiction
    assert all(t.anchor and t.positive and t.negative for t in triplets)


def test_stsb_with_a_bad_byte_names_file_and_line(tmp_path):
    from layerwise.data.sts import read_stsb

    path = tmp_path / "sts-test.csv"
    path.write_bytes(b"g\tf\t2012\t1\t2.0\tfine\tok\ng\tf\t2012\t2\t3.0\tcaf\xe9\tx\n")
    with pytest.raises(DataError, match=r"sts-test.csv:2: not valid UTF-8 \(byte 0xe9\)"):
        read_stsb(path)

"""Exact chunked search (tie rule), the three retrieval readers and the evaluator, on small written files."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from test_eval_fakes import HashEncoder
from layerwise.errors import DataError
from layerwise.evaluation.retrieval import (
    chunk_top_k, evaluate_retrieval, exact_search, load_retrieval, read_beir, read_paraphrase, read_quora,
)


def brute(q, d, k):
    s = q @ d.T
    out = [sorted(range(len(d)), key=lambda j: (-s[r, j], j))[:k] for r in range(len(q))]
    return np.array(out)


def test_exact_search_matches_brute_force_any_chunking():
    rng = np.random.default_rng(0)
    d = np.round(rng.normal(size=(53, 4)), 1).astype(np.float32)
    d[10] = d[40] = d[3]  # exact duplicates: tied scores
    q = np.round(rng.normal(size=(7, 4)), 1).astype(np.float32)
    expect = brute(q, d, 5)
    for dc, qc in ((53, 7), (8, 3), (1, 1), (5, 2)):
        _, idx = exact_search(q, (d[s:s + dc] for s in range(0, 53, dc)), k=5, query_chunk=qc)
        np.testing.assert_array_equal(idx, expect)


def test_ties_go_to_smaller_index():
    scores = np.array([[0.5, 0.9, 0.5, 0.5, 0.1]], dtype=np.float32)
    v, i = chunk_top_k(scores.copy(), 2)
    assert sorted(i[0].tolist()) == [0, 1]
    _, idx = exact_search(np.ones((1, 1), np.float32), [np.array([[1.0], [1.0], [1.0]], np.float32)], k=2)
    assert idx.tolist() == [[0, 1]]


def test_exclude_self():
    d = np.eye(3, dtype=np.float32)
    _, idx = exact_search(d.copy(), [d[:2], d[2:]], k=1, exclude=np.array([0, 1, 2]))
    assert idx[:, 0].tolist() == [1, 0, 0]


def write_beir(root: Path, qrels_lines: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    docs = [("10", "Cats", "cats purr and sleep"), ("2", "", "dogs bark loudly"), ("7", "Fish", "fish swim in water")]
    (root / "corpus.jsonl").write_text("\n".join(json.dumps({"_id": i, "title": t, "text": x}) for i, t, x in docs))
    queries = [("q1", "cats purr"), ("q2", "dogs bark loudly"), ("q3", "unjudged query")]
    (root / "queries.jsonl").write_text("\n".join(json.dumps({"_id": i, "text": x}) for i, x in queries) + "\n")
    (root / "qrels").mkdir(exist_ok=True)
    (root / "qrels" / "test.tsv").write_text("\n".join(["query-id\tcorpus-id\tscore"] + qrels_lines) + "\n")
    return root


def test_beir_reader_and_evaluation(tmp_path):
    root = write_beir(tmp_path / "beir", ["q1\t10\t1", "q2\t2\t1", "q2\t7\t0"])
    data = read_beir(root)
    assert data.doc_ids == ["2", "7", "10"]  # integer ids sorted as integers
    assert data.doc_texts[2] == "Cats cats purr and sleep"
    out = evaluate_retrieval(HashEncoder(), data, batch_size=2, doc_chunk=2)
    assert out["queries"] == 2 and out["documents"] == 3
    assert out["mrr@10"] == pytest.approx(100.0) and out["ndcg@10"] == pytest.approx(100.0)
    assert set(out) >= {"mrr@10", "recall@1", "recall@5", "recall@10", "ndcg@10", "map@100"}


def test_beir_unknown_document(tmp_path):
    root = write_beir(tmp_path / "beir", ["q1\t10\t1", "q2\t99\t1"])
    with pytest.raises(DataError, match=r"test.tsv:3: unknown document id '99'"):
        read_beir(root)


def test_beir_empty_corpus(tmp_path):
    root = write_beir(tmp_path / "beir", ["q1\t10\t1"])
    (root / "corpus.jsonl").write_text("\n")
    with pytest.raises(DataError, match=r"corpus.jsonl: empty corpus"):
        read_beir(root)


QUORA = [
    "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
    '0\t1\t2\tHow do I learn "Python" fast?\tWhat is the fastest way to learn Python?\t1',
    "1\t3\t4\tWhat is the capital of France?\tHow tall is Mount Everest?\t0",
    "2\t1\t5\tHow do I learn \"Python\" fast?\tBest way to learn python quickly\t1",
    "3\t6\t7\tWhy is the sky\nblue?\tWhat makes the sky blue?\t1",
]


def test_quora_reader(tmp_path):
    path = tmp_path / "quora_duplicate_questions.tsv"
    path.write_text("\n".join(QUORA) + "\n")
    data = read_quora(path)
    assert data.doc_ids == [str(i) for i in range(1, 8)]
    assert set(data.queries) == {"1", "2", "5", "6", "7"}
    assert data.qrels["1"] == {"2": 1.0, "5": 1.0} and data.queries["6"] == "Why is the sky\nblue?"
    out = evaluate_retrieval(HashEncoder(), load_retrieval(path))
    assert out["queries"] == 5 and out["recall@10"] == pytest.approx(100.0)  # self excluded, 6 others in top 10


def test_quora_bad_label(tmp_path):
    path = tmp_path / "q.tsv"
    path.write_text("\n".join(QUORA[:2] + ["1\t3\t4\ta\tb\tmaybe"]) + "\n")
    with pytest.raises(DataError, match=r"q.tsv:3: expected is_duplicate 0 or 1"):
        read_quora(path)


def test_paraphrase_from_mrpc_and_stsb(tmp_path):
    mrpc = tmp_path / "dev.tsv"
    rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", '1\t1\t2\tHe said "yes" today.\tToday he said "yes".',
            "0\t3\t4\tStocks fell.\tThe dog barked.", "1\t5\t6\tA cat sleeps.\tA cat is sleeping."]
    mrpc.write_bytes(("\ufeff" + "\n".join(rows) + "\n").encode("utf-8"))
    data = read_paraphrase(mrpc)
    assert len(data.queries) == 2 and len(data.doc_ids) == 3
    assert data.queries["q0"] == 'He said "yes" today.'
    stsb = tmp_path / "sts-test.csv"
    stsb.write_text("g\tf\t2012\t1\t4.5\tA b c.\tA b c d.\ng\tf\t2012\t2\t1.0\tX.\tY.\n")
    data = read_paraphrase(stsb)
    assert list(data.queries.values()) == ["A b c."] and data.doc_texts == ["A b c d.", "Y."]


def test_real_mrpc_paraphrase(real_data):
    data = load_retrieval(real_data / "glue" / "MRPC" / "dev.tsv")
    assert len(data.queries) > 200 and len(data.doc_ids) > 300

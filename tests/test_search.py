"""`layerwise search` on a tiny random model: known answers, the embedding cache (reuse, invalidation), errors."""
from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest

import layerwise
import layerwise.commands.encode as encode_module
from layerwise import search as search_module
from layerwise.cli import main

CORPUS = [
    "a man plays the guitar",
    "the dog runs in the park",
    "",  # a blank line: skipped, but line numbers stay those of the file
    "a woman eats food",
    "two cats sit on the grass",
    "the sun is big and red",
    "people are running in the rain",
]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def encodings(monkeypatch):
    """Counts the times a corpus is embedded (write_embeddings is what build_corpus calls to do it)."""
    calls = []
    real = encode_module.write_embeddings

    def counting(encoder, sentences, output, batch_size, normalize):
        calls.append(len(sentences))
        return real(encoder, sentences, output, batch_size, normalize)

    monkeypatch.setattr(encode_module, "write_embeddings", counting)
    return calls


def _search(model, corpus, *extra):
    return main(["search", "--model", str(model), "--corpus", str(corpus), "--json", *extra])


def _json(capsys):
    return json.loads(capsys.readouterr().out)


def test_each_query_finds_itself_first_with_score_one(tiny_bert, corpus, capsys, encodings):
    queries = ["a woman eats food", "the sun is big and red"]
    assert _search(tiny_bert, corpus, "--query", queries[0], "--query", queries[1], "--top-k", "3") == 0
    out = _json(capsys)
    assert [r["query"] for r in out["results"]] == queries
    first, second = out["results"]
    assert first["hits"][0]["text"] == "a woman eats food" and first["hits"][0]["line"] == 4
    assert second["hits"][0]["text"] == "the sun is big and red" and second["hits"][0]["line"] == 6
    for result in out["results"]:
        hits = result["hits"]
        assert [h["rank"] for h in hits] == [1, 2, 3]
        assert hits[0]["score"] == pytest.approx(1.0, abs=1e-5)
        assert all(h["score"] < 0.9999 for h in hits[1:])
        assert hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]
    assert out["documents"] == 6 and out["cached"] is False and encodings == [6]


def test_matches_a_brute_force_ranking(tiny_bert, corpus):
    encoder = layerwise.load(str(tiny_bert))
    built = search_module.build_corpus(encoder, corpus, str(tiny_bert))
    docs = [line for line in CORPUS if line]
    hits = search_module.search(encoder, built, ["dog in the park"], top_k=10)[0]
    assert len(hits) == len(docs)  # top_k larger than the corpus: every document once
    q = encoder.encode(["dog in the park"], normalize=True)[0]
    expected = encoder.encode(docs, normalize=True) @ q
    assert [h.text for h in hits] == [docs[i] for i in np.argsort(-expected, kind="stable")]
    np.testing.assert_allclose([h.score for h in hits], np.sort(expected)[::-1], atol=1e-5)


def test_plain_text_output_and_queries_file(tiny_bert, corpus, tmp_path, capsys):
    queries = tmp_path / "queries.txt"
    queries.write_text("two cats sit on the grass\n\na man plays the guitar\n", encoding="utf-8")
    assert main(["search", "--model", str(tiny_bert), "--corpus", str(corpus), "--queries", str(queries),
                 "--top-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "query 1: two cats sit on the grass"
    assert lines[1].split()[:4] == ["1", "1.0000", "line", "5"] and lines[1].endswith("two cats sit on the grass")
    assert lines[3] == "query 2: a man plays the guitar"
    assert lines[4].split()[:4] == ["1", "1.0000", "line", "1"]
    assert len(lines) == 6


def test_cache_is_reused_and_a_changed_corpus_invalidates_it(tiny_bert, corpus, capsys, encodings):
    assert _search(tiny_bert, corpus, "--query", "a woman eats food") == 0
    first = _json(capsys)
    cache = corpus.parent / ".layerwise-cache"
    entries = sorted(cache.glob("*.npy"))
    assert len(entries) == 1 and first["cache"] == str(entries[0]) and encodings == [6]
    stamp = entries[0].stat().st_mtime_ns

    assert _search(tiny_bert, corpus, "--query", "a woman eats food") == 0
    second = _json(capsys)
    assert second["cached"] is True and encodings == [6]  # not embedded again
    assert entries[0].stat().st_mtime_ns == stamp
    assert second["results"] == first["results"]

    corpus.write_text("a woman eats food\nthe dog runs in the park\nnew line about music\n", encoding="utf-8")
    assert _search(tiny_bert, corpus, "--query", "new line about music") == 0
    third = _json(capsys)
    assert third["cached"] is False and encodings == [6, 3]
    assert third["results"][0]["hits"][0]["text"] == "new line about music"
    assert third["results"][0]["hits"][0]["line"] == 3
    assert [p.name for p in cache.glob("*.npy")] == [third["cache"].rsplit("/", 1)[-1]]  # stale entry removed

    assert _search(tiny_bert, corpus, "--query", "x", "--rebuild") == 0
    assert _json(capsys)["cached"] is False and encodings == [6, 3, 3]


def test_cache_key_separates_poolers_and_honours_cache_dir(tiny_bert, corpus, tmp_path, capsys, encodings):
    cache = tmp_path / "elsewhere"
    for pooling in ("avg_last", "cls_last", "avg_last"):
        assert _search(tiny_bert, corpus, "--query", "a", "--pooling", pooling, "--cache-dir", str(cache)) == 0
        capsys.readouterr()
    assert encodings == [6, 6]  # the second avg_last call reused its entry
    assert len(list(cache.glob("*.npy"))) == 2
    assert not (corpus.parent / ".layerwise-cache").exists()


def test_a_damaged_cache_entry_is_rebuilt(tiny_bert, corpus, capsys, encodings):
    assert _search(tiny_bert, corpus, "--query", "a") == 0
    capsys.readouterr()
    entry = next((corpus.parent / ".layerwise-cache").glob("*.npy"))
    entry.write_bytes(b"not a numpy file")
    assert _search(tiny_bert, corpus, "--query", "a woman eats food") == 0
    out = _json(capsys)
    assert out["cached"] is False and encodings == [6, 6]
    assert out["results"][0]["hits"][0]["score"] == pytest.approx(1.0, abs=1e-5)


def test_faiss_backend_code_path(tiny_bert, corpus, monkeypatch, capsys):
    """faiss is not installed here: a stand-in with FAISS's IndexFlatIP API exercises the same code path."""

    class IndexFlatIP:
        def __init__(self, dim):
            self.rows = np.zeros((0, dim), dtype=np.float32)

        def add(self, x):
            assert x.dtype == np.float32 and x.flags["C_CONTIGUOUS"]
            self.rows = np.concatenate([self.rows, x])

        def search(self, q, k):
            scores = q @ self.rows.T
            order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
            return np.take_along_axis(scores, order, axis=1), order

    monkeypatch.setitem(sys.modules, "faiss", types.SimpleNamespace(IndexFlatIP=IndexFlatIP))
    monkeypatch.setattr(search_module, "faiss_available", lambda: True)
    assert _search(tiny_bert, corpus, "--query", "two cats sit on the grass", "--top-k", "3") == 0
    exact = _json(capsys)
    assert _search(tiny_bert, corpus, "--query", "two cats sit on the grass", "--top-k", "3", "--index", "faiss") == 0
    assert _json(capsys)["results"] == exact["results"]


def test_auto_backend_picks_exact_for_small_corpora(monkeypatch):
    monkeypatch.setattr(search_module, "faiss_available", lambda: True)
    assert search_module.choose_backend("auto", 10) == "exact"
    assert search_module.choose_backend("auto", search_module.AUTO_FAISS_MIN) == "faiss"
    monkeypatch.setattr(search_module, "faiss_available", lambda: False)
    assert search_module.choose_backend("auto", search_module.AUTO_FAISS_MIN) == "exact"


@pytest.mark.parametrize("args, needle", [
    (["--index", "faiss"], "pip install faiss-cpu"),
    (["--top-k", "0"], "--top-k must be > 0"),
    ([], "no query"),
])
def test_errors_are_one_line(tiny_bert, corpus, monkeypatch, capsys, args, needle):
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss fails even where it is installed
    query = [] if not args else ["--query", "a"]
    assert main(["search", "--model", str(tiny_bert), "--corpus", str(corpus), *query, *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_empty_and_missing_corpus(tiny_bert, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    assert main(["search", "--model", str(tiny_bert), "--corpus", str(empty), "--query", "a"]) == 2
    assert "empty.txt" in capsys.readouterr().err
    assert main(["search", "--model", str(tiny_bert), "--corpus", str(tmp_path / "nope.txt"), "--query", "a"]) == 2
    assert "file not found" in capsys.readouterr().err

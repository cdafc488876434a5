"""Pure metrics against hand-computed cases (ties and empty relevance sets included)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from layerwise.evaluation import metrics as m


def test_spearman_ties_use_average_ranks():
    # x ranks with ties: [1.5, 1.5, 3, 4]; y ranks [1, 2, 3, 4] -> Pearson of the ranks
    rx, ry = np.array([1.5, 1.5, 3, 4]), np.array([1, 2, 3, 4.0])
    expected = np.corrcoef(rx, ry)[0, 1]
    assert m.spearman(np.array([1, 1, 2, 3.0]), np.array([10, 20, 30, 40.0])) == pytest.approx(expected)
    assert expected == pytest.approx(0.9486832980505138)


def test_pearson_hand():
    assert m.pearson(np.array([1, 2, 3.0]), np.array([2, 4, 7.0])) == pytest.approx(0.9933992677987828)


def test_mrr_recall():
    ranked = ["d3", "d1", "d2", "d4"]
    assert m.mrr_at_k(ranked, {"d1", "d4"}, 10) == 0.5
    assert m.mrr_at_k(ranked, {"d4"}, 3) == 0.0
    assert m.recall_at_k(ranked, {"d1", "d4", "d9"}, 1) == 0.0
    assert m.recall_at_k(ranked, {"d1", "d4", "d9"}, 4) == pytest.approx(2 / 3)
    assert m.recall_at_k(ranked, {"d1": 1, "d2": 0}, 2) == 1.0  # grade 0 is not relevant


def test_ndcg_graded():
    ranked = ["a", "b", "c"]
    rel = {"b": 2, "c": 1}
    dcg = 2 / math.log2(3) + 1 / 2
    idcg = 2 + 1 / math.log2(3)
    assert m.ndcg_at_k(ranked, rel, 10) == pytest.approx(dcg / idcg)
    assert m.ndcg_at_k(["b", "c"], rel, 10) == pytest.approx(1.0)
    assert m.ndcg_at_k(ranked, rel, 1) == 0.0


def test_average_precision_divides_by_all_relevant():
    ranked = ["x", "r1", "y", "r2"]
    rel = {"r1", "r2", "r3"}
    assert m.average_precision_at_k(ranked, rel, 100) == pytest.approx((1 / 2 + 2 / 4) / 3)
    assert m.average_precision_at_k(ranked, rel, 2) == pytest.approx((1 / 2) / 3)


def test_empty_relevance_is_zero_and_skipped():
    for fn in (m.mrr_at_k, m.recall_at_k, m.ndcg_at_k, m.average_precision_at_k):
        assert fn(["a", "b"], set(), 10) == 0.0
        assert fn(["a", "b"], {"a": 0}, 10) == 0.0
    out = m.retrieval_scores({"q1": ["a", "b"], "q2": ["b"]}, {"q1": {"a": 1}, "q2": {}})
    assert out["queries"] == 1 and out["mrr@10"] == 100.0 and out["map@100"] == 100.0
    assert m.retrieval_scores({}, {})["queries"] == 0


def test_retrieval_scores_mean_x100():
    out = m.retrieval_scores({"q1": ["a", "b"], "q2": ["c", "d"]}, {"q1": {"b"}, "q2": {"c"}})
    assert out["mrr@10"] == pytest.approx(75.0)
    assert out["recall@1"] == pytest.approx(50.0)
    assert out["recall@5"] == pytest.approx(100.0)


def test_alignment_uniformity_anisotropy_hand():
    x = np.array([[1.0, 0.0], [0.0, 2.0]])
    y = np.array([[1.0, 0.0], [0.0, -1.0]])
    # distances after normalising: 0 and 2 -> mean of squares = 2
    assert m.alignment(x, y) == pytest.approx(2.0)
    assert m.alignment(x, y, alpha=1) == pytest.approx(1.0)
    pts = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    # squared distances: 2, 4, 2
    expected = math.log((2 * math.exp(-4) + math.exp(-8)) / 3)
    assert m.uniformity(pts) == pytest.approx(expected)
    # cosines: 0, -1, 0
    assert m.anisotropy(pts) == pytest.approx(-1 / 3)
    assert m.anisotropy(np.array([[1.0, 1.0], [2.0, 2.0]])) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        m.uniformity(pts[:1])

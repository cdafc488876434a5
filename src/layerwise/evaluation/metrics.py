"""Pure metric functions (numpy in, floats out)."""
from __future__ import annotations

import numpy as np
from scipy import stats


def cosine_scores(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two equally shaped matrices."""
    a = a / np.clip(np.linalg.norm(a, axis=1, keepdims=True), 1e-12, None)
    b = b / np.clip(np.linalg.norm(b, axis=1, keepdims=True), 1e-12, None)
    return np.sum(a * b, axis=1)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (ties get average ranks)."""
    return float(stats.spearmanr(x, y).statistic)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson linear correlation."""
    return float(stats.pearsonr(x, y).statistic)


# --- retrieval: one query's ranked document ids against its graded relevance judgements ---------------------------
# A query with an empty relevance set scores 0.0 on every metric; evaluators skip such queries (as BEIR does).


def _relevant(relevant) -> dict:
    """Normalise a set of ids or an {id: grade} mapping to {id: grade > 0}."""
    if isinstance(relevant, dict):
        return {doc: float(g) for doc, g in relevant.items() if g > 0}
    return {doc: 1.0 for doc in relevant}


def mrr_at_k(ranked, relevant, k: int = 10) -> float:
    """Reciprocal rank of the first relevant document within the top k (0 if none)."""
    rel = _relevant(relevant)
    for rank, doc in enumerate(list(ranked)[:k], start=1):
        if doc in rel:
            return 1.0 / rank
    return 0.0


def recall_at_k(ranked, relevant, k: int = 10) -> float:
    """Fraction of the relevant documents found in the top k."""
    rel = _relevant(relevant)
    if not rel:
        return 0.0
    return sum(1 for doc in list(ranked)[:k] if doc in rel) / len(rel)


def ndcg_at_k(ranked, relevant, k: int = 10) -> float:
    """nDCG@k with linear gain (the grade) and log2(rank + 1) discount, as trec_eval's ndcg_cut."""
    rel = _relevant(relevant)
    if not rel:
        return 0.0
    dcg = sum(rel.get(doc, 0.0) / np.log2(rank + 1) for rank, doc in enumerate(list(ranked)[:k], start=1))
    ideal = sorted(rel.values(), reverse=True)[:k]
    idcg = sum(g / np.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
    return float(dcg / idcg)


def average_precision_at_k(ranked, relevant, k: int = 100) -> float:
    """AP@k: sum of precision at each relevant rank within the top k, over the number of relevant documents
    (trec_eval's map_cut: the denominator is all relevant documents, not min(k, that))."""
    rel = _relevant(relevant)
    if not rel:
        return 0.0
    hits, total = 0, 0.0
    for rank, doc in enumerate(list(ranked)[:k], start=1):
        if doc in rel:
            hits += 1
            total += hits / rank
    return total / len(rel)


RETRIEVAL_METRICS = {
    "mrr@10": lambda r, g: mrr_at_k(r, g, 10),
    "recall@1": lambda r, g: recall_at_k(r, g, 1),
    "recall@5": lambda r, g: recall_at_k(r, g, 5),
    "recall@10": lambda r, g: recall_at_k(r, g, 10),
    "ndcg@10": lambda r, g: ndcg_at_k(r, g, 10),
    "map@100": lambda r, g: average_precision_at_k(r, g, 100),
}


def retrieval_scores(run: dict, qrels: dict) -> dict:
    """Mean of every RETRIEVAL_METRICS entry x 100 over the queries with at least one relevant document.

    run: {query id: ranked document ids}; qrels: {query id: {document id: grade} or set of ids}.
    """
    judged = [q for q in qrels if _relevant(qrels[q])]
    out = {name: 0.0 for name in RETRIEVAL_METRICS}
    for q in judged:
        for name, fn in RETRIEVAL_METRICS.items():
            out[name] += fn(run.get(q, []), qrels[q])
    out = {name: 100.0 * value / len(judged) if judged else 0.0 for name, value in out.items()}
    out["queries"] = len(judged)
    return out


# --- geometry of the embedding space (Wang & Isola 2020) -----------------------------------------------------------


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)


def alignment(x: np.ndarray, y: np.ndarray, alpha: float = 2.0) -> float:
    """Mean ||f(x) - f(y)||^alpha over positive pairs (rows of x and y), after L2 normalisation. Lower is better."""
    d = np.linalg.norm(l2_normalize(x) - l2_normalize(y), axis=1)
    return float(np.mean(d ** alpha))


def _pair_sq_dists(x: np.ndarray) -> np.ndarray:
    """Squared distances of all pairs i < j of L2-normalised rows."""
    x = l2_normalize(x)
    gram = x @ x.T
    i, j = np.triu_indices(len(x), k=1)
    return np.clip(2.0 - 2.0 * gram[i, j], 0.0, None)


def uniformity(x: np.ndarray, t: float = 2.0) -> float:
    """log mean exp(-t ||f(x) - f(y)||^2) over all distinct pairs, after L2 normalisation. Lower is better."""
    if len(x) < 2:
        raise ValueError("uniformity needs at least 2 embeddings")
    from scipy.special import logsumexp

    d2 = _pair_sq_dists(x)
    return float(logsumexp(-t * d2) - np.log(len(d2)))


def anisotropy(x: np.ndarray) -> float:
    """Mean cosine similarity over all distinct pairs of rows (0 for an isotropic space)."""
    if len(x) < 2:
        raise ValueError("anisotropy needs at least 2 embeddings")
    return float(np.mean(1.0 - _pair_sq_dists(x) / 2.0))

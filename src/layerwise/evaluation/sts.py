"""STS evaluation: cosine similarity of the two sentences' embeddings against gold scores.

Scores are Spearman / Pearson correlations x 100.  An encoder is anything with
`encode(texts, batch_size=...) -> np.ndarray` (layerwise's SentenceEncoder, a SentenceTransformer, ...).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from layerwise.data.sts import StsPairs, find_stsb, read_stsb
from layerwise.evaluation.metrics import cosine_scores, pearson, spearman


class Encoder(Protocol):
    def encode(self, texts: list[str], batch_size: int = 64, **kwargs: Any) -> np.ndarray: ...


def encode_unique(encoder: Encoder, texts: list[str], batch_size: int = 64) -> tuple[np.ndarray, dict[str, int]]:
    """Encode each distinct text once; return (embeddings of the distinct texts, text -> row)."""
    index: dict[str, int] = {}
    for text in texts:
        index.setdefault(text, len(index))
    unique = list(index)
    emb = np.asarray(encoder.encode(unique, batch_size=batch_size), dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] != len(unique):
        raise ValueError(f"encoder returned shape {emb.shape} for {len(unique)} texts")
    return emb, index


def pair_similarities(encoder: Encoder, pairs: StsPairs, batch_size: int = 64) -> np.ndarray:
    """Cosine similarity of every pair, encoding the distinct sentences once."""
    emb, index = encode_unique(encoder, pairs.sentences1 + pairs.sentences2, batch_size)
    a = emb[[index[s] for s in pairs.sentences1]]
    b = emb[[index[s] for s in pairs.sentences2]]
    return cosine_scores(a.astype(np.float64), b.astype(np.float64))


def correlations(sims: np.ndarray, gold: np.ndarray) -> dict:
    """Spearman and Pearson x 100 of predicted similarities against gold scores."""
    return {"spearman": 100.0 * spearman(sims, gold), "pearson": 100.0 * pearson(sims, gold), "n": int(len(gold))}


def evaluate_pairs(encoder: Encoder, pairs: StsPairs, batch_size: int = 64) -> dict:
    """{"spearman", "pearson"} (x 100, cosine similarity) and "n" for one set of pairs."""
    return correlations(pair_similarities(encoder, pairs, batch_size), np.asarray(pairs.scores, dtype=np.float64))


def evaluate_stsb(encoder: Encoder, data_dir: Path, split: str = "dev", batch_size: int = 64) -> dict:
    """Evaluate on STS-B `split` found under data_dir (see find_stsb)."""
    return evaluate_pairs(encoder, read_stsb(find_stsb(Path(data_dir), split)), batch_size)


# --- several STS tasks: STS12-16 (raw releases), STS-B, SICK-R ---------------------------------------------------

STS_TASKS = ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr")


def parse_tasks(text: str) -> list[str]:
    """Split a comma-separated task list and check every name."""
    from layerwise.errors import unknown_name

    tasks = [t.strip().lower() for t in text.split(",") if t.strip()]
    for task in tasks:
        if task not in STS_TASKS:
            raise unknown_name("STS task", task, STS_TASKS)
    if not tasks:
        raise unknown_name("STS task", "", STS_TASKS)
    return list(dict.fromkeys(tasks))


def evaluate_subsets(encoder: Encoder, subsets: dict[str, StsPairs], batch_size: int = 64) -> dict:
    """Per-subset scores, `all` (one correlation over the concatenated subsets) and `wmean` (size-weighted mean).

    The headline "spearman"/"pearson"/"n" are the `all` figures (SimCSE's setting).
    """
    names = list(subsets)
    merged = StsPairs.concat([subsets[n] for n in names])
    sims = pair_similarities(encoder, merged, batch_size)
    gold = merged.scores
    per: dict[str, dict] = {}
    start = 0
    for name in names:
        n = len(subsets[name])
        per[name] = correlations(sims[start:start + n], gold[start:start + n])
        start += n
    sizes = np.array([per[n]["n"] for n in names], dtype=np.float64)
    wmean = {key: float(np.sum(sizes * [per[n][key] for n in names]) / sizes.sum()) for key in ("spearman", "pearson")}
    overall = correlations(sims, gold)
    return {**overall, "all": overall, "wmean": {**wmean, "n": int(sizes.sum())}, "subsets": per}


def load_task(task: str, data_dir: Path, split: str = "test") -> StsPairs | dict[str, StsPairs]:
    """Pairs of a single-set task (stsb, sickr) or the subsets of a raw STS year (sts12..sts16)."""
    from layerwise.data import sts as data

    if task == "stsb":
        return read_stsb(find_stsb(Path(data_dir), split))
    if task == "sickr":
        return data.read_sick(data.find_sick(Path(data_dir)))
    return data.read_sts_year(data.find_sts_year(Path(data_dir), task))


def evaluate_tasks(encoder: Encoder, data_dir: Path, tasks: list[str], split: str = "test",
                   batch_size: int = 64) -> dict:
    """Evaluate every task; add "avg" (mean Spearman over tasks, `all` setting) and "avg_wmean"."""
    loaded = {task: load_task(task, data_dir, split) for task in tasks}  # read everything first: fail fast
    results: dict = {}
    for task, pairs in loaded.items():
        if isinstance(pairs, dict):
            results[task] = evaluate_subsets(encoder, pairs, batch_size)
        else:
            results[task] = evaluate_pairs(encoder, pairs, batch_size)
    per_task = [results[t]["spearman"] for t in tasks]
    per_task_w = [results[t]["wmean"]["spearman"] if "wmean" in results[t] else results[t]["spearman"] for t in tasks]
    return {"tasks": results, "avg": float(np.mean(per_task)), "avg_wmean": float(np.mean(per_task_w))}

"""The geometry of an embedding space: alignment and uniformity (Wang & Isola 2020), anisotropy, and the cost of
encoding (throughput, peak memory).

- alignment: mean squared distance of normalised STS-B positive pairs (score >= 4); lower is better;
- uniformity: log mean exp(-2 d^2) over all pairs of a random sample of STS-B sentences; lower is better;
- anisotropy: mean cosine over all pairs of the same sample (near 0 = isotropic).
"""
from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import numpy as np

from layerwise.data.sts import StsPairs, find_stsb, read_stsb
from layerwise.errors import DataError
from layerwise.evaluation.metrics import alignment, anisotropy, uniformity

POSITIVE_SCORE = 4.0


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def sample_sentences(pairs: StsPairs, size: int, seed: int = 0) -> list[str]:
    """A seeded random sample of the distinct sentences of the pairs."""
    unique = list(dict.fromkeys(pairs.sentences1 + pairs.sentences2))
    rng = np.random.default_rng(seed)
    keep = rng.choice(len(unique), size=min(size, len(unique)), replace=False)
    return [unique[i] for i in sorted(keep)]


def space_metrics(encoder, pairs: StsPairs, sentences: list[str], batch_size: int = 64) -> dict:
    """Alignment on the positive pairs, uniformity and anisotropy on `sentences`, throughput of the encoding."""
    pos = np.flatnonzero(pairs.scores >= POSITIVE_SCORE)
    if len(pos) == 0:
        raise DataError("pairs", f"no positive pairs (score >= {POSITIVE_SCORE:g}) for alignment")
    if len(sentences) < 2:
        raise DataError("sentences", "need at least 2 sentences for uniformity and anisotropy")
    first, second = [pairs.sentences1[i] for i in pos], [pairs.sentences2[i] for i in pos]
    texts = list(dict.fromkeys(first + second + sentences))
    encoder.encode(texts[:8], batch_size=batch_size)  # warm-up, not timed
    start = time.perf_counter()
    emb = np.asarray(encoder.encode(texts, batch_size=batch_size), dtype=np.float32)
    seconds = time.perf_counter() - start
    row = {text: i for i, text in enumerate(texts)}
    pick = lambda items: emb[[row[t] for t in items]]  # noqa: E731
    sample = pick(sentences)
    return {
        "alignment": alignment(pick(first), pick(second)),
        "uniformity": uniformity(sample),
        "anisotropy": anisotropy(sample),
        "pairs": int(len(pos)),
        "sentences": len(sentences),
        "encoded": len(texts),
        "throughput": len(texts) / max(seconds, 1e-9),
        "peak_rss_mib": peak_rss_mib(),
    }


def evaluate_space(encoder, data_dir: Path, split: str = "test", sentences: int = 1000, seed: int = 0,
                   batch_size: int = 64) -> dict:
    """space_metrics on STS-B `split`: its positive pairs, and a random sample of its sentences."""
    pairs = read_stsb(find_stsb(Path(data_dir), split))
    return space_metrics(encoder, pairs, sample_sentences(pairs, sentences, seed), batch_size)

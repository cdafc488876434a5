"""Semantic search over a text corpus (one document per line): cached corpus embeddings, exact or FAISS top-k.

The corpus is embedded once (unit length, float32, streamed into a memory-mapped .npy) and cached under a key of
the model (its name, or for a local directory its path and the size and time of its files), the pooler, the
inference mode, the maximum length and the SHA-256 of the corpus file's bytes: a changed corpus or model gets a new
entry, the old entries of the same corpus and model are removed. The cache lives in `.layerwise-cache/` beside the
corpus, or in a directory of your choice.

Search is exact by default (cosine = inner product of unit vectors, computed chunk by chunk with
evaluation.retrieval.exact_search; equal scores rank the earlier line first). `backend="faiss"` uses a FAISS
inner-product index instead, when faiss is installed (faster on large corpora and many cores).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from layerwise.atomic import write_json
from layerwise.data.readers import iter_lines
from layerwise.errors import ConfigError, DataError, LayerwiseError

CACHE_DIR_NAME = ".layerwise-cache"
CACHE_VERSION = 1
DOC_CHUNK = 16384  # corpus rows scored at a time (memory: queries x chunk scores)
BACKENDS = ("exact", "faiss", "auto")
AUTO_FAISS_MIN = 200_000  # backend="auto": FAISS (when installed) from this many documents on


@dataclass(frozen=True)
class Hit:
    rank: int
    score: float
    line: int  # 1-based line number in the corpus file
    text: str


@dataclass
class Corpus:
    """Documents (non-blank lines) with their line numbers, their embeddings and where those are cached."""

    path: Path
    texts: list[str]
    lines: list[int]
    embeddings: np.ndarray  # (documents, dim), unit length; memory-mapped from the cache
    cache_file: Path | None
    encoded: bool  # True when this call embedded the corpus, False when the cache was reused


def read_corpus(path: str | Path) -> tuple[list[str], list[int]]:
    """(documents, 1-based line numbers): every non-blank line, stripped; DataError when there is none."""
    texts, lines = [], []
    for number, line in iter_lines(path):
        if line.strip():
            texts.append(line.strip())
            lines.append(number)
    if not texts:
        raise DataError(path, "no documents (expected one per line)")
    return texts, lines


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_fingerprint(model: str) -> str:
    """The model's name, or for a local directory its absolute path and the size and mtime of every file in it
    (so that a model retrained into the same directory does not reuse stale embeddings)."""
    path = Path(model).expanduser()
    if not path.exists():
        try:  # the default model's short name maps to its installed directory
            from layerwise.modeling.backbone import resolve_model_path

            path = Path(resolve_model_path(model))
        except LayerwiseError:
            return model
        if not path.exists():
            return model
    path = path.resolve()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    stats = [(str(p.relative_to(path)) if p != path else p.name, p.stat().st_size, p.stat().st_mtime_ns)
             for p in files if CACHE_DIR_NAME not in p.parts]
    return json.dumps([str(path), stats])


def cache_key(model: str, encoder: Any, corpus_sha: str) -> dict[str, Any]:
    """What the cached embeddings depend on."""
    pooler = getattr(getattr(encoder, "pooler", None), "name", None)
    return {"version": CACHE_VERSION, "model": model, "model_fingerprint": model_fingerprint(model),
            "pooler": pooler, "mode": getattr(encoder, "mode", None),
            "max_length": getattr(encoder, "max_length", None), "dim": int(encoder.embedding_dim),
            "corpus_sha256": corpus_sha}


def _key_hash(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def _model_hash(key: dict[str, Any]) -> str:
    return _key_hash({k: v for k, v in key.items() if k != "corpus_sha256"})


def cache_paths(corpus: Path, key: dict[str, Any], cache_dir: str | Path | None) -> tuple[Path, Path]:
    """(embeddings .npy, metadata .json) of this key."""
    folder = Path(cache_dir) if cache_dir else corpus.parent / CACHE_DIR_NAME
    stem = f"{corpus.name}.{_key_hash(key)}"
    return folder / f"{stem}.npy", folder / f"{stem}.json"


def _load_cached(npy: Path, meta: Path, key: dict[str, Any], count: int) -> np.ndarray | None:
    """The cached matrix when its metadata matches the key and its shape the corpus; else None."""
    if not (npy.is_file() and meta.is_file()):
        return None
    try:
        stored = json.loads(meta.read_text(encoding="utf-8"))
        if stored.get("key") != key:
            return None
        matrix = np.load(npy, mmap_mode="r")
    except (OSError, ValueError):
        return None
    if matrix.ndim != 2 or matrix.shape != (count, key["dim"]) or matrix.dtype != np.float32:
        return None
    return matrix


def _prune(folder: Path, corpus: Path, key: dict[str, Any], keep: Path) -> None:
    """Remove the entries of the same corpus file and model that hold other corpus contents (stale)."""
    model = _model_hash(key)
    for meta in folder.glob(f"{corpus.name}.*.json"):
        if meta == keep:
            continue
        try:
            stored = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if stored.get("corpus") == str(corpus.resolve()) and stored.get("model_hash") == model:
            meta.with_suffix(".npy").unlink(missing_ok=True)
            meta.unlink(missing_ok=True)


def build_corpus(encoder: Any, corpus: str | Path, model: str, cache_dir: str | Path | None = None,
                 batch_size: int = 64, rebuild: bool = False, log=None) -> Corpus:
    """Read the corpus and return its embeddings: from the cache when the key matches, else embedded and cached."""
    from layerwise.commands.encode import write_embeddings

    corpus = Path(corpus)
    texts, lines = read_corpus(corpus)
    key = cache_key(model, encoder, file_sha256(corpus))
    npy, meta = cache_paths(corpus, key, cache_dir)
    matrix = None if rebuild else _load_cached(npy, meta, key, len(texts))
    if matrix is not None:
        return Corpus(corpus, texts, lines, matrix, npy, encoded=False)
    try:
        npy.parent.mkdir(parents=True, exist_ok=True)
        probe = npy.parent / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise LayerwiseError(f"cannot write the embedding cache in {npy.parent} ({exc.strerror or exc}): "
                             "pass --cache-dir DIR") from None
    if log:
        log(f"embedding {len(texts)} documents of {corpus} (cached in {npy})")
    meta.unlink(missing_ok=True)  # the metadata marks a complete entry: remove it before rewriting the matrix
    write_embeddings(encoder, texts, npy, batch_size, normalize=True)
    write_json(meta, {"key": key, "model_hash": _model_hash(key), "corpus": str(corpus.resolve()),
                       "documents": len(texts)})
    _prune(npy.parent, corpus, key, meta)
    return Corpus(corpus, texts, lines, np.load(npy, mmap_mode="r"), npy, encoded=True)


# ------------------------------------------------------------------------------------------------------ search
def require_faiss() -> Any:
    """The faiss module, or a ConfigError saying what to install."""
    try:
        import faiss
    except ImportError:
        raise ConfigError("--index faiss needs the 'faiss' package, which is not installed: pip install faiss-cpu "
                          "(or faiss-gpu), or use the default --index exact") from None
    return faiss


def faiss_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("faiss") is not None


def top_k_exact(queries: np.ndarray, corpus: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k, the corpus scored chunk by chunk (ties: the earlier document first)."""
    from layerwise.evaluation.retrieval import exact_search

    chunks = (corpus[start:start + DOC_CHUNK] for start in range(0, len(corpus), DOC_CHUNK))
    return exact_search(np.ascontiguousarray(queries, dtype=np.float32), chunks, k)


def top_k_faiss(queries: np.ndarray, corpus: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k with a FAISS inner-product index (added chunk by chunk from the memory-mapped matrix)."""
    faiss = require_faiss()
    index = faiss.IndexFlatIP(int(corpus.shape[1]))
    for start in range(0, len(corpus), DOC_CHUNK):
        index.add(np.ascontiguousarray(corpus[start:start + DOC_CHUNK], dtype=np.float32))
    scores, indices = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
    return np.asarray(scores), np.asarray(indices, dtype=np.int64)


def choose_backend(backend: str, documents: int) -> str:
    if backend not in BACKENDS:
        raise ConfigError(f"--index {backend}: expected one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "faiss" if documents >= AUTO_FAISS_MIN and faiss_available() else "exact"
    return backend


def search(encoder: Any, corpus: Corpus, queries: Sequence[str], top_k: int = 10, backend: str = "exact",
           batch_size: int = 64) -> list[list[Hit]]:
    """The top_k documents of every query, best first."""
    if top_k <= 0:
        raise ConfigError(f"--top-k must be > 0, got {top_k}")
    if not queries:
        raise ConfigError("no query: pass --query TEXT or --queries FILE")
    k = min(top_k, len(corpus.texts))
    q = np.asarray(encoder.encode(list(queries), batch_size=batch_size, normalize=True), dtype=np.float32)
    find = top_k_faiss if choose_backend(backend, len(corpus.texts)) == "faiss" else top_k_exact
    scores, indices = find(q, corpus.embeddings, k)
    return [[Hit(rank + 1, float(s), corpus.lines[int(i)], corpus.texts[int(i)])
             for rank, (s, i) in enumerate(zip(row_s, row_i)) if int(i) >= 0 and np.isfinite(s)]
            for row_s, row_i in zip(scores, indices)]


def results_json(model: str, corpus: Corpus, queries: Sequence[str], hits: list[list[Hit]]) -> dict[str, Any]:
    return {"model": model, "corpus": str(corpus.path), "documents": len(corpus.texts),
            "cache": str(corpus.cache_file) if corpus.cache_file else None, "cached": not corpus.encoded,
            "results": [{"query": q, "hits": [{**asdict(h), "score": round(h.score, 6)} for h in row]}
                        for q, row in zip(queries, hits)]}


def format_results(queries: Sequence[str], hits: list[list[Hit]]) -> str:
    """Plain text: per query, one line per hit: rank, score, line number, text."""
    out = []
    for number, (query, row) in enumerate(zip(queries, hits), start=1):
        out.append(f"query {number}: {query}")
        width = len(str(max((h.line for h in row), default=1)))
        out += [f"  {h.rank:>3}  {h.score:7.4f}  line {h.line:>{width}}  {h.text}" for h in row]
    return "\n".join(out)

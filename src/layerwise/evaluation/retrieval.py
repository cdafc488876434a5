"""Retrieval evaluation: exact cosine search, then MRR@10, Recall@1/5/10, nDCG@10 and MAP@100 (x 100).

Three sources of (corpus, queries, qrels):
- a BEIR-style folder: corpus.jsonl ({"_id", "title", "text"}), queries.jsonl ({"_id", "text"}), qrels/<split>.tsv
  (header; query-id, corpus-id, score);
- Quora's quora_duplicate_questions.tsv: every question with a duplicate is a query, its duplicates are relevant,
  every other question is the corpus (a query never retrieves itself);
- a paraphrase set from a labelled pair file (MRPC with Quality 1, or STS-B pairs scored 4 or more): first sentences
  are queries, all second sentences of the file the corpus.

Search is exact: documents are sorted by id (as integers when every id is an integer, else as strings), so that
equal scores rank the smaller id first; queries x corpus is computed chunk by chunk, keeping a running top-k.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from layerwise.data.readers import jsonl_objects
from layerwise.data.sts import raw_lines, read_stsb
from layerwise.errors import DataError
from layerwise.evaluation.metrics import l2_normalize, retrieval_scores

TOP_K = 100


@dataclass
class RetrievalSet:
    """A corpus, queries and graded relevance judgements; documents are kept in id order (the tie rule)."""

    doc_ids: list[str]
    doc_texts: list[str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, float]]
    query_self: dict[str, str] | None = None  # query id -> its own document id, never retrieved for it
    source: str = "corpus"

    def __post_init__(self) -> None:
        if not self.doc_ids:
            raise DataError(self.source, "empty corpus: expected at least one document")
        order = id_order(self.doc_ids)
        self.doc_ids = [self.doc_ids[i] for i in order]
        self.doc_texts = [self.doc_texts[i] for i in order]


def id_order(ids: list[str]) -> list[int]:
    """Positions of ids in ascending id order: as integers when every id is an integer, else as strings."""
    if all(s.lstrip("-").isdigit() for s in ids):
        return sorted(range(len(ids)), key=lambda i: int(ids[i]))
    return sorted(range(len(ids)), key=lambda i: ids[i])


# --- exact top-k search ----------------------------------------------------------------------------------------------


def chunk_top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (values, column indices) of every row, equal scores ordered by the smaller column first."""
    rows, cols = scores.shape
    if cols <= k:
        return scores, np.broadcast_to(np.arange(cols), (rows, cols))
    import torch  # topk is several times faster than np.argpartition here

    top = torch.topk(torch.from_numpy(np.ascontiguousarray(scores)), k, dim=1, sorted=False)
    vals, idx = top.values.numpy().copy(), top.indices.numpy().copy()
    kth = vals.min(axis=1)
    tied = np.flatnonzero((scores >= kth[:, None]).sum(axis=1) > k)
    for r in tied:  # a tie straddles the cut: pick the smaller indices among the equals
        cand = np.flatnonzero(scores[r] >= kth[r])
        cand = cand[np.lexsort((cand, -scores[r, cand]))[:k]]
        idx[r], vals[r] = cand, scores[r, cand]
    return vals, idx


def merge_top_k(vals: np.ndarray, idx: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Sort every row by (score descending, index ascending) and keep k."""
    order = np.lexsort((idx, -vals), axis=1)[:, :k]
    return np.take_along_axis(vals, order, axis=1), np.take_along_axis(idx, order, axis=1)


def exact_search(queries: np.ndarray, doc_chunks, k: int = TOP_K, exclude: np.ndarray | None = None,
                 query_chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k of every query over documents given as successive chunks of rows.

    Memory is O(query_chunk x document chunk + queries x k): the full score matrix never exists.
    exclude: per query a global document index it may not retrieve (-1 for none).
    Returns (scores, global indices), each (queries, <= k), ordered; ties go to the smaller index.
    """
    n = len(queries)
    best_v = np.full((n, 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((n, 0), dtype=np.int64)
    offset = 0
    for docs in doc_chunks:
        docs = np.asarray(docs, dtype=np.float32)
        new_v, new_i = [], []
        for start in range(0, n, query_chunk):
            scores = queries[start:start + query_chunk] @ docs.T
            if exclude is not None:
                ex = exclude[start:start + query_chunk] - offset
                rows = np.flatnonzero((ex >= 0) & (ex < len(docs)))
                scores[rows, ex[rows]] = -np.inf
            v, i = chunk_top_k(scores, k)
            new_v.append(v)
            new_i.append(i + offset)
        if n:
            best_v, best_i = merge_top_k(np.concatenate([best_v, np.concatenate(new_v)], axis=1),
                                         np.concatenate([best_i, np.concatenate(new_i)], axis=1), k)
        offset += len(docs)
    return best_v, best_i


def encode_normalized(encoder, texts: list[str], batch_size: int) -> np.ndarray:
    """L2-normalised float32 embeddings."""
    emb = np.asarray(encoder.encode(texts, batch_size=batch_size), dtype=np.float32)
    if emb.ndim != 2 or len(emb) != len(texts):
        raise ValueError(f"encoder returned shape {emb.shape} for {len(texts)} texts")
    return l2_normalize(emb).astype(np.float32)


def evaluate_retrieval(encoder, data: RetrievalSet, batch_size: int = 64, k: int = TOP_K,
                       doc_chunk: int = 16384, query_chunk: int = 256) -> dict:
    """Encode queries and (chunk by chunk) the corpus, search exactly, and score the rankings (x 100)."""
    qids = [q for q in data.queries if any(g > 0 for g in data.qrels.get(q, {}).values())]
    q_emb = encode_normalized(encoder, [data.queries[q] for q in qids], batch_size)
    position = {doc: i for i, doc in enumerate(data.doc_ids)}
    exclude = None
    if data.query_self:
        exclude = np.array([position.get(data.query_self.get(q, ""), -1) for q in qids], dtype=np.int64)
    chunks = (encode_normalized(encoder, data.doc_texts[s:s + doc_chunk], batch_size)
              for s in range(0, len(data.doc_texts), doc_chunk))
    vals, idx = exact_search(q_emb, chunks, k, exclude, query_chunk)
    run = {q: [data.doc_ids[i] for i, v in zip(idx[r], vals[r]) if np.isfinite(v)] for r, q in enumerate(qids)}
    out = retrieval_scores(run, {q: data.qrels[q] for q in qids})
    out["documents"] = len(data.doc_ids)
    return out


# --- readers ---------------------------------------------------------------------------------------------------------


def _read_jsonl(path: Path, fields: tuple[str, ...]) -> list[tuple[int, dict]]:
    """(line number, object) of every non-empty line; each object must have the given fields."""
    return jsonl_objects(path, enumerate(raw_lines(path), start=1), fields)


def read_beir(folder: Path, split: str = "test") -> RetrievalSet:
    """A BEIR-style folder: corpus.jsonl, queries.jsonl and qrels/<split>.tsv."""
    folder = Path(folder)
    corpus_path, queries_path = folder / "corpus.jsonl", folder / "queries.jsonl"
    qrels_path = folder / "qrels" / f"{split}.tsv"
    docs = _read_jsonl(corpus_path, ("_id",))
    if not docs:
        raise DataError(corpus_path, "empty corpus: expected at least one document")
    doc_ids = [str(obj["_id"]) for _, obj in docs]
    texts = [" ".join(t for t in (str(obj.get("title") or ""), str(obj.get("text") or "")) if t) for _, obj in docs]
    queries = {str(obj["_id"]): str(obj.get("text", "")) for _, obj in _read_jsonl(queries_path, ("_id", "text"))}
    qrels = read_qrels(qrels_path, set(doc_ids), set(queries))
    return RetrievalSet(doc_ids, texts, queries, qrels, source=str(corpus_path))


def read_qrels(path: Path, doc_ids: set[str], query_ids: set[str]) -> dict[str, dict[str, float]]:
    """query-id, corpus-id, score lines (an optional header); every id must exist."""
    qrels: dict[str, dict[str, float]] = {}
    for number, line in enumerate(raw_lines(path), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 3:
            raise DataError(path, "expected 3 tab-separated fields: query-id, corpus-id, score", line=number)
        qid, did, grade = fields[0].strip(), fields[1].strip(), fields[2].strip()
        if number == 1 and not _is_number(grade):
            continue  # header
        if not _is_number(grade):
            raise DataError(path, f"expected a numeric relevance score, got {grade!r}", line=number)
        if did not in doc_ids:
            raise DataError(path, f"unknown document id {did!r} (not in the corpus)", line=number)
        if qid not in query_ids:
            raise DataError(path, f"unknown query id {qid!r} (not in the queries)", line=number)
        qrels.setdefault(qid, {})[did] = float(grade)
    return qrels


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


QUORA_COLUMNS = ("id", "qid1", "qid2", "question1", "question2", "is_duplicate")


def read_quora(path: Path) -> RetrievalSet:
    """quora_duplicate_questions.tsv: questions with a duplicate are queries, all other questions the corpus."""
    path = Path(path)
    lines = raw_lines(path)
    header = lines[0].split("\t") if lines else []
    if tuple(h.strip() for h in header) != QUORA_COLUMNS:
        raise DataError(path, f"expected the header {' '.join(QUORA_COLUMNS)}", line=1)
    texts: dict[str, str] = {}
    qrels: dict[str, dict[str, float]] = {}
    for number, fields in _tsv_records(path, lines[1:], len(QUORA_COLUMNS), first=2):
        _, q1, q2, t1, t2, dup = fields
        if dup.strip() not in ("0", "1"):
            raise DataError(path, f"expected is_duplicate 0 or 1, got {dup.strip()!r}", line=number)
        texts.setdefault(q1, t1)
        texts.setdefault(q2, t2)
        if dup.strip() == "1" and q1 != q2:
            qrels.setdefault(q1, {})[q2] = 1.0
            qrels.setdefault(q2, {})[q1] = 1.0
    queries = {q: texts[q] for q in qrels}
    return RetrievalSet(list(texts), list(texts.values()), queries, qrels, {q: q for q in queries}, source=str(path))


def _tsv_records(path: Path, lines: list[str], width: int, first: int):
    """Yield (line number, fields) of exactly `width` tab-separated fields; a record broken by a newline inside
    a question is joined back with the following line(s)."""
    pending: list[str] | None = None
    start = first
    for number, line in enumerate(lines, start=first):
        if pending is None:
            if not line.strip():
                continue
            pending, start = line.split("\t"), number
        else:
            more = line.split("\t")
            pending[-1] += "\n" + more[0]
            pending += more[1:]
        if len(pending) > width:
            raise DataError(path, f"expected {width} tab-separated fields, got {len(pending)}", line=start)
        if len(pending) == width:
            yield start, pending
            pending = None
    if pending is not None:
        raise DataError(path, f"expected {width} tab-separated fields, got {len(pending)}", line=start)


def read_labelled_pairs(path: Path) -> tuple[list[str], list[str], list[bool]]:
    """(first sentences, second sentences, is positive) of MRPC (Quality 1) or STS-B (score >= 4)."""
    path = Path(path)
    lines = raw_lines(path)
    if lines and lines[0].split("\t")[0].strip() == "Quality":
        header = [h.strip() for h in lines[0].split("\t")]
        need = ("Quality", "#1 String", "#2 String")
        if any(n not in header for n in need):
            raise DataError(path, f"expected MRPC columns {', '.join(need)}", line=1)
        col = [header.index(n) for n in need]
        s1, s2, pos = [], [], []
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < len(header):
                raise DataError(path, f"expected {len(header)} tab-separated fields, got {len(fields)}", line=number)
            if fields[col[0]].strip() not in ("0", "1"):
                raise DataError(path, f"expected Quality 0 or 1, got {fields[col[0]].strip()!r}", line=number)
            pos.append(fields[col[0]].strip() == "1")
            s1.append(fields[col[1]])
            s2.append(fields[col[2]])
        return s1, s2, pos
    pairs = read_stsb(path)
    return pairs.sentences1, pairs.sentences2, [bool(s >= 4.0) for s in pairs.scores]


def read_paraphrase(path: Path) -> RetrievalSet:
    """First sentences of positive pairs are queries; all distinct second sentences are the corpus."""
    s1, s2, pos = read_labelled_pairs(path)
    doc_of: dict[str, str] = {}
    for text in s2:
        doc_of.setdefault(text, str(len(doc_of)))
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, float]] = {}
    query_of: dict[str, str] = {}
    for a, b, p in zip(s1, s2, pos):
        if p:
            qid = query_of.setdefault(a, f"q{len(query_of)}")
            queries[qid] = a
            qrels.setdefault(qid, {})[doc_of[b]] = 1.0
    if not queries:
        raise DataError(path, "no positive pairs (MRPC Quality 1 or STS-B score >= 4) to use as queries")
    return RetrievalSet(list(doc_of.values()), list(doc_of), queries, qrels, source=str(path))


def detect_format(path: Path) -> str:
    """beir (a folder with corpus.jsonl), quora (the Quora header) or pairs (MRPC / STS-B)."""
    path = Path(path)
    if path.is_dir():
        if (path / "corpus.jsonl").is_file():
            return "beir"
        raise DataError(path, "expected a BEIR folder with corpus.jsonl, queries.jsonl and qrels/")
    if not path.is_file():
        raise DataError(path, "retrieval data not found")
    first = raw_lines(path)[:1]
    if first and tuple(h.strip() for h in first[0].split("\t")) == QUORA_COLUMNS:
        return "quora"
    return "pairs"


def load_retrieval(path: Path, fmt: str | None = None, split: str = "test") -> RetrievalSet:
    """Read a retrieval set of the given (or detected) format."""
    fmt = fmt or detect_format(Path(path))
    if fmt == "beir":
        return read_beir(Path(path), split)
    if fmt == "quora":
        return read_quora(Path(path))
    return read_paraphrase(Path(path))

"""`layerwise search`: top-k semantic search over a corpus (one document per line), with cached embeddings."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from layerwise.errors import ConfigError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "search", help="find the corpus lines closest to queries (cached corpus embeddings)",
        description="Embed a corpus (one document per line) once, cache the embeddings on disk (beside the corpus, "
                    "or in --cache-dir; keyed by model, pooler, mode and the corpus content), and print the top-k "
                    "lines of each query by cosine similarity: rank, score, line number and text.")
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="model directory or name")
    parser.add_argument("--pooling", help="pooler name (default: the model's own, else avg_last)")
    parser.add_argument("--mode", help="inference mode: full, static, cls_last, avg_last")
    parser.add_argument("--corpus", required=True, type=Path, help="text file, one document per line")
    parser.add_argument("--query", action="append", default=[], metavar="TEXT", help="a query (repeatable)")
    parser.add_argument("--queries", type=Path, metavar="FILE", help="a file of queries, one per line")
    parser.add_argument("--top-k", type=int, default=10, help="hits per query (default: 10)")
    parser.add_argument("--index", choices=("exact", "faiss", "auto"), default="exact",
                        help="exact search (default), a FAISS index (needs faiss), or auto: FAISS for large "
                             "corpora when it is installed")
    parser.add_argument("--cache-dir", type=Path, metavar="DIR",
                        help="where to cache corpus embeddings (default: .layerwise-cache/ beside the corpus)")
    parser.add_argument("--rebuild", action="store_true", help="embed the corpus again even when cached")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.set_defaults(func=run)


def read_queries(args) -> list[str]:
    from layerwise.data.readers import read_lines

    queries = [q.strip() for q in args.query if q.strip()]
    if args.queries:
        queries += read_lines(args.queries)
    if not queries:
        raise ConfigError("no query: pass --query TEXT (repeatable) or --queries FILE")
    return queries


def run(args) -> int:
    import layerwise
    from layerwise.search import build_corpus, format_results, require_faiss, results_json, search

    if args.batch_size <= 0:
        raise ConfigError(f"--batch-size must be > 0, got {args.batch_size}")
    if args.top_k <= 0:
        raise ConfigError(f"--top-k must be > 0, got {args.top_k}")
    queries = read_queries(args)
    if args.index == "faiss":
        require_faiss()  # before the model loads and the corpus is embedded
    encoder = layerwise.load(args.model, pooling=args.pooling, mode=args.mode, device=args.device)
    corpus = build_corpus(encoder, args.corpus, args.model, args.cache_dir, args.batch_size, args.rebuild,
                          log=lambda message: print(message, file=sys.stderr))
    hits = search(encoder, corpus, queries, args.top_k, args.index, args.batch_size)
    if args.json:
        print(json.dumps(results_json(args.model, corpus, queries, hits), indent=2, ensure_ascii=False))
    else:
        print(format_results(queries, hits))
    return 0

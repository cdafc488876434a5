"""`layerwise encode`: embed the lines of a text file into a .npy matrix (streamed, written atomically)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from layerwise.data.readers import read_lines
from layerwise.errors import LayerwiseError

CHUNK = 8192  # sentences encoded per chunk: memory is bounded by the chunk, not the corpus


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("encode", help="embed one sentence per line into a .npy file",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="model directory or name")
    parser.add_argument("--pooling", help="pooler name (default: the model's own, else avg_last)")
    parser.add_argument("--mode", help="inference mode: full, static, cls_last, avg_last")
    parser.add_argument("--input", required=True, type=Path, help="text file, one sentence per line")
    parser.add_argument("--output", required=True, type=Path, help="output .npy file")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--normalize", action="store_true", help="unit-length embeddings")
    parser.add_argument("--device", default="cpu")
    parser.set_defaults(func=run)


def run(args) -> int:
    import layerwise

    if args.batch_size <= 0:
        raise LayerwiseError(f"--batch-size must be > 0, got {args.batch_size}")
    if args.output.suffix != ".npy":
        raise LayerwiseError(f"--output {args.output}: expected a .npy file name")
    sentences = read_lines(args.input)
    encoder = layerwise.load(args.model, pooling=args.pooling, mode=args.mode, device=args.device)
    write_embeddings(encoder, sentences, args.output, args.batch_size, args.normalize)
    print(f"wrote {len(sentences)} x {encoder.embedding_dim} embeddings to {args.output}")
    return 0


def write_embeddings(encoder, sentences: list[str], output: Path, batch_size: int, normalize: bool) -> None:
    """Encode chunk by chunk into a memory-mapped temporary .npy, renamed into place when complete."""
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.stem + ".tmp.npy")
    matrix = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32,
                                       shape=(len(sentences), encoder.embedding_dim))
    try:
        for start in range(0, len(sentences), CHUNK):
            chunk = sentences[start:start + CHUNK]
            matrix[start:start + len(chunk)] = encoder.encode(chunk, batch_size=batch_size, normalize=normalize)
        matrix.flush()
        del matrix
        os.replace(tmp, output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

"""Encoding throughput: layerwise (PyTorch fp32 and ONNX Runtime paths) vs sentence-transformers' encode.

Same model, same sentences, same batch size, same max_seq_length, same threads, one process, interleaved repeats
(median). Also: max |difference| of the fp32 embeddings from sentence-transformers', STS-B Spearman of every path,
and the fraction of this CPU's fp32 matmul peak (measured in the same run) each path reaches.

    python benchmarks/encode.py --repeats 3 --corpus 5000
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

PATHS = ("st", "fp32", "onnx", "onnx-int8", "onnx-int8-pc")
DESCRIPTION = {
    "st": "sentence-transformers encode (fp32, PyTorch)",
    "fp32": "layerwise.load(m).encode (fp32, PyTorch)",
    "onnx": "layerwise.load(d, backend='onnx') fp32, ORT_ENABLE_ALL",
    "onnx-int8": "layerwise.load(d, backend='onnx', variant='int8'): dynamic int8, per-tensor",
    "onnx-int8-pc": "ONNX dynamic int8, per-channel weight scales",
}


def parse_args(argv):
    p = C.parser(__doc__, repeats=3)
    p.add_argument("--split", default="test", help="STS-B split whose sentences are encoded and scored")
    p.add_argument("--sentences", type=int, default=0, help="cap on STS-B pairs (0: all)")
    p.add_argument("--corpus", type=int, default=50000,
                   help="also time a corpus of this many sentences (STS-B repeated and shuffled; 0: skip)")
    p.add_argument("--corpus-paths", default="st,fp32,onnx-int8-pc", help="paths timed on the corpus")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--paths", default=",".join(PATHS), help=f"comma list from {', '.join(PATHS)}")
    p.add_argument("--work-dir", help="where the ONNX export goes (default: a temporary directory)")
    p.add_argument("--matmul-size", type=int, default=2048)
    p.add_argument("--score-paths", default="",
                   help="untimed: score these paths on the WHOLE split too (when --sentences caps the timed set)")
    return p.parse_args(argv)


def forward_gflop(config, lengths: np.ndarray) -> float:
    """Useful GFLOP of a BERT-style encoder over sentences of these token lengths (no padding counted):
    per layer 2 n (4 H^2 + 2 H I) for the projections and the MLP, plus 4 n^2 H for the attention products."""
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    n = lengths.astype(np.float64)
    return float(layers * (2 * n * (4 * h * h + 2 * h * i) + 4 * n * n * h).sum() / 1e9)


def build_paths(args, names, threads, work: Path):
    import layerwise
    from layerwise.modeling.backbone import quiet_transformers

    model_dir = C.resolve_model(args.model)
    encoder = layerwise.load(args.model, pooling="avg_last", mode="full")
    fns = {}
    if "st" in names:
        from sentence_transformers import SentenceTransformer

        with quiet_transformers():
            st = SentenceTransformer(model_dir, device="cpu")
        st.max_seq_length = encoder.max_length
        # all-MiniLM-L6-v2's folder ends with a Normalize module: every path returns unit vectors
        fns["st"] = lambda s: st.encode(s, batch_size=args.batch_size, convert_to_numpy=True,
                                        show_progress_bar=False, normalize_embeddings=True)
    if "fp32" in names:
        fns["fp32"] = lambda s: encoder.encode(s, batch_size=args.batch_size, normalize=True)
    onnx_names = [n for n in names if n.startswith("onnx")]
    if onnx_names:
        from layerwise.export import export_onnx, quantize_int8

        out = work / "onnx"
        out.mkdir(parents=True, exist_ok=True)
        export_onnx(encoder, out, quantize="int8" if "onnx-int8" in names else None)
        if "onnx-int8-pc" in names:
            quantize_int8(out / "model.onnx", out / "model_int8_pc.onnx", per_channel=True)
        variants = {"onnx": "fp32", "onnx-int8": "int8", "onnx-int8-pc": "model_int8_pc.onnx"}
        for name in onnx_names:
            onnx = layerwise.load(str(out), backend="onnx", variant=variants[name], threads=threads)
            fns[name] = (lambda e: lambda s: e.encode(s, batch_size=args.batch_size, normalize=True))(onnx)
    return encoder, fns


def main(argv=None) -> dict:
    args = parse_args(argv)
    threads = C.set_threads(args.threads)
    names = [n.strip() for n in args.paths.split(",") if n.strip()]
    bad = [n for n in names if n not in PATHS]
    if bad:
        raise SystemExit(f"unknown path(s) {bad}; choose from {PATHS}")
    pairs = C.stsb(C.data_dir(args.data_dir), args.split)
    if args.sentences:
        pairs = pairs.head(args.sentences)
    sentences = C.unique_sentences(pairs)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work_dir or tmp)
        encoder, fns = build_paths(args, names, threads, work)
        lengths = np.array([len(ids) for ids in encoder.tokenizer(sentences, truncation=True,
                                                                    max_length=encoder.max_length)["input_ids"]])
        gflop = forward_gflop(encoder.backbone.config, lengths)
        peak = C.matmul_peak_gflops(args.matmul_size)
        outputs = {}

        def run(name):
            return lambda: outputs.__setitem__(name, fns[name](sentences))

        print(f"STS-B {args.split}: {len(sentences)} sentences, batch {args.batch_size}, threads {threads}, "
              f"max_seq_length {encoder.max_length}; interleaved x{args.repeats}")
        times = C.interleave({n: run(n) for n in fns}, args.repeats, log=print)
        peak_after = C.matmul_peak_gflops(args.matmul_size)
        rows, result = [], {"sentences": len(sentences), "batch_size": args.batch_size, "threads": threads,
                            "max_seq_length": encoder.max_length, "repeats": args.repeats,
                            "matmul_peak_gflops": [peak, peak_after], "useful_gflop": gflop, "paths": {}}
        peak_ref = max(peak, peak_after)
        base = C.median(times["st"]) if "st" in times else None
        reference = outputs.get("fp32")
        for name in fns:
            t = C.median(times[name])
            emb = outputs[name]
            entry = {"seconds_median": t, "seconds": times[name], "sentences_per_s": len(sentences) / t,
                     "gflops": gflop / t, "fraction_of_peak": gflop / t / peak_ref,
                     "spearman": C.spearman_from_embeddings(pairs, sentences, emb)}
            if base:
                entry["speedup_vs_st"] = base / t
                entry["speedup_vs_st_each_round"] = [a / b for a, b in zip(times["st"], times[name])]
            if "st" in outputs and name != "st":
                entry["max_abs_diff_vs_st"] = float(np.abs(emb - outputs["st"]).max())
            if reference is not None and name != "fp32":
                entry["max_abs_diff_vs_fp32"] = float(np.abs(emb - reference).max())
            result["paths"][name] = entry
            rounds = " ".join(f"{r:.2f}" for r in entry.get("speedup_vs_st_each_round", []))
            rows.append([name, len(sentences) / t, entry.get("speedup_vs_st", float("nan")), rounds, entry["spearman"],
                         entry.get("max_abs_diff_vs_st", float("nan")), entry["gflops"],
                         100 * entry["fraction_of_peak"], C.spread(times[name])])
        print(f"\nfp32 matmul peak ({args.matmul_size}^2, best of 5): {peak:.1f} GFLOP/s before, "
              f"{peak_after:.1f} after; useful work {gflop:.1f} GFLOP per pass")
        print(C.table(rows, ["path", "sent/s (median)", "x ST (medians)", "x ST per round", "STS-B Spearman",
                             "max|diff| vs ST", "GFLOP/s", "% of peak", "s per pass (min-max)"]))
        if args.score_paths:
            full = C.stsb(C.data_dir(args.data_dir), args.split)
            full_sentences = C.unique_sentences(full)
            result["full_split_spearman"] = {}
            for name in [n for n in args.score_paths.split(",") if n in fns]:
                score = C.spearman_from_embeddings(full, full_sentences, fns[name](full_sentences))
                result["full_split_spearman"][name] = score
                print(f"STS-B {args.split} (all {len(full)} pairs), {name}: Spearman {score:.2f}")
        if args.corpus:
            text = C.corpus(sentences, args.corpus)
            corpus_names = [n for n in args.corpus_paths.split(",") if n in fns]
            print(f"\ncorpus: {len(text)} sentences (STS-B repeated and shuffled), interleaved x1")
            ctimes = C.interleave({n: (lambda f: lambda: f(text))(fns[n]) for n in corpus_names}, 1,
                                  warmup=False, log=print)
            cbase = C.median(ctimes["st"]) if "st" in ctimes else None
            result["corpus"] = {"sentences": len(text), "paths": {
                n: {"seconds": C.median(ctimes[n]), "sentences_per_s": len(text) / C.median(ctimes[n]),
                    **({"speedup_vs_st": cbase / C.median(ctimes[n])} if cbase else {})} for n in corpus_names}}
            print(C.table([[n, v["sentences_per_s"], v.get("speedup_vs_st", float("nan"))]
                           for n, v in result["corpus"]["paths"].items()], ["path", "sent/s", "x ST"]))
    C.emit(result)
    return result


if __name__ == "__main__":
    main()

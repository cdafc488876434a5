"""Scale: encode time and peak memory for growing corpora, streamed to a memory-mapped .npy (the code path of
`layerwise encode`: commands/encode.py write_embeddings). Each size runs in its own fresh process, so peak memory
is that process's own; sizes alternate across repeats. Memory is anonymous RSS (heap), which excludes the pages of
the memory-mapped output file; its growth is measured from just before encoding (model and corpus loaded).

    python benchmarks/scale.py --sizes 1000,10000 --plot docs/performance_scale.png
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402


def parse_args(argv):
    p = C.parser(__doc__, repeats=1)
    p.add_argument("--sizes", default="1000,10000,100000", help="comma list of corpus sizes")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--plot", help="write a log-log PNG here")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)  # internal: run one size and print JSON
    p.add_argument("--out", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def child(args) -> None:
    """One size in this process: load, build the corpus, encode to a memory-mapped .npy; print one JSON line."""
    import numpy as np

    import layerwise
    from layerwise.commands.encode import write_embeddings

    C.set_threads(args.threads)
    pairs = C.stsb(C.data_dir(args.data_dir), "test")
    text = C.corpus(C.unique_sentences(pairs), args.child)
    encoder = layerwise.load(args.model)
    encoder.encode(text[:8])  # warm up
    out = Path(args.out)
    after_chunk: list[float] = []  # heap growth once each streamed chunk is written (the steady level)
    encode_chunk = encoder.encode

    def encode_and_record(chunk, **kwargs):
        embeddings = encode_chunk(chunk, **kwargs)
        after_chunk.append(C.anon_rss_mb() - peak.base_mb)
        return embeddings

    encoder.encode = encode_and_record
    start = time.perf_counter()
    with C.PeakMemory() as peak:
        write_embeddings(encoder, text, out, args.batch_size, False)
    seconds = time.perf_counter() - start
    shape = np.load(out, mmap_mode="r").shape
    print(json.dumps({"sentences": args.child, "seconds": seconds, "peak_anon_rss_growth_mb": peak.peak_mb,
                      "after_chunk_growth_mb": after_chunk, "anon_rss_before_mb": peak.base_mb,
                      "shape": list(shape)}))


def loglog_slope(xs, ys) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / den if den else float("nan")


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.child:
        child(args)
        return {}
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    threads = C.set_threads(args.threads)
    runs: dict[int, list[dict]] = {n: [] for n in sizes}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.repeats):
            for n in sizes:
                cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(n), "--model", args.model,
                       "--batch-size", str(args.batch_size), "--threads", str(threads),
                       "--out", str(Path(tmp) / f"emb-{n}.npy")]
                if args.data_dir:
                    cmd += ["--data-dir", args.data_dir]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode:
                    raise SystemExit(f"size {n} failed:\n{proc.stderr[-2000:]}")
                record = json.loads(proc.stdout.strip().splitlines()[-1])
                runs[n].append(record)
                print(f"  round {round_ + 1}/{args.repeats} {n} sentences: {record['seconds']:.1f} s, "
                      f"peak RSS growth {record['peak_anon_rss_growth_mb']:.0f} MiB")
    rows, result = [], {"batch_size": args.batch_size, "threads": threads, "repeats": args.repeats, "sizes": {}}
    for n in sizes:
        t = C.median([r["seconds"] for r in runs[n]])
        mem = max(r["peak_anon_rss_growth_mb"] for r in runs[n])
        steady = [v for r in runs[n] for v in r["after_chunk_growth_mb"]]
        result["sizes"][n] = {"seconds": t, "sentences_per_s": n / t, "peak_anon_rss_growth_mb": mem,
                              "after_chunk_growth_mb": [min(steady), max(steady)], "chunks": len(steady),
                              "output_mb": n * runs[n][0]["shape"][1] * 4 / 2 ** 20, "runs": runs[n]}
        rows.append([n, t, n / t, mem, f"{min(steady):.0f}-{max(steady):.0f} ({len(steady)})",
                     result["sizes"][n]["output_mb"]])
    if len(sizes) > 1:
        result["time_loglog_slope"] = loglog_slope(sizes, [result["sizes"][n]["seconds"] for n in sizes])
        result["memory_loglog_slope"] = loglog_slope(
            sizes, [max(result["sizes"][n]["peak_anon_rss_growth_mb"], 1e-3) for n in sizes])
    print(C.table(rows, ["sentences", "seconds", "sent/s", "peak RSS growth (MiB)",
                         "growth after each chunk, min-max (chunks)", "output .npy (MiB)"]))
    if "time_loglog_slope" in result:
        print(f"log-log slope: time {result['time_loglog_slope']:.2f} (1 = linear), "
              f"memory {result['memory_loglog_slope']:.2f} (0 = bounded)")
    if args.plot:
        plot(result, Path(args.plot))
        result["plot"] = args.plot
    C.emit(result)
    return result


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(int(n) for n in result["sizes"])
    secs = [result["sizes"][n]["seconds"] for n in sizes]
    mem = [max(result["sizes"][n]["peak_anon_rss_growth_mb"], 1e-3) for n in sizes]
    out_mb = [result["sizes"][n]["output_mb"] for n in sizes]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    a.loglog(sizes, secs, "o-", label="measured")
    a.loglog(sizes, [secs[0] * n / sizes[0] for n in sizes], "--", color="gray", label="linear")
    a.set(xlabel="sentences", ylabel="encode time (s)", title="time")
    a.legend()
    b.loglog(sizes, mem, "o-", label="peak heap growth")
    b.loglog(sizes, [result["sizes"][n]["after_chunk_growth_mb"][1] for n in sizes], "s-",
             label="heap growth after a chunk (max)")
    b.loglog(sizes, out_mb, "--", color="gray", label="size of the output .npy")
    b.set(xlabel="sentences", ylabel="MiB", title="memory")
    b.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()

"""Pooling cost: encoding with layer_att_cls / layer_att_res in `full` and `static` mode vs avg_last, on the same
backbone (one model object shared by every side), same sentences, batch and threads; interleaved repeats.

Two measurements: (1) whole-encode time ratios (noisy on a shared machine), and (2) the pooler alone, timed on
hidden states computed once, as a share of the avg_last encode time (the direct, low-noise estimate of the extra
cost; full/static modes also ask the backbone for every layer's hidden states, which (1) includes).
Peak memory: anonymous-RSS growth during each side's encode (same process: indicative).

    python benchmarks/pooling_cost.py --sentences 200 --repeats 5
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

SIDES = (("avg_last", "full"), ("layer_att_cls", "full"), ("layer_att_res", "full"),
         ("layer_att_cls", "static"), ("layer_att_res", "static"))


def parse_args(argv):
    p = C.parser(__doc__, repeats=5)
    p.add_argument("--sentences", type=int, default=0, help="cap on STS-B test pairs (0: all)")
    p.add_argument("--batch-size", type=int, default=128)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    import torch

    from layerwise.modeling.backbone import quiet_transformers
    from layerwise.modeling.encoder import SentenceEncoder
    from layerwise.modeling.poolers import build_pooler

    args = parse_args(argv)
    threads = C.set_threads(args.threads)
    pairs = C.stsb(C.data_dir(args.data_dir), "test")
    if args.sentences:
        pairs = pairs.head(args.sentences)
    sentences = C.unique_sentences(pairs)
    with quiet_transformers():
        base = SentenceEncoder.from_pretrained(args.model, pooling="avg_last")
    hidden, layers = base.backbone.config.hidden_size, base.backbone.config.num_hidden_layers + 1
    encoders = {}
    for pooler_name, mode in SIDES:
        torch.manual_seed(0)
        pooler = build_pooler(pooler_name, hidden, layers) if pooler_name != "avg_last" else base.pooler
        encoders[f"{pooler_name}/{mode}"] = SentenceEncoder(base.backbone, base.tokenizer, pooler, mode,
                                                            base.max_length).eval()
    memory = {name: 0.0 for name in encoders}

    def side(name):
        def run():
            with C.PeakMemory() as peak:
                encoders[name].encode(sentences, batch_size=args.batch_size)
            memory[name] = max(memory[name], peak.peak_mb)
        return run

    print(f"STS-B test: {len(sentences)} sentences, batch {args.batch_size}, threads {threads}; interleaved "
          f"x{args.repeats}")
    times = C.interleave({n: side(n) for n in encoders}, args.repeats, log=print)
    # (2) the pooler alone, on hidden states computed once (a few batches of the same sentences)
    batches = [sentences[i:i + args.batch_size] for i in range(0, len(sentences), args.batch_size)][:4]
    pooled_seconds = {n: 0.0 for n in encoders}
    with torch.inference_mode():
        for texts in batches:
            tokens = base.tokenize(texts)
            states = base.backbone(**tokens, output_hidden_states=True).hidden_states
            for name, enc in encoders.items():
                mode = enc.mode
                best = float("inf")
                for _ in range(max(args.repeats, 3)):
                    start = time.perf_counter()
                    enc.pooler(states, tokens["attention_mask"], mode)
                    best = min(best, time.perf_counter() - start)
                pooled_seconds[name] += best
    share_sentences = sum(len(b) for b in batches)
    avg_time = C.median(times["avg_last/full"])
    result = {"sentences": len(sentences), "batch_size": args.batch_size, "threads": threads,
              "repeats": args.repeats, "sides": {}}
    rows = []
    for name in encoders:
        t = C.median(times[name])
        # pooler share: pooler seconds per sentence / avg_last encode seconds per sentence
        share = (pooled_seconds[name] / share_sentences) / (avg_time / len(sentences))
        ratios = [a / b for a, b in zip(times[name], times["avg_last/full"])]
        entry = {"seconds": times[name], "seconds_median": t, "ratio_vs_avg_last": t / avg_time,
                 "ratio_each_round": ratios, "pooler_share_of_avg_last_encode": share,
                 "peak_anon_rss_growth_mb": memory[name]}
        result["sides"][name] = entry
        rows.append([name, t, f"{100 * (t / avg_time - 1):+.1f}%",
                     " ".join(f"{100 * (r - 1):+.1f}" for r in ratios), f"{100 * share:.2f}%", memory[name]])
    print(C.table(rows, ["pooler/mode", "s per pass (median)", "vs avg_last (median)", "per round (%)",
                         "pooler alone, % of avg_last encode", "peak RSS growth (MiB)"]))
    C.emit(result)
    return result


if __name__ == "__main__":
    main()

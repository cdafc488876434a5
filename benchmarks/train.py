"""Training throughput: layerwise train-embed's loop (avg_last, supervised InfoNCE) vs sentence-transformers'
trainer + MultipleNegativesRankingLoss, on the same SNLI triplets, batch 64, same steps, lr, max length, threads.

One process; the two trainers alternate (A, B, A, B ...) from the same pretrained weights; the median throughput
of each side counts. Throughput is measured from the start of step `--skip` to the end of training (setup and the
first steps excluded on both sides). After the last repeat each side's model is scored on STS-B dev.

    python benchmarks/train.py --steps 12 --repeats 2
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402


def parse_args(argv):
    p = C.parser(__doc__, repeats=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--skip", type=int, default=2, help="steps excluded from the throughput (warm-up)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--length-chunks", type=int, default=4, help="layerwise's length_chunks (1: one padded forward)")
    p.add_argument("--dev-pairs", type=int, default=0, help="STS-B dev pairs scored after training (0: all; -1: skip)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def train_layerwise(args, triplets, work: Path) -> tuple[float, object]:
    """train-embed's own code path (EmbedConfig, TokenStore, make_batch_source, the supervised objective, Trainer)
    without its periodic evaluation and checkpointing. Returns (seconds from step `skip` to the end, encoder)."""
    from layerwise.config import TrainingConfig
    from layerwise.data.batching import TokenStore
    from layerwise.modeling.backbone import quiet_transformers
    from layerwise.modeling.encoder import SentenceEncoder
    from layerwise.training.embed import EmbedConfig, EmbedData, make_batch_source, objective_by_name, seed_everything
    from layerwise.training.loop import Trainer

    cfg = EmbedConfig(model=args.model, pooler="avg_last", objective="supervised", max_length=args.max_length,
                      length_chunks=args.length_chunks,
                      train=TrainingConfig(max_steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                                           eval_every=0, log_every=10 ** 9, progress=False, seed=args.seed,
                                           device="cpu", warmup_ratio=0.1))
    seed_everything(args.seed)
    with quiet_transformers():
        encoder = SentenceEncoder.from_pretrained(args.model, pooling="avg_last", max_length=args.max_length)
    data = EmbedData(triplets, [])
    stamps: list[float] = []
    store = TokenStore(encoder.tokenizer, data.texts(), cfg.max_length)
    make_batches, steps = make_batch_source(data, store, cfg)
    objective = objective_by_name("supervised")

    def compute_loss(batch):
        stamps.append(time.perf_counter())
        return objective(encoder, batch, cfg)

    trainer = Trainer(model=encoder, param_groups=[{"params": list(encoder.parameters()), "lr": cfg.train.lr}],
                      make_batches=make_batches, steps_per_epoch=steps, compute_loss=compute_loss,
                      evaluate=lambda: {"none": 0.0}, metric="none", save_model=lambda path: None,
                      run_dir=work / "lw", cfg=cfg.train, device=encoder.device)
    trainer.fit()
    end = time.perf_counter()
    return end - stamps[args.skip], encoder.eval()


def train_st(args, triplets, work: Path) -> tuple[float, object]:
    """sentence-transformers' trainer + MultipleNegativesRankingLoss (scale 20 = temperature 0.05), no eval/saving."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import (SentenceTransformerTrainer,
                                                            SentenceTransformerTrainingArguments)
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import TrainerCallback

    from layerwise.modeling.backbone import quiet_transformers

    stamps: list[float] = []

    class Stamp(TrainerCallback):
        def on_step_begin(self, *a, **k):
            stamps.append(time.perf_counter())

    dataset = Dataset.from_dict({"anchor": [t.anchor for t in triplets], "positive": [t.positive for t in triplets],
                                 "negative": [t.negative for t in triplets]})
    with quiet_transformers():
        model = SentenceTransformer(C.resolve_model(args.model), device="cpu")
        model.max_seq_length = args.max_length
        training_args = SentenceTransformerTrainingArguments(
            output_dir=str(work / "st"), per_device_train_batch_size=args.batch_size, max_steps=args.steps,
            learning_rate=args.lr, warmup_steps=0.1, max_grad_norm=1.0, weight_decay=0.0, seed=args.seed,
            logging_strategy="no", save_strategy="no", eval_strategy="no", report_to="none", use_cpu=True,
            disable_tqdm=True, dataloader_drop_last=True)
        trainer = SentenceTransformerTrainer(model=model, args=training_args, train_dataset=dataset,
                                             loss=MultipleNegativesRankingLoss(model, scale=20.0), callbacks=[Stamp()])
        trainer.train()
    end = time.perf_counter()
    return end - stamps[args.skip], model


def main(argv=None) -> dict:
    args = parse_args(argv)
    threads = C.set_threads(args.threads)
    from layerwise.data.readers import read_snli_triplets

    data = C.data_dir(args.data_dir)
    triplets = read_snli_triplets(data / "senteval" / "SNLI")
    timed_triplets = (args.steps - args.skip) * args.batch_size
    print(f"{len(triplets)} SNLI triplets, batch {args.batch_size}, "
          f"{args.steps} steps (timed: {args.steps - args.skip}), "
          f"max length {args.max_length}, threads {threads}, layerwise length_chunks {args.length_chunks}; "
          f"interleaved x{args.repeats}")
    times: dict[str, list[float]] = {"layerwise": [], "sentence-transformers": []}
    models = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.repeats):
            for name, fn in (("layerwise", train_layerwise), ("sentence-transformers", train_st)):
                seconds, models[name] = fn(args, triplets, Path(tmp) / f"{name}-{round_}")
                times[name].append(seconds)
                print(f"  round {round_ + 1}/{args.repeats} {name}: {timed_triplets / seconds:.1f} triplets/s")
    result = {"steps": args.steps, "skip": args.skip, "batch_size": args.batch_size, "threads": threads,
              "max_length": args.max_length, "length_chunks": args.length_chunks, "repeats": args.repeats, "sides": {}}
    dev = None
    if args.dev_pairs >= 0:
        dev = C.stsb(data, "dev")
        if args.dev_pairs:
            dev = dev.head(args.dev_pairs)
    rows = []
    for name, values in times.items():
        t = C.median(values)
        entry = {"seconds": values, "triplets_per_s": timed_triplets / t,
                 "triplets_per_s_each": [timed_triplets / v for v in values]}
        if dev is not None:
            sentences = C.unique_sentences(dev)
            entry["stsb_dev_spearman"] = C.spearman_from_embeddings(dev, sentences,
                                                                    models[name].encode(sentences, batch_size=128))
        result["sides"][name] = entry
    ratio = result["sides"]["sentence-transformers"]["triplets_per_s"] and (
        result["sides"]["layerwise"]["triplets_per_s"] / result["sides"]["sentence-transformers"]["triplets_per_s"])
    result["speedup"] = ratio
    result["speedup_each_round"] = [b / a for a, b in zip(times["layerwise"], times["sentence-transformers"])]
    for name, entry in result["sides"].items():
        rows.append([name, entry["triplets_per_s"], " / ".join(f"{v:.1f}" for v in entry["triplets_per_s_each"]),
                     entry.get("stsb_dev_spearman", float("nan"))])
    print(C.table(rows, ["trainer", "triplets/s (median)", "each round", "STS-B dev Spearman after training"]))
    print(f"layerwise / sentence-transformers: {ratio:.2f}x (per round: "
          f"{', '.join(f'{r:.2f}' for r in result['speedup_each_round'])})")
    C.emit(result)
    return result


if __name__ == "__main__":
    main()

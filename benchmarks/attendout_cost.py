"""AttendOut cost: a fine-tuning step (forward, loss, backward, AdamW step) with the attendout strategy vs the
standard attention-dropout strategy (and `none`: the model's own dropout, for reference), same model, same
batches, same threads, interleaved; then prediction time of the saved models (strategy detached, saved with
save_pretrained, reloaded), interleaved.

    python benchmarks/attendout_cost.py --steps 3 --repeats 3
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

STRATEGIES = ("standard", "attendout", "none")


def parse_args(argv):
    p = C.parser(__doc__, repeats=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--task", default="", help="draw inputs from this GLUE task's dev set (e.g. rte: long pairs) "
                                              "instead of STS-B test sentences")
    p.add_argument("--steps", type=int, default=3, help="training steps per timed round and side")
    p.add_argument("--predict-sentences", type=int, default=256)
    return p.parse_args(argv)


def benchmark_texts(args) -> list[tuple[str, ...]]:
    """The inputs the steps draw from: STS-B test sentences (short), or a GLUE task's dev examples (--task)."""
    data = C.data_dir(args.data_dir)
    if not args.task:
        return [(s,) for s in C.unique_sentences(C.stsb(data, "test"))]
    from layerwise.data.glue import get_task, read_split

    return read_split(get_task(args.task), data, "dev").texts


def tokenize(tokenizer, examples: list[tuple[str, ...]], max_length: int):
    """One padded batch of single texts or text pairs."""
    columns = [list(column) for column in zip(*examples)]
    return tokenizer(*columns, padding=True, truncation=True, max_length=max_length, return_tensors="pt")


def main(argv=None) -> dict:
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from layerwise.modeling.backbone import quiet_transformers
    from layerwise.regularization import DropoutOptions, build_strategy

    args = parse_args(argv)
    threads = C.set_threads(args.threads)
    model_dir = C.resolve_model(args.model)
    examples = benchmark_texts(args)
    rng = np.random.default_rng(0)
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batches = []
    for _ in range(args.steps):
        picked = [examples[i] for i in rng.choice(len(examples), args.batch_size, replace=True)]
        tokens = tokenize(tokenizer, picked, args.max_length)
        batches.append({**tokens, "labels": torch.as_tensor(rng.integers(0, 2, args.batch_size))})
    runs = {}
    for name in STRATEGIES:
        torch.manual_seed(0)
        with quiet_transformers():
            model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
        strategy = build_strategy(name, DropoutOptions(), model.config)
        strategy.attach(model)
        strategy.set_horizon(10 ** 6)
        params = [{"params": list(model.parameters()), "lr": 2e-5}] + strategy.parameter_groups()
        runs[name] = (model, strategy, torch.optim.AdamW(params))

    def train_side(name):
        model, strategy, optimizer = runs[name]

        def run():
            model.train()
            strategy.train()
            for batch in batches:
                loss = model(**batch).loss
                extra = strategy.extra_loss()
                (loss if extra is None else loss + extra).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        return run

    padded = [int(b["input_ids"].shape[1]) for b in batches]
    print(f"{args.task or 'STS-B test'} inputs, padded lengths {padded}")
    print(f"{args.steps} steps x batch {args.batch_size} (max length {args.max_length}) per round, threads "
          f"{threads}; interleaved x{args.repeats}")
    times = C.interleave({n: train_side(n) for n in STRATEGIES}, args.repeats, log=print)
    std = C.median(times["standard"])
    result = {"batch_size": args.batch_size, "steps": args.steps, "threads": threads, "repeats": args.repeats,
              "inputs": args.task or "stsb-test", "padded_length": padded,
              "train": {n: {"seconds": v, "seconds_per_step": C.median(v) / args.steps,
                            "ratio_vs_standard": C.median(v) / std,
                            "ratio_each_round": [a / b for a, b in zip(v, times["standard"])]}
                        for n, v in times.items()}}
    print(C.table([[n, e["seconds_per_step"], e["ratio_vs_standard"],
                    " ".join(f"{r:.2f}" for r in e["ratio_each_round"])] for n, e in result["train"].items()],
                  ["strategy", "s per step (median)", "x standard", "per round"]))
    # prediction with the saved models
    predict_texts = examples[: args.predict_sentences]
    loaded = {}
    with tempfile.TemporaryDirectory() as tmp, quiet_transformers():
        for name in ("standard", "attendout"):
            model, strategy, _ = runs[name]
            strategy.detach()
            model.save_pretrained(Path(tmp) / name)
            loaded[name] = AutoModelForSequenceClassification.from_pretrained(Path(tmp) / name).eval()
    same_structure = (list(loaded["standard"].state_dict()) == list(loaded["attendout"].state_dict())
                      and loaded["standard"].config.to_dict().keys() == loaded["attendout"].config.to_dict().keys())

    def predict(model):
        def run():
            with torch.inference_mode():
                for i in range(0, len(predict_texts), 64):
                    tokens = tokenize(tokenizer, predict_texts[i:i + 64], args.max_length)
                    model(**tokens)
        return run

    ptimes = C.interleave({n: predict(m) for n, m in loaded.items()}, args.repeats, log=print)
    pratio = C.median(ptimes["attendout"]) / C.median(ptimes["standard"])
    result["predict"] = {"sentences": len(predict_texts), "seconds": ptimes, "ratio_attendout_vs_standard": pratio,
                         "same_parameters_and_config_keys": bool(same_structure),
                         "attn_implementation": {n: m.config._attn_implementation for n, m in loaded.items()}}
    print(f"prediction, saved models ({len(predict_texts)} sentences): attendout / standard = {pratio:.3f} "
          f"(medians {C.median(ptimes['attendout']):.2f} s / {C.median(ptimes['standard']):.2f} s); "
          f"same parameters and config keys: {same_structure}")
    C.emit(result)
    return result


if __name__ == "__main__":
    main()

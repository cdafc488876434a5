"""Memory stays flat over a long run: RSS of `layerwise train-embed` (tiny random BERT, CPU) over 500 steps.

    python benchmarks/memory_flat.py [--steps 500] [--every 50]

Builds a tiny model and a small SNLI/STS-B data set in a temporary directory, runs train-embed in-process with
an evaluation and a checkpoint every 100 steps, samples the resident set size (psutil) at every `--every`-th
training step, and prints RSS at step 50 and at the last step and their ratio (flat: close to 1.0).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=4)
    args = parser.parse_args()

    from test_reliability_helpers import write_data
    from tiny import make_tiny_model_dir

    from layerwise.cli import main as cli
    from layerwise.registry import OBJECTIVES

    process = psutil.Process()
    samples: dict[int, float] = {}
    OBJECTIVES.names()
    original = OBJECTIVES._items["supervised"]
    impl = original() if isinstance(original, type) else original  # a class (instantiated per run) or a function
    calls = {"n": 0}

    def measured(encoder, batch, cfg):  # the supervised objective, sampling RSS once per training batch
        calls["n"] += 1
        if calls["n"] % args.every == 0 or calls["n"] == 1:
            samples[calls["n"]] = process.memory_info().rss / 2**20
        return impl(encoder, batch, cfg)

    OBJECTIVES._items["supervised"] = measured
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            model = make_tiny_model_dir(tmp / "model", "bert")
            data = write_data(tmp / "data")
            code = cli(["train-embed", "--model", str(model), "--data-dir", str(data), "--output-dir", str(tmp / "run"),
                        "--max-steps", str(args.steps), "--batch-size", str(args.batch_size), "--eval-every", "100",
                        "--log-every", "10", "--static-sentences", "8", "--set", "train.progress=false",
                        "--set", "train.device=cpu"])
            checkpoints = sorted(p.name for p in (tmp / "run" / "checkpoints").iterdir())
    finally:
        OBJECTIVES._items["supervised"] = original
    if code != 0:
        return code
    print("step  rss_mib")
    for step, rss in sorted(samples.items()):
        print(f"{step:>4}  {rss:8.1f}")
    first = samples.get(args.every) or samples[min(samples)]
    last = samples[max(samples)]
    print(f"RSS at step {args.every}: {first:.1f} MiB; at step {max(samples)}: {last:.1f} MiB; "
          f"ratio {last / first:.3f}")
    print(f"checkpoints left on disk: {', '.join(checkpoints)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

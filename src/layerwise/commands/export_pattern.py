"""`layerwise export-pattern RUN`: the per-layer drop rates of a run, for the scheduled_bernoulli baseline."""
from __future__ import annotations

from pathlib import Path

from layerwise.errors import DataError, LayerwiseError
from layerwise.plots import drop_matrix, read_metrics
from layerwise.atomic import write_json
from layerwise.regularization.pattern import RUN_PATTERN, read_json


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "export-pattern", help="write a run's per-layer drop rates for scheduled_bernoulli",
        description="Write the per-layer mean drop rates a run learned (AttendOut) or applied, as JSON "
                    "{\"rates\": [...]}; train the baseline with --dropout scheduled_bernoulli --pattern FILE.")
    parser.add_argument("run", metavar="RUN", help="a finetune run directory")
    parser.add_argument("--which", choices=("last", "overall"), default="last",
                        help="rates of the last logging window (default) or the mean over all of training")
    parser.add_argument("--output", metavar="FILE", default="", help="default: RUN/pattern.json")
    parser.set_defaults(func=run)


def pattern_rates(run_dir: Path, which: str) -> list[float]:
    """Per-layer rates from drop_pattern.json, else from the drop/layerN entries of metrics.jsonl."""
    if (run_dir / RUN_PATTERN).is_file():
        rates = read_json(run_dir / RUN_PATTERN).get(which)
        source = run_dir / RUN_PATTERN
    else:
        steps, matrix = drop_matrix(read_metrics(run_dir))
        source = run_dir / "metrics.jsonl"
        if not steps.size:
            raise DataError(source, "no drop/layerN entries: this run logged no drop rates")
        rates = (matrix[:, -1] if which == "last" else matrix.mean(axis=1)).tolist()
        rates = [None if r != r else r for r in rates]
    if not isinstance(rates, list) or not rates or any(r is None for r in rates):
        raise DataError(source, f"no '{which}' rate for every layer (was the run trained for at least one log step?)")
    return [round(float(r), 6) for r in rates]


def run(args) -> int:
    run_dir = Path(args.run)
    if not run_dir.is_dir():
        raise LayerwiseError(f"{run_dir}: no such run directory")
    rates = pattern_rates(run_dir, args.which)
    output = Path(args.output) if args.output else run_dir / "pattern.json"
    write_json(output, {"rates": rates, "which": args.which, "source": str(run_dir)})
    print(f"{output}: " + " ".join(f"{r:.3f}" for r in rates))
    print(f"use: layerwise finetune --dropout scheduled_bernoulli --pattern {output}")
    return 0

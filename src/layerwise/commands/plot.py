"""`layerwise plot RUN [RUN ...]`: drop-rate heatmaps and convergence curves from run directories."""
from __future__ import annotations

from pathlib import Path

from layerwise.errors import LayerwiseError
from layerwise.plots import convergence, drop_heatmap, drop_matrix, read_metrics


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "plot", help="draw drop-rate heatmaps and convergence curves of runs",
        description="For each run that logged drop rates, draw them as a layer-by-step heatmap "
                    "(<name>-drop_pattern.png); draw the dev metric and train loss of all runs against steps on "
                    "one figure (convergence.png).")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories (finetune or train-embed)")
    parser.add_argument("--output-dir", metavar="DIR", default="",
                        help="where to write the PNG files (default: the run directory for one run, else ./plots)")
    parser.add_argument("--kind", choices=("all", "heatmap", "curves"), default="all")
    parser.set_defaults(func=run)


def run(args) -> int:
    runs = [Path(r) for r in args.runs]
    for run_dir in runs:
        if not run_dir.is_dir():
            raise LayerwiseError(f"{run_dir}: no such run directory")
    out = Path(args.output_dir) if args.output_dir else runs[0] if len(runs) == 1 else Path("plots")
    written = []
    if args.kind in ("all", "heatmap"):
        with_rates = [r for r in runs if drop_matrix(read_metrics(r))[0].size]
        if args.kind == "heatmap" and not with_rates:
            raise LayerwiseError("no run logged drop rates (runs with --dropout none have none)")
        written += [drop_heatmap(r, out / f"{r.resolve().name}-drop_pattern.png") for r in with_rates]
    if args.kind in ("all", "curves"):
        written.append(convergence(run_labels(runs), out / "convergence.png"))
    for path in written:
        print(path)
    return 0


def run_labels(runs: list[Path]) -> dict[str, list[Path]]:
    """Each run on its own line of the figure, labelled by its directory name (its path where two names clash)."""
    names = [r.resolve().name for r in runs]
    return {(name if names.count(name) == 1 else str(r)): [r] for name, r in zip(names, runs)}

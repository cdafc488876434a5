"""`layerwise evaluate {sts,retrieval,space}`: score one or more models (or inference modes) and compare them."""
from __future__ import annotations

import argparse
import gc
import os
from pathlib import Path
from typing import Any, Callable

from layerwise.errors import ConfigError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
MODES = ("full", "static", "cls_last", "avg_last")


def load_encoder(name: str, pooling: str | None, mode: str | None):
    """layerwise.load (a seam for tests)."""
    import layerwise

    return layerwise.load(name, pooling=pooling, mode=mode)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("evaluate", help="evaluate sentence encoders (STS, retrieval, embedding space)",
                                   description=__doc__.splitlines()[0])
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    sts = kinds.add_parser("sts", help="STS12-16, STS-B, SICK-R: Spearman/Pearson of cosine x 100")
    _common(sts)
    sts.add_argument("--tasks", default="stsb", help="comma-separated: sts12,sts13,sts14,sts15,sts16,stsb,sickr")
    sts.add_argument("--split", default="test", choices=("train", "dev", "test"), help="STS-B split (default test)")
    sts.set_defaults(func=run_sts)
    ret = kinds.add_parser("retrieval", help="MRR@10, Recall@1/5/10, nDCG@10, MAP@100 by exact cosine search")
    _common(ret)
    ret.add_argument("--dataset", action="append", required=True, type=Path,
                     help="BEIR folder, quora_duplicate_questions.tsv, or a pair file (MRPC, STS-B); repeatable")
    ret.add_argument("--format", choices=("auto", "beir", "quora", "pairs"), default="auto")
    ret.add_argument("--split", default="test", help="BEIR qrels split (default test)")
    ret.set_defaults(func=run_retrieval)
    space = kinds.add_parser("space", help="alignment, uniformity, anisotropy, throughput and peak memory")
    _common(space)
    space.add_argument("--split", default="test", choices=("train", "dev", "test"), help="STS-B split")
    space.add_argument("--sentences", type=int, default=1000, help="random sentences for uniformity/anisotropy")
    space.add_argument("--seed", type=int, default=0)
    space.set_defaults(func=run_space)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", action="append", help=f"model path or name; repeatable (default {DEFAULT_MODEL})")
    parser.add_argument("--pooling", help="pooler name (default: the model's own, else avg_last)")
    parser.add_argument("--mode", action="append",
                        help=f"inference mode(s), repeatable or comma-separated: {', '.join(MODES)}")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("LAYERWISE_DATA", "../shared/data")),
                        help="data folder (default $LAYERWISE_DATA, else ../shared/data)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--output", type=Path, help="write all results as JSON")
    parser.add_argument("--markdown", type=Path, help="write the comparison table as Markdown")
    parser.add_argument("--plot", type=Path, help="draw the comparison as a bar chart (PNG)")


def parse_modes(values: list[str] | None) -> list[str | None]:
    """Modes from repeated and/or comma-separated --mode values; [None] when none given."""
    modes = [m.strip() for v in values or [] for m in v.split(",") if m.strip()]
    for mode in modes:
        if mode not in MODES:
            from layerwise.errors import unknown_name

            raise unknown_name("inference mode", mode, MODES)
    return list(dict.fromkeys(modes)) or [None]


def runs(args) -> list[dict[str, Any]]:
    """One entry per (model, mode): the rows of the comparison."""
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1, got {args.batch_size}")
    models = args.model or [DEFAULT_MODEL]
    modes = parse_modes(args.mode)
    return [{"label": model if mode is None else f"{model} [{mode}]", "model": model, "pooling": args.pooling,
             "mode": mode} for model in models for mode in modes]


def evaluate_all(args, kind: str, evaluate: Callable[[Any], dict], describe: Callable[[dict], str]) -> int:
    """Load each model/mode in turn, evaluate it, print its details, then the comparison; write the files."""
    from layerwise.atomic import write_json, write_text
    from layerwise.evaluation.report import bar_plot, headline, markdown_table, table_json

    results, rows = [], []
    for run in runs(args):
        encoder = load_encoder(run["model"], run["pooling"], run["mode"])
        scores = evaluate(encoder)
        del encoder
        gc.collect()
        print(f"== {run['label']}" + (f" (pooling {run['pooling']})" if run["pooling"] else ""))
        print(describe(scores))
        results.append({**run, "scores": scores})
        rows.append((run["label"], headline(kind, scores)))
    table = markdown_table(rows)
    if len(rows) > 1:
        print(table)
    if args.output:
        write_json(args.output, {"kind": kind, "results": results, "table": table_json(rows)})
    if args.markdown:
        write_text(args.markdown, table)
    if args.plot:
        bar_plot(rows, args.plot, title=f"layerwise evaluate {kind}")
    return 0


# --- sts -------------------------------------------------------------------------------------------------------------


def run_sts(args) -> int:
    from layerwise.evaluation.sts import evaluate_tasks, load_task, parse_tasks

    tasks = parse_tasks(args.tasks)
    for task in tasks:  # check the files before loading any model
        load_task(task, args.data_dir, args.split)
    return evaluate_all(args, "sts", lambda enc: evaluate_tasks(enc, args.data_dir, tasks, args.split,
                                                                args.batch_size), describe_sts)


def describe_sts(scores: dict) -> str:
    """Terminal table: per task its `all` / `wmean` / per-subset figures (x 100, two decimals), then the average."""
    lines = [f"{'task':<8} {'setting':<22} {'spearman':>9} {'pearson':>9} {'n':>6}"]

    def row(task: str, setting: str, r: dict) -> str:
        return f"{task:<8} {setting:<22} {r['spearman']:9.2f} {r['pearson']:9.2f} {r['n']:6d}"

    for task, r in scores["tasks"].items():
        if "subsets" not in r:
            lines.append(row(task, "-", r))
            continue
        lines.append(row(task, "all", r["all"]))
        lines.append(row(task, "wmean", r["wmean"]))
        lines += [row("", name, sub) for name, sub in r["subsets"].items()]
    if len(scores["tasks"]) > 1:
        lines.append(f"{'avg':<8} {'all':<22} {scores['avg']:9.2f}")
        lines.append(f"{'avg':<8} {'wmean':<22} {scores['avg_wmean']:9.2f}")
    return "\n".join(lines)


# --- retrieval -------------------------------------------------------------------------------------------------------


def run_retrieval(args) -> int:
    from layerwise.evaluation.retrieval import evaluate_retrieval, load_retrieval

    fmt = None if args.format == "auto" else args.format
    datasets = {}
    for path in args.dataset:
        name = path.stem if path.is_file() else path.name
        if path.is_file() and (name in ("train", "dev", "test") or name.startswith("sts-")):
            name = f"{path.parent.name}/{name}"  # MRPC/dev, stsbenchmark/sts-test
        datasets[name if name not in datasets else str(path)] = load_retrieval(path, fmt, args.split)

    def evaluate(encoder) -> dict:
        return {name: evaluate_retrieval(encoder, data, args.batch_size) for name, data in datasets.items()}

    return evaluate_all(args, "retrieval", evaluate, describe_retrieval)


def describe_retrieval(scores: dict) -> str:
    metrics = ("mrr@10", "recall@1", "recall@5", "recall@10", "ndcg@10", "map@100")
    lines = [f"{'dataset':<28}" + "".join(f"{m:>10}" for m in metrics) + f"{'queries':>9}{'docs':>9}"]
    for name, r in scores.items():
        cells = "".join(f"{r[m]:10.2f}" for m in metrics)
        lines.append(f"{name:<28}{cells}{r['queries']:9d}{r['documents']:9d}")
    return "\n".join(lines)


# --- space -----------------------------------------------------------------------------------------------------------


def run_space(args) -> int:
    from layerwise.data.sts import find_stsb
    from layerwise.evaluation.space import evaluate_space

    if args.sentences < 2:
        raise ConfigError(f"--sentences must be at least 2, got {args.sentences}")
    find_stsb(args.data_dir, args.split)
    return evaluate_all(args, "space", lambda enc: evaluate_space(enc, args.data_dir, args.split, args.sentences,
                                                                  args.seed, args.batch_size), describe_space)


def describe_space(scores: dict) -> str:
    return (f"alignment {scores['alignment']:.4f} ({scores['pairs']} positive pairs)   "
            f"uniformity {scores['uniformity']:.4f}   anisotropy {scores['anisotropy']:.4f} "
            f"({scores['sentences']} sentences)\n"
            f"throughput {scores['throughput']:.1f} sentences/s ({scores['encoded']} encoded)   "
            f"peak RSS {scores['peak_rss_mib']:.0f} MiB")

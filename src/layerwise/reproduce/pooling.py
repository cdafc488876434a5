"""`layerwise reproduce pooling`: the LayerAttPooler ablation (Oh et al., COLING 2022) as a resumable grid.

Grid: every pooler trained with the supervised objective on the NLI triplets; avg_last and layer_att_cls also with
the unsupervised objective (wiki1m) and the hybrid. A pooler with parameters gets its learning rate tuned on STS-B
dev: seed 0 is trained with every value of `pooler_lrs`, the value whose best checkpoint scores highest on STS-B
dev is picked (never test), and the other seeds use it. The tuning is per (objective, pooler). Poolers without
parameters ignore the pooler learning rate and are not tuned.

After training, each run's best model is scored in every inference mode train-embed evaluated (eval.json), and
extras.json adds alignment/uniformity/anisotropy on STS-B test and, with --sts-dir, STS12-16 and SICK-R.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from layerwise.config import build_config, non_negative, positive
from layerwise.errors import ConfigError
from layerwise.evaluation.report import IntervalRow
from layerwise.reproduce.grid import Grid
from layerwise.reproduce.plan import RunSpec, dedupe, read_results, shard, slug
from layerwise.reproduce.tables import fmt_cell, fmt_p, fmt_signed, markdown, mean_std, paired_test
from layerwise.config import default_data_dir
from layerwise.training.embed import EmbedConfig

PAPER_POOLERS = ("cls_last", "avg_last", "cls_avg_last", "avg_first_last", "weighted_layers", "cls_all_att",
                 "avg_all_att", "layer_att", "layer_att_cls", "layer_att_res")
RUN_PRIORITY = ("avg_last", "layer_att_cls", "layer_att_res", "cls_last", "cls_avg_last", "avg_first_last",
                "weighted_layers", "layer_att", "cls_all_att", "avg_all_att")
OBJECTIVES = ("supervised", "unsupervised", "hybrid")
SHORT = {"supervised": "sup", "unsupervised": "unsup", "hybrid": "hybrid"}
SENTENCES_PER_EXAMPLE = {"supervised": 3, "unsupervised": 2, "hybrid": 5}
OTHER_OBJECTIVE_POOLERS = ("avg_last", "layer_att_cls")  # the poolers also trained unsupervised and hybrid
# SimCSE's unsupervised recipe differs from the supervised one in these; a config file's per_objective.<name> wins.
OBJECTIVE_DEFAULTS: dict[str, dict[str, Any]] = {"unsupervised": {"train.lr": 3e-5, "max_length": 32}}
MODE_ORDER = ("full", "static", "cls_last", "avg_last")
STS_EXTRA = ("sts12", "sts13", "sts14", "sts15", "sts16", "sickr")
EXTRAS = "extras.json"
PAIRED_REFERENCE = "avg_last"  # each row's STS-B test is compared with this pooler's, seed by seed


@dataclass
class PoolingOptions:
    """Options of `layerwise reproduce pooling` (also the top-level keys of its --config file)."""

    model: str = "all-MiniLM-L6-v2"
    data_dir: str = field(default_factory=default_data_dir)
    output_dir: str = "reproduce"
    seeds: int = 3
    poolers: list[str] = field(default_factory=lambda: list(PAPER_POOLERS))
    objectives: list[str] = field(default_factory=lambda: list(OBJECTIVES))
    pooler_lrs: list[float] = field(default_factory=lambda: [1e-4, 1e-3, 1e-2])
    max_steps: int = 0  # 0: the configs' epochs
    subset: int = 0  # cap on training examples (0: all)
    eval_subset: int = 0  # cap on STS-B pairs scored (0: all)
    device: str = "auto"
    sts_dir: str = ""  # folder holding STS12-16 (STS12-en-test, ...) and/or SICK/: scored when given
    space_sentences: int = 1000  # STS-B test sentences sampled for uniformity / anisotropy
    shard: str = ""  # K/N: this process runs every N-th group of runs

    def validate(self) -> None:
        from layerwise.registry import POOLERS

        positive(self, "seeds", "space_sentences")
        non_negative(self, "max_steps", "subset", "eval_subset")
        for name in self.poolers:
            POOLERS.get(name)
        for name in self.objectives:
            if name not in OBJECTIVES:
                from layerwise.errors import unknown_name

                raise unknown_name("objective", name, OBJECTIVES)
        if not self.poolers or not self.objectives or not self.pooler_lrs:
            raise ConfigError("--poolers, --objectives and --pooler-lrs must each name at least one value")
        if any(lr <= 0 for lr in self.pooler_lrs):
            raise ConfigError(f"--pooler-lrs: every learning rate must be > 0, got {self.pooler_lrs}")
        if self.sts_dir and not available_sts_tasks(self.sts_dir):
            raise ConfigError(f"--sts-dir {self.sts_dir}: no STS12-16 folder (STS12-en-test, ...) or SICK file found")


def add_paired_reference(rows: list[dict]) -> None:
    """rows[i]["vs_reference"]: the paired test (same seeds) of each row's STS-B test against the same objective's
    avg_last, "reference" on that row itself; rows of an objective without an avg_last row are left alone."""
    refs = {r["objective"]: r for r in rows if r["pooler"] == PAIRED_REFERENCE and r["mode"] == "full"}
    for row in rows:
        ref = refs.get(row["objective"])
        if ref is not None:
            row["vs_reference"] = "reference" if row is ref else \
                paired_test(row["stsb_test_by_seed"], ref["stsb_test_by_seed"])


def fmt_paired(result: dict | str | None) -> str:
    """"+0.35 (p 0.041, 3 seeds)", "ref." or "-"."""
    if result is None:
        return "-"
    if result == "reference":
        return "ref."
    if not result["n"]:
        return "-"
    seeds = f"{result['n']} seed{'s' * (result['n'] > 1)}"
    return f"{fmt_signed(result['mean_diff'])} (p {fmt_p(result['p_ttest'])}, {seeds})"


@lru_cache(maxsize=None)
def pooler_traits(name: str) -> tuple[bool, bool]:
    """(has trainable parameters, uses attention) of a registered pooler."""
    from layerwise.modeling.poolers import build_pooler

    pooler = build_pooler(name, 8, 3)
    return any(p.requires_grad for p in pooler.parameters()), bool(pooler.uses_attention)


def available_sts_tasks(sts_dir: str) -> list[str]:
    from layerwise.data.sts import find_sick, find_sts_year
    from layerwise.errors import DataError

    found = []
    for task in STS_EXTRA:
        try:
            find_sick(Path(sts_dir)) if task == "sickr" else find_sts_year(Path(sts_dir), task)
            found.append(task)
        except DataError:
            pass
    return found


class PoolingGrid(Grid):
    """The pooling grid: plan, train, post (extras.json), report (pooling.md, pooling.json, pooling.png)."""

    def __init__(self, opts: PoolingOptions, sections: dict[str, dict[str, Any]] | None = None,
                 overrides: list[str] | None = None, log: Callable[[str], None] = print) -> None:
        super().__init__(opts, sections, overrides, log)
        self.plan()  # every config is built (and validated) once up front: bad keys fail before any training

    # ------------------------------------------------------------------------------------------ plan
    def config(self, pooler: str, objective: str, seed: int, lr: float | None) -> EmbedConfig:
        o = self.opts
        file_values = {**OBJECTIVE_DEFAULTS.get(objective, {}), **self.sections.get("embed", {}),
                       **self.sections.get(f"per_objective.{objective}", {})}
        cli = {"model": o.model, "pooler": pooler, "objective": objective, "data_dir": o.data_dir,
               "train.seed": seed, "train.progress": False, "train.device": o.device}
        if lr is not None:
            cli["pooler_lr"] = lr
        for key, value in (("subset", o.subset), ("eval_subset", o.eval_subset), ("train.max_steps", o.max_steps)):
            if value:
                cli[key] = value
        return build_config(EmbedConfig, file_values, cli, self.overrides, source="reproduce config")

    def grid(self) -> list[tuple[str, str]]:
        """(objective, pooler) pairs in table order."""
        pairs = []
        for objective in (o for o in OBJECTIVES if o in self.opts.objectives):
            poolers = self.opts.poolers if objective == "supervised" else \
                [p for p in self.opts.poolers if p in OTHER_OBJECTIVE_POOLERS]
            pairs += [(objective, p) for p in PAPER_POOLERS if p in poolers]
            pairs += [(objective, p) for p in poolers if p not in PAPER_POOLERS]
        return pairs

    def tuned(self, pooler: str) -> bool:
        return pooler_traits(pooler)[0] and len(self.opts.pooler_lrs) > 1

    def _spec(self, objective: str, pooler: str, seed: int, lr: float | None, role: str, lr_index: int = 0,
              pending: str = "") -> RunSpec:
        has_params = pooler_traits(pooler)[0]
        name = f"{SHORT[objective]}-{pooler}" + (f"-plr{slug(lr)}" if has_params and lr is not None else "")
        priority = RUN_PRIORITY.index(pooler) if pooler in RUN_PRIORITY else len(RUN_PRIORITY)
        config = self.config(pooler, objective, seed, (lr or self.opts.pooler_lrs[0]) if has_params else None)
        return RunSpec(kind="embed", name=name, seed=seed, config=None if pending else config,
                       cost_config=config if pending else None,
                       group=f"{objective}-{pooler}", order=(seed, OBJECTIVES.index(objective), priority, lr_index),
                       pending=pending, roles={role}, meta={"objective": objective, "pooler": pooler, "pooler_lr": lr})

    def plan(self) -> list[RunSpec]:
        specs: list[RunSpec] = []
        for objective, pooler in self.grid():
            lr: float | None = self.opts.pooler_lrs[0] if pooler_traits(pooler)[0] else None
            pending = ""
            if self.tuned(pooler):
                tune = [self._spec(objective, pooler, 0, v, "tune", i) for i, v in enumerate(self.opts.pooler_lrs)]
                specs += tune
                lr = self.pick(tune)[0]
                if lr is None:
                    pending = "pooler lr: tuning runs on seed 0 not all finished"
            for seed in range(1 if pending else 0, self.opts.seeds):  # pending seed 0: one of the tuning runs
                specs.append(self._spec(objective, pooler, seed, lr, "main", pending=pending))
        return shard(dedupe(specs), self.shard)

    def pick(self, tune: list[RunSpec]) -> tuple[float | None, dict[str, float]]:
        """The pooler lr whose seed-0 best checkpoint scores highest on STS-B dev (None until all are finished)."""
        scores: dict[str, float] = {}
        for spec in tune:
            results = self.results(spec)
            if results is None:
                return None, scores
            scores[f"{spec.meta['pooler_lr']:g}"] = results["trained"]["full"]["stsb_dev"]["spearman"]
        best = max(tune, key=lambda s: scores[f"{s.meta['pooler_lr']:g}"])  # ties: the first listed
        return best.meta["pooler_lr"], scores

    def results(self, spec: RunSpec) -> dict | None:
        return read_results(spec, self.out)

    # ------------------------------------------------------------------------------------ run, post
    def train(self, spec: RunSpec, run_dir: Path, resume: bool) -> None:
        from layerwise.training.embed import train_embed

        train_embed(spec.config, run_dir, resume=resume, log=self.log)

    def needs_post(self, spec: RunSpec, run_dir: Path) -> bool:
        return not (run_dir / EXTRAS).is_file()

    def post(self, spec: RunSpec, run_dir: Path) -> None:
        """extras.json: alignment / uniformity / anisotropy (and STS12-16 / SICK-R) of every evaluated mode."""
        from layerwise.data.sts import find_stsb, read_stsb
        from layerwise.errors import DataError
        from layerwise.evaluation.space import sample_sentences, space_metrics
        from layerwise.evaluation.sts import evaluate_tasks
        from layerwise.modeling.backbone import quiet_transformers
        from layerwise.modeling.encoder import SentenceEncoder, pick_device
        from layerwise.atomic import write_json

        cfg = spec.config
        modes = list(json.loads((run_dir / "eval.json").read_text(encoding="utf-8"))["trained"])
        with quiet_transformers():
            encoder = SentenceEncoder.from_pretrained(str(run_dir / "best"), device=str(pick_device(cfg.train.device)))
        pairs = read_stsb(find_stsb(Path(cfg.data_dir), "test"))
        if cfg.eval_subset:
            pairs = pairs.head(cfg.eval_subset)
        sentences = sample_sentences(pairs, self.opts.space_sentences, seed=0)
        tasks = available_sts_tasks(self.opts.sts_dir) if self.opts.sts_dir else []
        extras: dict[str, Any] = {}
        for mode in modes:
            encoder.mode = mode
            entry: dict[str, Any] = {}
            try:
                space = space_metrics(encoder, pairs, sentences, cfg.eval_batch_size)
                entry["space"] = {k: space[k] for k in ("alignment", "uniformity", "anisotropy")}
            except DataError as exc:  # e.g. an --eval-subset with no positive pair
                entry["space_error"] = str(exc)
            if tasks:
                scores = evaluate_tasks(encoder, Path(self.opts.sts_dir), tasks, "test", cfg.eval_batch_size)
                entry["sts"] = {t: scores["tasks"][t]["spearman"] for t in tasks}
                entry["sts_wmean"] = {t: scores["tasks"][t].get("wmean", scores["tasks"][t])["spearman"]
                                      for t in tasks}
            extras[mode] = entry
        write_json(run_dir / EXTRAS, extras)

    # ---------------------------------------------------------------------------------- estimate
    def sentences(self, cfg: Any) -> int:
        return SENTENCES_PER_EXAMPLE[cfg.objective]

    def data_key(self, cfg: Any) -> tuple:
        return (cfg.objective, cfg.data_dir, cfg.train_file, tuple(cfg.train_columns), cfg.unsup_file, cfg.subset,
                cfg.max_length)

    def train_texts(self, cfg: Any) -> tuple[int, list[str]]:
        from layerwise.training.embed import load_embed_data

        data = load_embed_data(cfg)
        return len(data.triplets) or len(data.sentences), data.texts()

    # -------------------------------------------------------------------------------------- report
    def report(self) -> list[Path]:
        """pooling.md, pooling.json and pooling.png from the finished runs (partial: n < seeds)."""
        from layerwise.atomic import write_json, write_text
        from layerwise.evaluation.report import interval_plot

        specs = self.unsharded()
        rows, picks = self.table_rows(specs)
        self.out.mkdir(parents=True, exist_ok=True)
        md, json_path, png = self.out / "pooling.md", self.out / "pooling.json", self.out / "pooling.png"
        write_text(md, self.markdown(rows, picks))
        write_json(json_path, {"settings": self.settings(), "pooler_lr": picks, "rows": rows})
        written = [md, json_path]
        points = plot_points(rows)
        if points:
            interval_plot(points, png, title="STS-B Spearman x100, mean ± std over seeds", columns=list(STS_COLUMNS))
            written.append(png)
        return written

    def table_rows(self, specs: list[RunSpec]) -> tuple[list[dict], dict]:
        by_pair: dict[tuple[str, str], list[RunSpec]] = {}
        picks: dict[str, Any] = {}
        untrained: dict[str, float] = {}
        for objective, pooler in self.grid():
            mine = [s for s in specs if s.meta["objective"] == objective and s.meta["pooler"] == pooler]
            by_pair[(objective, pooler)] = [s for s in mine if "main" in s.roles and not s.pending]
            if self.tuned(pooler):
                tune = sorted((s for s in mine if "tune" in s.roles), key=lambda s: s.order)
                lr, scores = self.pick(tune)
                picks[f"{objective}/{pooler}"] = {"picked": lr, "stsb_dev_seed0": scores,
                                                  "status": "picked" if lr is not None else "tuning not finished"}
        rows: list[dict] = []
        for (objective, pooler), mains in by_pair.items():
            finished = [(s, self.results(s)) for s in mains]
            finished = [(s, r) for s, r in finished if r is not None]
            if not pooler_traits(pooler)[0] and finished and pooler not in untrained:
                untrained[pooler] = finished[0][1]["untrained"]["stsb_test"]["spearman"]
            modes = MODE_ORDER if pooler_traits(pooler)[1] else ("full",)
            for mode in modes:
                values: dict[str, list[float]] = {}
                test_by_seed: dict[int, float] = {}
                for spec, results in finished:
                    scores = results["trained"].get(mode)
                    if scores is None:
                        continue
                    test_by_seed[spec.seed] = scores["stsb_test"]["spearman"]
                    values.setdefault("STS-B dev", []).append(scores["stsb_dev"]["spearman"])
                    values.setdefault("STS-B test", []).append(scores["stsb_test"]["spearman"])
                    extras_path = spec.run_dir(self.out) / EXTRAS
                    extras = json.loads(extras_path.read_text(encoding="utf-8")).get(mode, {}) \
                        if extras_path.is_file() else {}
                    for task, value in extras.get("sts", {}).items():
                        values.setdefault(task.upper().replace("SICKR", "SICK-R"), []).append(value)
                    if extras.get("sts"):
                        values.setdefault("avg", []).append(
                            (sum(extras["sts"].values()) + scores["stsb_test"]["spearman"]) / (len(extras["sts"]) + 1))
                    for key, value in extras.get("space", {}).items():
                        values.setdefault(key, []).append(value)
                lr = mains[0].meta["pooler_lr"] if mains and pooler_traits(pooler)[0] else None
                rows.append({"objective": objective, "pooler": pooler, "mode": mode, "pooler_lr": lr,
                             "n": len(next(iter(values.values()), [])), "planned": self.opts.seeds,
                             "metrics": {k: mean_std(v) for k, v in values.items()},
                             "stsb_test_by_seed": test_by_seed})
        add_paired_reference(rows)
        head = [{"objective": "untrained", "pooler": p, "mode": "full", "pooler_lr": None, "n": 1, "planned": 1,
                 "metrics": {"STS-B test": mean_std([v])}} for p, v in untrained.items()]
        return head + rows, picks

    def markdown(self, rows: list[dict], picks: dict) -> str:
        score_cols = ["STS-B dev", "STS-B test"] + [c for c in (t.upper().replace("SICKR", "SICK-R") for t in STS_EXTRA)
                                                    if any(c in r["metrics"] for r in rows)]
        if any("avg" in r["metrics"] for r in rows):
            score_cols.append("avg")
        space_cols = [c for c in ("alignment", "uniformity") if any(c in r["metrics"] for r in rows)]
        paired = any("vs_reference" in r for r in rows)
        header = ["objective", "pooler", "inference", "pooler lr"] + score_cols + space_cols + ["n"] + \
            ([f"STS-B test vs {PAIRED_REFERENCE} (paired t-test p)"] if paired else [])
        table = []
        for r in rows:
            n = "-" if r["objective"] == "untrained" else \
                f"{r['n']}" + (f"/{r['planned']}" if r["n"] < r["planned"] else "")
            table.append([r["objective"], r["pooler"], r["mode"], f"{r['pooler_lr']:g}" if r["pooler_lr"] else "-"]
                         + [fmt_cell(r["metrics"].get(c)) for c in score_cols]
                         + [fmt_cell(r["metrics"].get(c), 3) for c in space_cols] + [n]
                         + ([fmt_paired(r.get("vs_reference"))] if paired else []))
        o = self.opts
        lines = [f"## LayerAttPooler ablation: {o.model}", "",
                 f"Spearman x 100 (cosine), mean ± std over seeds (sample std); `n` = finished seeds"
                 f"{' (k/' + str(o.seeds) + ': partial)' if o.seeds > 1 else ''}. Inference `full` is the trained "
                 "pooler; `static` freezes its attention into a fixed layer mix; `cls_last` / `avg_last` drop the "
                 "pooler at inference. Alignment and uniformity (Wang & Isola 2020; lower is better) on STS-B test."
                 + (f" Training capped at {o.max_steps} steps." if o.max_steps else "")
                 + (f" Training subset {o.subset}." if o.subset else "")
                 + (f" STS-B scored on its first {o.eval_subset} pairs only." if o.eval_subset else ""), "",
                 markdown(header, table, align_right_from=4), *self.settings_lines()]
        if picks:
            lines += ["Pooler learning rate, tuned on STS-B dev (best checkpoint, seed 0; test never used):", ""]
            for name, pick in picks.items():
                tried = ", ".join(f"{lr}: {score:.2f}" for lr, score in
                                  sorted(pick["stsb_dev_seed0"].items(), key=lambda item: float(item[0])))
                chosen = f"{pick['picked']:g}" if pick["picked"] is not None else pick["status"]
                lines.append(f"- {name}: {chosen} (dev by lr: {tried or 'none finished'})")
            lines.append("")
        return "\n".join(lines)


STS_COLUMNS = ("STS-B dev", "STS-B test")


def plot_points(rows: list[dict]) -> list[IntervalRow]:
    """The figure's rows: (label, objective, {"STS-B dev"/"STS-B test": (mean, std)}) for each pooler's `full` and
    `static` rows (the other inference modes are in the table only), rows without a score left out."""
    points = []
    for r in rows:
        if r["mode"] not in ("full", "static"):
            continue
        cells = {c: (r["metrics"][c]["mean"], r["metrics"][c].get("std")) for c in STS_COLUMNS
                 if r["metrics"].get(c, {}).get("mean") is not None}
        if cells:
            label = f"{r['objective']} {r['pooler']}" + ("" if r["mode"] == "full" else f" ({r['mode']})")
            points.append((label, r["objective"], cells))
    return points

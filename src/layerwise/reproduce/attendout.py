"""`layerwise reproduce attendout`: every attention-dropout strategy on GLUE tasks over seeds, as a resumable grid.

scheduled_bernoulli follows the pattern AttendOut learned: for each (task, seed) the attendout run goes first, its
per-layer drop rates are exported to <attendout run>/pattern.json, and the scheduled_bernoulli run of the same task
and seed reads that file (the plan states the dependency; the key hashes the attendout run's key, not the path).

Report: attendout.md / attendout.json with dev metrics of the best checkpoint as mean ± std over seeds and a paired
test across seeds against `standard`; convergence-<task>.png (dev metric and train loss against steps, one line per
strategy, mean ± std over its finished seeds) and drop-heatmap-<task>[-<variant>].png (the learned per-layer drop
rates of AttendOut and of each AttendOut variant, mean over finished seeds). Variants (`variants.<name>:` in the
config file) are named strategies: a registered one with some run-config keys changed, each a row of the table.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from layerwise.config import build_config, non_negative, positive
from layerwise.errors import ConfigError, LayerwiseError
from layerwise.reproduce.grid import Grid
from layerwise.reproduce.plan import RunSpec, dedupe, is_finished, read_results, shard
from layerwise.reproduce.tables import fmt_cell, fmt_p, fmt_signed, markdown, mean_std, paired_test
from layerwise.config import default_data_dir
from layerwise.training.finetune import FinetuneConfig

STRATEGIES = ("none", "standard", "layerdrop", "attn_layerdrop", "scheduled_bernoulli", "attendout")
RUN_PRIORITY = ("standard", "attendout", "scheduled_bernoulli", "none", "layerdrop", "attn_layerdrop")
REFERENCE = "standard"
# Training-set sizes of the GLUE releases: smaller tasks run first.
TASK_SIZE = {"rte": 2490, "mrpc": 3668, "stsb": 5749, "cola": 8551, "sst2": 67349, "qnli": 104743,
             "qqp": 363846, "mnli": 392702}
PATTERN_FILE = "pattern.json"


@dataclass
class AttendoutOptions:
    """Options of `layerwise reproduce attendout` (also the top-level keys of its --config file)."""

    model: str = "all-MiniLM-L6-v2"
    data_dir: str = field(default_factory=default_data_dir)
    output_dir: str = "reproduce"
    seeds: int = 5
    tasks: list[str] = field(default_factory=lambda: ["cola", "rte", "mrpc", "sst2"])
    strategies: list[str] = field(default_factory=lambda: list(STRATEGIES))
    max_steps: int = 0
    subset: int = 0  # cap on train and dev examples each (finetune's subset)
    device: str = "auto"
    pattern_which: str = "last"  # which learned rates scheduled_bernoulli follows: last | overall
    shard: str = ""

    def validate(self) -> None:
        from layerwise.data.glue import get_task

        positive(self, "seeds")
        non_negative(self, "max_steps", "subset")
        self.tasks = [get_task(t).name for t in self.tasks]
        if not self.tasks or not self.strategies:
            raise ConfigError("--tasks and --strategies must each name at least one value")
        if self.pattern_which not in ("last", "overall"):
            raise ConfigError(f"--pattern-which: expected last or overall, got {self.pattern_which!r}")


class AttendoutGrid(Grid):
    """The attention-dropout grid: plan, train, post (pattern export), report."""

    def __init__(self, opts: AttendoutOptions, sections: dict[str, dict[str, Any]] | None = None,
                 overrides: list[str] | None = None, log: Callable[[str], None] = print) -> None:
        super().__init__(opts, sections, overrides, log)
        self.variants = read_variants(self.sections)
        check_strategies(opts.strategies, self.variants)
        self.plan()  # every config is built and validated up front

    def strategies(self) -> list[str]:
        """Requested strategies in table order; attendout is added when scheduled_bernoulli needs its pattern."""
        follows = any(self.base(s) == "scheduled_bernoulli" for s in self.opts.strategies)
        wanted = set(self.opts.strategies) | ({"attendout"} if follows else set())
        return [s for s in STRATEGIES if s in wanted] + [s for s in self.opts.strategies if s not in STRATEGIES]

    def config(self, task: str, strategy: str, seed: int, pattern: str = "") -> FinetuneConfig:
        o = self.opts
        variant, base = self.variants.get(strategy, {}), self.base(strategy)
        file_values = {**self.sections.get("finetune", {}), **self.sections.get(f"per_task.{task}", {}),
                       **self.sections.get(f"per_strategy.{base}", {}), **variant}
        cli: dict[str, Any] = {"model": o.model, "task": task, "data_dir": o.data_dir, "dropout": base,
                               "train.seed": seed, "train.progress": False, "train.device": o.device}
        if pattern:
            cli["drop.pattern"] = pattern
        for key, value in (("subset", o.subset), ("train.max_steps", o.max_steps)):
            if value:
                cli[key] = value
        return build_config(FinetuneConfig, file_values, cli, self.overrides, source="reproduce config")

    def plan(self) -> list[RunSpec]:
        specs: list[RunSpec] = []
        tasks = sorted(self.opts.tasks, key=lambda t: (TASK_SIZE.get(t, 10 ** 9), self.opts.tasks.index(t)))
        for seed in range(self.opts.seeds):
            for t_index, task in enumerate(tasks):
                made: dict[str, RunSpec] = {}
                for strategy in sorted(self.strategies(), key=lambda s: RUN_PRIORITY.index(s)
                                       if s in RUN_PRIORITY else len(RUN_PRIORITY)):
                    after: tuple[str, ...] = ()
                    patch = None
                    pattern = ""
                    group = f"{task}-seed{seed}-{strategy}"  # --shard unit: a run, or a pattern and its user
                    if self.base(strategy) == "scheduled_bernoulli":
                        source = made["attendout"]
                        after, group = (source.key,), source.group
                        pattern = str((source.run_dir(self.out) / PATTERN_FILE).resolve())
                        patch = _pattern_patch(source.key)
                    spec = RunSpec(kind="finetune", name=f"{task}-{strategy}", seed=seed,
                                   config=self.config(task, strategy, seed, pattern), group=group,
                                   order=(seed, t_index, RUN_PRIORITY.index(strategy)
                                          if strategy in RUN_PRIORITY else len(RUN_PRIORITY)),
                                   after=after, roles={"main"}, meta={"task": task, "strategy": strategy},
                                   hash_patch=patch)
                    made[strategy] = spec
                    specs.append(spec)
        return shard(dedupe(specs), self.shard)

    def results(self, spec: RunSpec) -> dict | None:
        return read_results(spec, self.out)

    # ------------------------------------------------------------------------------------ run, post
    def train(self, spec: RunSpec, run_dir: Path, resume: bool) -> None:
        from layerwise.training.finetune import finetune

        finetune(spec.config, run_dir, resume=resume, log=self.log)

    def needs_post(self, spec: RunSpec, run_dir: Path) -> bool:
        return spec.meta["strategy"] == "attendout" and not (run_dir / PATTERN_FILE).is_file()

    def post(self, spec: RunSpec, run_dir: Path) -> None:
        """AttendOut: export the learned per-layer drop rates for scheduled_bernoulli (as export-pattern does)."""
        if spec.meta["strategy"] != "attendout":
            return
        from layerwise.commands.export_pattern import pattern_rates
        from layerwise.atomic import write_json

        rates = pattern_rates(run_dir, self.opts.pattern_which)
        write_json(run_dir / PATTERN_FILE, {"rates": rates, "which": self.opts.pattern_which, "source": str(run_dir)})

    # ---------------------------------------------------------------------------------- estimate
    def sentences(self, cfg: Any) -> int:
        return 1

    def data_key(self, cfg: Any) -> tuple:
        return (cfg.task, cfg.data_dir, cfg.subset, cfg.train.seed, cfg.max_length)

    def train_texts(self, cfg: Any) -> tuple[int, list[str]]:
        from layerwise.data.glue import get_task, read_split

        examples = read_split(get_task(cfg.task), Path(cfg.data_dir), "train").subset(cfg.subset, cfg.train.seed)
        return len(examples), [" ".join(texts) for texts in examples.texts]  # a pair is one sequence

    # -------------------------------------------------------------------------------------- report
    def summary(self, specs: list[RunSpec]) -> dict[str, Any]:
        """{task: {"metric", "metrics", "strategies": {s: {"per_seed": {metric: {seed: v}}, "metrics": {m: mean_std},
        "paired": paired_test of the main metric against standard}}}} from the finished runs."""
        tasks: dict[str, Any] = {}
        for task in self.opts.tasks:
            entry: dict[str, Any] = {"metric": None, "metrics": [], "strategies": {}}
            for strategy in self.strategies():
                per_seed: dict[str, dict[int, float]] = {}
                for spec in specs:
                    if spec.meta == {"task": task, "strategy": strategy}:
                        results = self.results(spec)
                        if results is None:
                            continue
                        entry["metric"] = results["metric"]
                        scores = results.get("best_eval") or {results["metric"]: results["best_metric"]}
                        for metric, value in scores.items():
                            per_seed.setdefault(metric, {})[spec.seed] = value
                            if metric not in entry["metrics"]:
                                entry["metrics"].append(metric)
                entry["strategies"][strategy] = {"per_seed": per_seed,
                                                 "metrics": {m: mean_std(list(v.values()))
                                                             for m, v in per_seed.items()}}
            metric = entry["metric"]
            reference = entry["strategies"].get(REFERENCE, {}).get("per_seed", {}).get(metric, {})
            for strategy, data in entry["strategies"].items():
                if strategy != REFERENCE and metric:
                    data["paired"] = paired_test(data["per_seed"].get(metric, {}), reference)
            tasks[task] = entry
        return tasks

    def report(self) -> list[Path]:
        from layerwise.atomic import write_json, write_text

        specs = self.unsharded()
        summary = self.summary(specs)
        self.out.mkdir(parents=True, exist_ok=True)
        figures = self.figures(specs)
        md, json_path = self.out / "attendout.md", self.out / "attendout.json"
        write_text(md, self.markdown(summary, figures))
        write_json(json_path, {"settings": self.settings(), "reference": REFERENCE, "tasks": summary,
                               "figures": [str(p.name) for p in figures]})
        return [md, json_path, *figures]

    def figures(self, specs: list[RunSpec]) -> list[Path]:
        """convergence-<task>.png over every finished seed of each strategy (mean ± std), and
        drop-heatmap-<task>[-<variant>].png of each attendout strategy, the mean over its finished seeds."""
        from layerwise.plots import convergence, drop_heatmap

        written = []
        for task in self.opts.tasks:
            finished: dict[str, list[RunSpec]] = {}
            for spec in sorted(specs, key=lambda s: s.seed):
                if spec.meta["task"] == task and is_finished(spec, self.out):
                    finished.setdefault(spec.meta["strategy"], []).append(spec)
            groups = {s: [spec.run_dir(self.out) for spec in finished[s]] for s in self.strategies() if s in finished}
            if groups:
                written.append(convergence(groups, self.out / f"convergence-{task}.png",
                                           title=f"{task}: mean ± std over seeds"))
            for strategy in [s for s in self.strategies() if s in finished and self.base(s) == "attendout"]:
                suffix = "" if strategy == "attendout" else f"-{strategy}"
                try:
                    runs = finished[strategy]
                    seeds = ", ".join(str(spec.seed) for spec in runs)
                    written.append(drop_heatmap([spec.run_dir(self.out) for spec in runs],
                                                self.out / f"drop-heatmap-{task}{suffix}.png",
                                                title=f"{task} {strategy}, seeds {seeds}"))
                except LayerwiseError as exc:
                    self.log(f"[reproduce] no heatmap for {task} {strategy}: {exc}")
        return written

    def base(self, strategy: str) -> str:
        """The registered strategy a table row runs: itself, or the `dropout:` of a variant."""
        return self.variants.get(strategy, {}).get("dropout", strategy)

    def markdown(self, summary: dict[str, Any], figures: list[Path]) -> str:
        o = self.opts
        strategies = self.strategies()
        header, rows = ["strategy"], []
        for task, entry in summary.items():
            header += [f"{task} {m}" for m in entry["metrics"] or ["-"]] + [f"{task} p"]
        for strategy in strategies:
            row = [strategy]
            for task, entry in summary.items():
                data = entry["strategies"].get(strategy, {})
                for metric in entry["metrics"] or ["-"]:
                    stat = data.get("metrics", {}).get(metric)
                    cell = fmt_cell(stat)
                    if stat and 0 < stat["n"] < o.seeds:
                        cell += f" (n={stat['n']})"
                    row.append(cell)
                paired = data.get("paired")
                row.append("ref." if strategy == REFERENCE else fmt_p(paired["p_ttest"]) if paired else "n/a")
            rows.append(row)
        detail_header = ["task", "strategy", "metric", "Δ vs standard", "t", "p (paired t)", "p (Wilcoxon)",
                         "paired seeds"]
        detail = []
        for task, entry in summary.items():
            for strategy in strategies:
                paired = entry["strategies"].get(strategy, {}).get("paired")
                if not paired:
                    continue
                detail.append([task, strategy, entry["metric"],
                               fmt_signed(paired["mean_diff"]) if paired["mean_diff"] is not None else "-",
                               fmt_signed(paired["t"], plus=False) if paired["t"] is not None else "n/a",
                               fmt_p(paired["p_ttest"]), fmt_p(paired["p_wilcoxon"]), str(paired["n"])])
        lines = [f"## Attention dropout on GLUE dev: {o.model}", "",
                 f"Dev score of the best checkpoint x 100 (CoLA: Matthews; MRPC: F1 and accuracy; STS-B: "
                 f"Spearman/Pearson; others: accuracy), mean ± std over seeds (sample std); (n=k) marks a cell with "
                 f"fewer than {o.seeds} finished seeds. `p`: two-sided paired t-test across seeds against "
                 f"`{REFERENCE}` on the task's main metric (scipy.stats.ttest_rel; n/a with fewer than 2 paired "
                 "seeds or the same difference on every seed, where the test is undefined). scheduled_bernoulli "
                 "follows the per-layer pattern learned by the attendout run of the same task and seed."
                 + (f" Training capped at {o.max_steps} steps." if o.max_steps else "")
                 + (f" Train and dev subsets of {o.subset} examples." if o.subset else ""), "",
                 markdown(header, rows), "", *self._variant_lines(), *self.settings_lines(),
                 "Paired tests against `standard` (Wilcoxon signed-rank from 6 paired seeds on: with 5 or fewer "
                 "its exact two-sided p cannot go below 0.0625, so it is n/a there):", "",
                 markdown(detail_header, detail, align_right_from=3) if detail else "(no finished pairs yet)\n"]
        if figures:
            lines += ["", "Figures: " + ", ".join(f"[{p.name}]({p.name})" for p in figures), ""]
        return "\n".join(lines)

    def _variant_lines(self) -> list[str]:
        used = [name for name in self.strategies() if name in self.variants]
        if not used:
            return []
        return ["Variants (config file): " + "; ".join(
            f"`{name}` = {self.base(name)} with "
            + ", ".join(f"{key}={value}" for key, value in self.variants[name].items() if key != "dropout")
            for name in used), ""]


def read_variants(sections: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Named strategy variants from the config file's `variants.<name>:` sections: {name: {run-config keys}}.

    Each needs `dropout:` (the registered strategy it varies); its other keys override that strategy's run config,
    e.g. `variants: {attendout_coop: {dropout: attendout, drop: {objective: cooperative}}}`.
    """
    from layerwise.registry import DROPOUT_STRATEGIES

    variants = {name[len("variants."):]: values for name, values in sections.items() if name.startswith("variants.")}
    for name, values in variants.items():
        if name in DROPOUT_STRATEGIES.names():
            raise ConfigError(f"variants.{name}: the name of a built-in strategy; pick another name")
        if "dropout" not in values:
            raise ConfigError(f"variants.{name}: expected a 'dropout:' key naming the strategy it varies")
        _registered(values["dropout"], f"variants.{name}.dropout")
    return variants


def check_strategies(names: list[str], variants: dict[str, dict[str, Any]]) -> None:
    """Every --strategies name is a registered strategy or a variant of the config file."""
    for name in names:
        if name not in variants:
            _registered(name, "--strategies", hint=" (or a name under 'variants:' in --config)")


def _registered(name: str, where: str, hint: str = "") -> None:
    """Refuse a name that is not a registered dropout strategy, saying which option or key gave it."""
    from layerwise.registry import DROPOUT_STRATEGIES

    try:
        DROPOUT_STRATEGIES.get(name)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}{hint}") from None


def _pattern_patch(source_key: str) -> Callable[[Any], None]:
    def patch(view: Any) -> None:
        view.drop.pattern = f"run:{source_key}"

    return patch

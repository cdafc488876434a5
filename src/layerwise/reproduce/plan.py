"""The run grid of a reproduction: one RunSpec per (configuration, seed), keyed by a hash of its resolved config.

A run lives in OUT/runs/<kind>-<name>-seed<k>-<hash>/. It is finished when its results file exists
(train-embed: eval.json, finetune: results.json); it is resumable when it has a checkpoint. A spec may wait on
other runs (`after`: their keys must be finished first) or on a decision not yet made (`pending`: e.g. the pooler
learning rate, picked once the seed-0 tuning runs have finished); the runner re-plans after every run.

The key hashes the resolved config with four things left out, because they do not change what a run computes:
the output directory (the key is the directory), the data directory (a path under it enters as "{data_dir}/..."),
the device and the progress bar. A dependency on another run's
output (scheduled_bernoulli's learned pattern) enters the hash as that run's key, not as a path, so moving the
output directory keeps the keys.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from layerwise.config import build_config, config_hash, read_config_file
from layerwise.errors import ConfigError

RESULTS = {"embed": "eval.json", "finetune": "results.json"}

# Rough training cost, seconds per sentence passed forward and backward (max length 64-128), used by --dry-run
# when the output directory holds no finished run of the same model to measure from. Measured once for the small
# model on a 2-core CPU (17 SNLI triplets/s, i.e. ~0.02 s per sentence, evaluations included); the others are
# scaled by hidden^2 x layers, and the cuda figures assume one recent datacenter GPU. Estimates, not promises.
SECONDS_PER_SENTENCE = {
    ("tiny", "cpu"): 0.0005, ("small", "cpu"): 0.02, ("base", "cpu"): 0.15, ("large", "cpu"): 0.5,
    ("tiny", "cuda"): 0.0005, ("small", "cuda"): 0.0003, ("base", "cuda"): 0.0012, ("large", "cuda"): 0.004,
}


# Characters per token, roughly, for English text under a WordPiece / BPE tokenizer: where truncation at max_length
# tokens cuts a text, in the time estimate's measure of work (padded characters per sentence).
CHARS_PER_TOKEN = 4


def padded_characters(texts: list[str], cap: int, batch_size: int) -> float:
    """Mean width in characters of a padded batch: `texts` shuffled into batches of `batch_size` as training does
    (seed 0), each as wide as its longest text, counted up to `cap` (1.0 for no texts). Batches are padded to their
    longest sequence, so a step's cost follows this width, not the mean length (measured on the kept CPU runs:
    docs/reproduce.md, "The time estimate of --dry-run")."""
    from layerwise.data.batching import epoch_batches

    if not texts:
        return 1.0
    lengths = np.minimum(np.array([len(text) for text in texts]), cap)
    batches = epoch_batches(len(lengths), max(1, batch_size), seed=0, epoch=0, min_size=1)
    return float(np.mean([lengths[batch].max() for batch in batches]))


@dataclass
class RunSpec:
    """One training run of the grid."""

    kind: str  # "embed" (train-embed) or "finetune"
    name: str  # e.g. "supervised-layer_att_cls-plr0.001", "cola-attendout"
    seed: int
    config: Any  # EmbedConfig / FinetuneConfig, output_dir left empty; None while pending
    group: str  # shard unit: runs that depend on each other share a group
    order: tuple = ()  # sort key: cheapest-most-informative first
    after: tuple[str, ...] = ()  # keys of runs that must be finished first
    pending: str = ""  # why the config is not resolved yet
    roles: set[str] = field(default_factory=set)  # "tune", "main"
    meta: dict[str, Any] = field(default_factory=dict)  # table coordinates (objective, pooler, task, strategy, lr)
    cost_config: Any = None  # a pending run's config with a placeholder value: what the time estimate uses
    hash_patch: Callable[[Any], None] | None = None  # edits a copy of the config before hashing

    @property
    def hash(self) -> str:
        if self.config is None:
            return "pending"
        view = copy.deepcopy(self.config)
        view.output_dir = ""
        # where the data lies, not what it is: moved data (or a relative path) keeps the keys
        mark_data_paths(view, self.config.data_dir)
        view.data_dir = ""
        view.train.device = "auto"
        view.train.progress = False
        if self.hash_patch:
            self.hash_patch(view)
        return config_hash(view)

    @property
    def key(self) -> str:
        return f"{self.kind}-{self.name}-seed{self.seed}-{self.hash}"

    def run_dir(self, out: Path) -> Path:
        return Path(out) / "runs" / self.key


def mark_data_paths(config: Any, data_dir: str) -> None:
    """Write "{data_dir}" for the data directory at the start of every path-like string field (in place), so a
    config-file value such as "{data_dir}/nli_for_simcse.csv" hashes the same wherever the data lies."""
    if not data_dir:
        return
    prefix = data_dir.rstrip("/\\")
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        if dataclasses.is_dataclass(value):
            mark_data_paths(value, data_dir)
        elif isinstance(value, str) and (value == prefix or value.startswith((prefix + "/", prefix + "\\"))):
            setattr(config, item.name, "{data_dir}" + value[len(prefix):])


def slug(value: float) -> str:
    """A learning rate as a short name part: 0.001 -> 1e-03."""
    return f"{value:.0e}"


# ---------------------------------------------------------------------------------------------- status
def results_path(spec: RunSpec, out: Path) -> Path:
    return spec.run_dir(out) / RESULTS[spec.kind]


def is_finished(spec: RunSpec, out: Path) -> bool:
    return spec.config is not None and results_path(spec, out).is_file()


def read_results(spec: RunSpec, out: Path) -> dict | None:
    """A finished run's results (eval.json or results.json), or None while it is unfinished."""
    if not is_finished(spec, out):
        return None
    return json.loads(results_path(spec, out).read_text(encoding="utf-8"))


def checkpoint_step(run_dir: Path) -> int | None:
    from layerwise.training.checkpoint import list_checkpoints

    found = list_checkpoints(run_dir / "checkpoints")
    return int(found[-1].name[5:]) if found else None


def status(spec: RunSpec, out: Path, finished: set[str]) -> str:
    if spec.pending:
        return f"waiting: {spec.pending}"
    if spec.key in finished:
        return "finished"
    missing = [k for k in spec.after if k not in finished]
    if missing:
        return "waiting: " + ", ".join(missing)
    step = checkpoint_step(spec.run_dir(out))
    return f"resume from step {step}" if step is not None else "to run"


def dedupe(specs: list[RunSpec]) -> list[RunSpec]:
    """One spec per key (a seed-0 tuning run is also the main run at the picked value): roles merged, sorted."""
    by_key: dict[str, RunSpec] = {}
    for spec in specs:
        key = spec.key if not spec.pending else f"{spec.key}:{spec.name}"
        if key in by_key:
            by_key[key].roles |= spec.roles
            by_key[key].order = min(by_key[key].order, spec.order)
        else:
            by_key[key] = spec
    return sorted(by_key.values(), key=lambda s: s.order)


def shard(specs: list[RunSpec], text: str) -> list[RunSpec]:
    """--shard K/N: the runs of every N-th group (groups in first-appearance order), starting with group K."""
    if not text:
        return specs
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not 0 <= int(match.group(1)) < int(match.group(2)):
        raise ConfigError(f"--shard {text}: expected K/N with 0 <= K < N, e.g. 0/4")
    k, n = int(match.group(1)), int(match.group(2))
    groups = list(dict.fromkeys(s.group for s in specs))
    mine = {g for i, g in enumerate(groups) if i % n == k}
    return [s for s in specs if s.group in mine]


# --------------------------------------------------------------------------------------------- estimate
def model_size(model: str) -> str:
    """tiny / small / base / large from a local config.json (hidden^2 x layers) or the name."""
    from layerwise.modeling.backbone import resolve_model_path

    try:
        path = Path(resolve_model_path(model)) / "config.json"
        if path.is_file():
            cfg = json.loads(path.read_text(encoding="utf-8"))
            cost = cfg.get("hidden_size", 768) ** 2 * cfg.get("num_hidden_layers", 12)
            return "tiny" if cost < 384 ** 2 else "small" if cost < 768 ** 2 * 6 else \
                "base" if cost < 1024 ** 2 * 16 else "large"
    except Exception:  # noqa: BLE001 - an estimate never fails the plan
        pass
    name = model.lower()
    return "large" if "large" in name else "base" if "base" in name else "small"


def device_kind(device: str) -> str:
    if device.startswith("cuda"):
        return "cuda"
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cpu"


def workload(cfg: Any) -> str:
    """What the run trains on, as far as its cost per sentence goes: the GLUE task or the embedding objective
    (a CoLA step took a fifth of the time of an RTE step here, so one rate for both is far off)."""
    return str(getattr(cfg, "task", None) or getattr(cfg, "objective", None) or "")


def measured_rates(specs: list[RunSpec], out: Path, sentences: Callable[[Any], int],
                   characters: Callable[[Any], float | None] = lambda cfg: 1.0) -> dict[tuple, float]:
    """Seconds per padded character (a sentence in batches `characters(cfg)` characters wide counts that many) on the
    finished runs in `out`: per (kind, model, device kind, workload), and per (kind, model, device kind) over every
    workload, the fallback for a workload with no finished run, where counting characters scales a rate measured
    on RTE's long pairs down for CoLA's short sentences. Runs whose data cannot be read here are left out. Besides
    this grid's runs, the finished runs of other grids in `out/runs` (of the same kinds) count, read from their
    config.yaml: RTE runs measure the rate of an MRPC grid sharing their output directory."""
    totals: dict[tuple, list[float]] = {}
    for kind, cfg, results in _finished_runs(specs, out):
        steps, seconds = results.get("steps") or 0, results.get("train_seconds") or 0
        length = characters(cfg)
        if steps and seconds and length:
            work = steps * cfg.train.batch_size * cfg.train.grad_accum * sentences(cfg) * length
            model_key = (kind, cfg.model, device_kind(cfg.train.device))
            for key in (model_key, (*model_key, workload(cfg))):
                bucket = totals.setdefault(key, [0, 0])
                bucket[0] += seconds
                bucket[1] += work
    return {k: s / w for k, (s, w) in totals.items() if w}


def _finished_runs(specs: list[RunSpec], out: Path) -> list[tuple[str, Any, dict]]:
    """(kind, config, results) of every finished run in `out`: this grid's specs, then the other run directories
    of the same kinds whose config.yaml reads as a valid config (others are skipped: a rate is only an estimate)."""
    found, keys = [], set()
    for spec in specs:
        path = results_path(spec, out) if spec.config is not None else None
        if path and path.is_file():
            keys.add(path.parent.name)
            found.append((spec.kind, spec.config, json.loads(path.read_text(encoding="utf-8"))))
    kinds = {spec.kind for spec in specs}
    for run_dir in sorted(Path(out, "runs").glob("*")):
        kind = run_dir.name.split("-", 1)[0]
        if run_dir.name in keys or kind not in kinds:
            continue
        results, config_file = run_dir / RESULTS[kind], run_dir / "config.yaml"
        if not results.is_file() or not config_file.is_file():
            continue
        try:
            cfg = _read_run_config(kind, config_file)
            found.append((kind, cfg, json.loads(results.read_text(encoding="utf-8"))))
        except (ConfigError, ValueError, OSError):
            continue
    return found


def _read_run_config(kind: str, path: Path) -> Any:
    if kind == "embed":
        from layerwise.training.embed import EmbedConfig as cls
    else:
        from layerwise.training.finetune import FinetuneConfig as cls
    return build_config(cls, read_config_file(path), source=str(path))


def estimate_seconds(kind: str, cfg: Any, steps: int | None, rates: dict[tuple, float],
                     sentences: Callable[[Any], int], characters: Callable[[Any], float | None] = lambda cfg: 1.0
                     ) -> tuple[float | None, str]:
    """(seconds, "measured" | "constant") for one run of `steps` optimizer steps of config `cfg`: the measured
    rate of its workload, else of its model on any workload (both per sentence-character), else the constant of
    its model size (per sentence)."""
    if cfg is None or steps is None:
        return None, "unknown"
    model_key = (kind, cfg.model, device_kind(cfg.train.device))
    work = steps * cfg.train.batch_size * cfg.train.grad_accum * sentences(cfg)
    rate = rates.get((*model_key, workload(cfg)), rates.get(model_key))
    length = characters(cfg)
    if rate is not None and length:
        return work * length * rate, "measured"
    return work * SECONDS_PER_SENTENCE[(model_size(cfg.model), model_key[2])], "constant"


def total_steps(train_cfg: Any, examples: int) -> int:
    from layerwise.data.batching import count_batches

    if train_cfg.max_steps:
        return train_cfg.max_steps
    updates = max(1, count_batches(examples, train_cfg.batch_size) // train_cfg.grad_accum)
    return max(1, math.ceil(train_cfg.epochs * updates))


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# ---------------------------------------------------------------------------------------------- options
def read_reproduce_file(path: str, data_dir: str,
                        sections: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Read a reproduce config file: (top-level options, {section: {dotted key: value}}).

    Sections hold run-config keys: "embed"/"finetune" apply to every run; "per_objective.<name>",
    "per_strategy.<name>" and "per_task.<name>" to some. The text "{data_dir}" in a string value is replaced by the
    data directory.
    """
    flat = read_config_file(path)
    options: dict[str, Any] = {}
    grouped: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        if isinstance(value, str):
            value = value.replace("{data_dir}", data_dir)
        section = next((s for s in sections if key.startswith(s + ".")), None)
        if section in ("embed", "finetune"):
            grouped.setdefault(section, {})[key[len(section) + 1:]] = value
        elif section:
            name, _, rest = key[len(section) + 1:].partition(".")
            if not rest:
                raise ConfigError(f"{path}: {key}: expected {section}.<name>.<option>")
            grouped.setdefault(f"{section}.{name}", {})[rest] = value
        else:
            options[key] = value  # checked by build_config against the options dataclass
    return options, grouped

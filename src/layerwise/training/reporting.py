"""Reporters: every record the trainer writes to metrics.jsonl also goes to TensorBoard and/or Weights & Biases.

metrics.jsonl stays the source of truth (`layerwise plot` reads only it); a reporter is an extra view of the same
numbers. Records become scalars named as TensorBoard and W&B group them:

    {"step", "loss", "lr", "examples_per_s", "epoch", "task_loss", ...}  ->  train/<key>
    {"step", "eval": {name: value}, "best": ...}                          ->  eval/<name>
    keys that already hold a "/" (drop/layer3, drop/layer3/head1)         ->  as they are

`train.report_to` (`--report-to tensorboard,wandb`) names the reporters; a new one is one class registered in
REPORTERS with its pip package.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterable

from layerwise.errors import ConfigError
from layerwise.registry import Registry

REPORTERS: Registry = Registry("reporter")
TENSORBOARD_DIR = "tensorboard"


class Reporter:
    """Receives every metrics.jsonl record (log) and is closed once at the end of training."""

    package = ""  # the pip package the reporter needs

    def log(self, record: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The record's numbers under their reporter names (see the module docstring); other values are left out."""
    out: dict[str, float] = {}
    for key, value in record.items():
        if key in ("step", "best"):
            continue
        if key == "eval" and isinstance(value, dict):
            out.update({f"eval/{name}": float(v) for name, v in value.items() if _is_number(v)})
        elif _is_number(value):
            out[key if "/" in key else f"train/{key}"] = float(value)
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _missing(name: str, package: str) -> ConfigError:
    return ConfigError(f"train.report_to: '{name}' needs the '{package}' package, which is not installed: "
                       f"pip install {package}")


@REPORTERS.register("tensorboard")
class TensorBoardReporter(Reporter):
    """Event files in RUN/tensorboard/ (open with `tensorboard --logdir RUN`)."""

    package = "tensorboard"

    def __init__(self, run_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise _missing("tensorboard", self.package) from None
        self._writer_class = SummaryWriter
        self.log_dir = Path(run_dir) / TENSORBOARD_DIR
        self.writer = None
        self.opened = False

    def _open(self, step: int) -> Any:
        # A resumed (or restarted) run writes a new event file; purge_step makes TensorBoard drop the
        # events from step on that the earlier files hold, as the trainer drops those lines of metrics.jsonl.
        # Only the first writer of this reporter purges: a record logged after close() reopens and appends.
        earlier = not self.opened and self.log_dir.is_dir() and any(self.log_dir.glob("events.out.tfevents.*"))
        self.opened = True
        return self._writer_class(log_dir=str(self.log_dir), purge_step=step if earlier else None)

    def log(self, record: dict[str, Any]) -> None:
        values = scalars(record)
        if not values or "step" not in record:
            return
        step = int(record["step"])
        if self.writer is None:
            self.writer = self._open(step)
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()  # a run stopped by an error keeps what it logged

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


@REPORTERS.register("wandb")
class WandbReporter(Reporter):
    """A Weights & Biases run named after the run directory (project: $WANDB_PROJECT, else 'layerwise')."""

    package = "wandb"

    def __init__(self, run_dir: Path) -> None:
        try:
            import wandb
        except ImportError:
            raise _missing("wandb", self.package) from None
        self.wandb, self.run_dir = wandb, Path(run_dir)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "layerwise"), name=self.run_dir.name,
                              dir=str(self.run_dir), config=_run_config(self.run_dir))
        self.run_id = getattr(self.run, "id", None)

    def log(self, record: dict[str, Any]) -> None:
        values = {k: v for k, v in scalars(record).items() if math.isfinite(v)}
        if not values or "step" not in record:
            return
        if self.run is None:  # a record after close(): continue the same W&B run
            self.run = self.wandb.init(project=os.environ.get("WANDB_PROJECT", "layerwise"), name=self.run_dir.name,
                                       dir=str(self.run_dir), id=self.run_id, resume="allow")
        self.run.log(values, step=int(record["step"]))

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def _run_config(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "config.yaml"
    if not path.is_file():
        return {}
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def reporter_names(names: Iterable[str]) -> list[str]:
    """Cleaned, de-duplicated names ('none' and blanks dropped); ConfigError naming the closest for a bad one."""
    cleaned: list[str] = []
    for name in names:
        name = str(name).strip().lower()
        if not name or name == "none" or name in cleaned:
            continue
        if name not in REPORTERS:
            try:
                REPORTERS.get(name)
            except ConfigError as exc:
                raise ConfigError(f"train.report_to: {exc}") from None
        cleaned.append(name)
    return cleaned


def check_reporters(names: Iterable[str]) -> None:
    """Fail early (before a run starts) on an unknown reporter or a missing package."""
    import importlib.util

    for name in reporter_names(names):
        package = REPORTERS.get(name).package
        if package and importlib.util.find_spec(package) is None:
            raise _missing(name, package)


def make_reporters(names: list[str], run_dir: Path) -> list[Reporter]:
    """One reporter per name in `names` (train.report_to), writing into run_dir."""
    reporters: list[Reporter] = []
    try:
        for name in reporter_names(names):
            reporters.append(REPORTERS.get(name)(Path(run_dir)))
    except BaseException:
        for reporter in reporters:
            reporter.close()
        raise
    return reporters

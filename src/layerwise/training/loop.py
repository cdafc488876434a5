"""One short training loop shared by train-embed and finetune.

AdamW with a linear warmup schedule, gradient accumulation and clipping, a progress bar, metrics.jsonl,
evaluation with the best model kept, atomic resumable checkpoints, a stop (or skip) on a NaN loss, and a graceful
stop with a checkpoint on SIGTERM, a first Ctrl-C or a time limit (training.stopping).
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from tqdm.auto import tqdm

from layerwise.config import TrainingConfig
from layerwise.errors import LayerwiseError
from layerwise.training import distributed
from layerwise.training.checkpoint import (
    atomic_dir, commit_dir, list_checkpoints, load_checkpoint, prune_checkpoints, save_checkpoint,
)
from layerwise.training.stopping import StopRequest, TrainingStopped

METRICS_FILE = "metrics.jsonl"


class TrainingDiverged(LayerwiseError):
    """The loss became NaN or infinite."""

    exit_code = 3


@dataclass
class TrainResult:
    best_metric: float | None
    best_step: int | None
    global_step: int
    seconds: float
    skipped_batches: int = 0


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


class Trainer:
    """Runs `compute_loss` over `make_batches(epoch)` for the configured steps; see fit()."""

    def __init__(self, *, model: torch.nn.Module, param_groups: list[dict], compute_loss: Callable[[Any], torch.Tensor],
                 make_batches: Callable[[int], Iterable[Any]], steps_per_epoch: int,
                 evaluate: Callable[[], dict[str, float]], metric: str, save_model: Callable[[Path], None],
                 run_dir: Path, cfg: TrainingConfig, greater_is_better: bool = True,
                 stateful: dict[str, Any] | None = None, log_extra: Callable[[], dict[str, float]] | None = None,
                 device: torch.device | None = None, manual_backward: bool = False) -> None:
        """`manual_backward`: compute_loss runs backward itself (GradCache) scaled by 1 / grad_accum."""
        from transformers import get_linear_schedule_with_warmup

        if steps_per_epoch <= 0:
            raise LayerwiseError("no training batches: the training set is smaller than one batch")
        self.model, self.compute_loss, self.make_batches = model, compute_loss, make_batches
        self.evaluate, self.metric, self.save_model = evaluate, metric, save_model
        self.run_dir, self.cfg, self.greater_is_better = Path(run_dir), cfg, greater_is_better
        self.stateful, self.log_extra = stateful or {}, log_extra
        self.reporters: list = []
        self.manual_backward = manual_backward
        self.dist = distributed.current()
        self.device = device or next(model.parameters()).device
        self.batches_per_epoch = steps_per_epoch
        updates_per_epoch = max(1, steps_per_epoch // cfg.grad_accum)
        self.total_steps = cfg.max_steps or max(1, math.ceil(cfg.epochs * updates_per_epoch))
        self.optimizer = torch.optim.AdamW(param_groups, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.scheduler = get_linear_schedule_with_warmup(
            self.optimizer, int(cfg.warmup_ratio * self.total_steps), self.total_steps)
        self.state = {"global_step": 0, "epoch": 0, "batches_in_epoch": 0, "best_metric": None, "best_step": None,
                      "skipped_batches": 0, "last_eval_step": None, "train_seconds": 0.0}
        self._clock: tuple[float, float] = (time.perf_counter(), 0.0)  # (this session's start, seconds before it)
        self.stop_request = StopRequest()  # inactive until fit() enters it
        self._saved_step: int | None = None  # the step of the last checkpoint this process wrote or joined

    # ----------------------------------------------------------------------------------------- paths
    @property
    def checkpoint_root(self) -> Path:
        return self.run_dir / "checkpoints"

    def _log(self, record: dict[str, Any]) -> None:
        if not self.dist.is_main:
            return
        with open(self.run_dir / METRICS_FILE, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        for reporter in self.reporters:
            reporter.log(record)

    # ------------------------------------------------------------------------------------------- fit
    def fit(self, resume: bool = False) -> TrainResult:
        """Train to the configured number of steps; with resume=True continue from the last checkpoint."""
        from layerwise.training.reporting import make_reporters

        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.reporters = make_reporters(self.cfg.report_to, self.run_dir) if self.dist.is_main else []
        if resume:
            self._resume()
        elif (self.run_dir / METRICS_FILE).exists() and self.dist.is_main:
            (self.run_dir / METRICS_FILE).unlink()
        self._clock = (time.perf_counter(), float(self.state.get("train_seconds") or 0.0))
        try:
            with self.stop_request:
                self._train_to_the_end()
        finally:
            for reporter in self.reporters:
                reporter.close()
        return TrainResult(self.state["best_metric"], self.state["best_step"], self.state["global_step"],
                           self._seconds(), self.state["skipped_batches"])

    def _seconds(self) -> float:
        """Training time over every session of the run: a resumed run adds its time before the checkpoint."""
        start, before = self._clock
        return before + time.perf_counter() - start

    def _train_to_the_end(self) -> None:
        progress = tqdm(total=self.total_steps, initial=self.state["global_step"], desc="train", unit="step",
                        disable=not (self.cfg.progress and self.dist.is_main), dynamic_ncols=True)
        window = {"loss": 0.0, "count": 0, "examples": 0, "time": time.perf_counter()}
        self.model.train()
        while self.state["global_step"] < self.total_steps:
            self._run_epoch(progress, window)
        progress.close()
        if self.state.get("last_eval_step") != self.state["global_step"]:
            self._evaluate_and_keep_best()
        if self.dist.is_main:
            final = atomic_dir(self.run_dir / "final")
            self.save_model(final)
            commit_dir(final, self.run_dir / "final")
        distributed.barrier()

    def _run_epoch(self, progress: tqdm, window: dict) -> None:
        skip = self.state["batches_in_epoch"]
        batches = islice(iter(self.make_batches(self.state["epoch"])), skip, None)
        accumulated = 0
        for batch in batches:
            loss = self.compute_loss(to_device(batch, self.device))
            self.state["batches_in_epoch"] += 1
            if not torch.isfinite(loss):
                self._on_bad_loss(loss)
                continue
            if not self.manual_backward:
                (loss / self.cfg.grad_accum).backward()
            window["loss"] += float(loss.detach())
            window["count"] += 1
            window["examples"] += _batch_size(batch, self.cfg.batch_size)
            accumulated += 1
            if accumulated % self.cfg.grad_accum == 0:
                self._optimizer_step()
                progress.update(1)
                self._after_step(progress, window)
                if self.state["global_step"] >= self.total_steps:
                    return
        self._flush_partial_accumulation(accumulated, progress, window)
        self.state["epoch"] += 1
        self.state["batches_in_epoch"] = 0
        if not self.cfg.eval_every:
            self._evaluate_and_keep_best()
            self._checkpoint()

    def _flush_partial_accumulation(self, accumulated: int, progress: tqdm, window: dict) -> None:
        if accumulated % self.cfg.grad_accum and self.state["global_step"] < self.total_steps:
            self._optimizer_step()
            progress.update(1)
            self._after_step(progress, window)

    def _optimizer_step(self) -> None:
        if self.cfg.max_grad_norm:
            params = [p for group in self.optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state["global_step"] += 1

    def _on_bad_loss(self, loss: torch.Tensor) -> None:
        step = self.state["global_step"] + 1
        if self.cfg.on_nan == "skip":
            self.optimizer.zero_grad(set_to_none=True)
            self.state["skipped_batches"] += 1
            self._log({"step": step, "skipped_batch": float(loss.detach())})
            return
        kept = list_checkpoints(self.checkpoint_root)
        where = f"last good checkpoint: {kept[-1]}" if kept else "no checkpoint was written yet"
        raise TrainingDiverged(f"loss is {float(loss.detach())} at step {step}; stopped ({where}); "
                               "lower the learning rate or pass --set train.on_nan=skip")

    def _after_step(self, progress: tqdm, window: dict) -> None:
        step = self.state["global_step"]
        if step % self.cfg.log_every == 0 or step == self.total_steps:
            elapsed = max(time.perf_counter() - window["time"], 1e-9)
            loss = distributed.mean_across(window["loss"] / max(window["count"], 1))
            record = {"step": step,
                      "epoch": round(self.state["epoch"] + self.state["batches_in_epoch"] / self.batches_per_epoch, 4),
                      "loss": loss, "lr": self.scheduler.get_last_lr()[0],
                      "examples_per_s": window["examples"] * self.dist.world_size / elapsed}
            if self.log_extra:
                record.update(self.log_extra())
            self._log(record)
            progress.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['lr']:.2e}",
                                 ex_s=f"{record['examples_per_s']:.1f}")
            window.update(loss=0.0, count=0, examples=0, time=time.perf_counter())
        if self.cfg.eval_every and step % self.cfg.eval_every == 0:
            self._evaluate_and_keep_best()
        every = self.cfg.checkpoint_every or self.cfg.eval_every
        if every and step % every == 0 and step < self.total_steps:
            self._checkpoint()
        if step < self.total_steps:
            self._stop_if_asked()

    def _stop_if_asked(self) -> None:
        """Checkpoint and raise TrainingStopped when a signal or the time limit asked (any process asking stops
        them all)."""
        reason = self.stop_request.reason()
        if self.dist.enabled and distributed.any_across(bool(reason)):
            reason = reason or "another process was asked to stop"
        if not reason:
            return
        step = self.state["global_step"]
        if self._saved_step != step:
            self._checkpoint()
        raise TrainingStopped(step, self.total_steps, reason, self.checkpoint_root / f"step-{step}",
                              self.stop_request.exit_code())

    # ------------------------------------------------------------------------------- eval, checkpoints
    def _evaluate_and_keep_best(self) -> None:
        self.state["last_eval_step"] = self.state["global_step"]
        if self.dist.is_main:
            self._evaluate_on_main()
        distributed.barrier()

    def _evaluate_on_main(self) -> None:
        self.model.eval()
        scores = self.evaluate()
        self.model.train()
        if self.metric not in scores:
            raise LayerwiseError(f"evaluation returned no '{self.metric}' (got {', '.join(scores)})")
        value, best = scores[self.metric], self.state["best_metric"]
        improved = best is None or (value > best if self.greater_is_better else value < best)
        self._log({"step": self.state["global_step"], "eval": scores, "best": improved})
        if improved:
            self.state["best_metric"], self.state["best_step"] = value, self.state["global_step"]
            tmp = atomic_dir(self.run_dir / "best")
            self.save_model(tmp)
            commit_dir(tmp, self.run_dir / "best")

    def _checkpoint(self) -> None:
        if self.dist.is_main:
            target = self.checkpoint_root / f"step-{self.state['global_step']}"
            state = {**self.state, "train_seconds": self._seconds()}
            save_checkpoint(target, self.model, self.optimizer, self.scheduler, state, self.stateful)
            prune_checkpoints(self.checkpoint_root, max(self.cfg.keep_last, 1))
        self._saved_step = self.state["global_step"]
        distributed.barrier()

    def _resume(self) -> None:
        found = list_checkpoints(self.checkpoint_root)
        if not found:
            raise LayerwiseError(f"--resume: no checkpoint in {self.checkpoint_root}")
        self.state.update(load_checkpoint(found[-1], self.model, self.optimizer, self.scheduler, self.stateful))
        if self.dist.is_main:
            self._truncate_metrics(self.state["global_step"])

    def _truncate_metrics(self, step: int) -> None:
        """Drop log lines written after the checkpoint (the resumed run writes them again)."""
        path = self.run_dir / METRICS_FILE
        if not path.exists():
            return
        kept = [line for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= step]
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        tmp.replace(path)


def _batch_size(batch: Any, default: int) -> int:
    """Examples in a batch: the first tensor's first dimension where there is one."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)) and batch:
        return _batch_size(batch[0], default)
    return default

"""The base class of attention-dropout strategies, and the per-layer drop-rate meter they log through."""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from layerwise.errors import ConfigError
from layerwise.regularization.attach import Attachment, encoder_layers
from layerwise.regularization.options import DropoutOptions


class RateMeter(nn.Module):
    """Mean drop rate per layer (and head) over the current logging window and over all of training.

    Its buffers travel in the strategy's state_dict, so a resumed run keeps its history.
    """

    def __init__(self, num_layers: int, num_heads: int = 1) -> None:
        super().__init__()
        for name in ("window_sum", "total_sum"):
            self.register_buffer(name, torch.zeros(num_layers, num_heads, dtype=torch.float64))
        for name in ("window_n", "total_n"):
            self.register_buffer(name, torch.zeros(num_layers, dtype=torch.float64))
        self.register_buffer("last", torch.full((num_layers, num_heads), math.nan, dtype=torch.float64))

    def add(self, layer: int, rates: torch.Tensor | float) -> None:
        """Record one observation for a layer: a rate per head, or one rate for the whole layer."""
        rates = torch.as_tensor(rates, dtype=torch.float64).detach().to(self.window_sum.device).reshape(-1)
        for sums, counts in ((self.window_sum, self.window_n), (self.total_sum, self.total_n)):
            sums[layer] += rates
            counts[layer] += 1

    def flush(self) -> dict[str, float]:
        """Window means as {"drop/layerL": ..., "drop/layerL/headH": ...}; starts a new window."""
        seen = self.window_n > 0
        means = self.window_sum / self.window_n.clamp(min=1).unsqueeze(1)
        self.last[seen] = means[seen]
        logs: dict[str, float] = {}
        for layer in torch.nonzero(seen).flatten().tolist():
            logs[f"drop/layer{layer}"] = float(means[layer].mean())
            if means.shape[1] > 1:
                logs.update({f"drop/layer{layer}/head{h}": float(v) for h, v in enumerate(means[layer].tolist())})
        self.window_sum.zero_()
        self.window_n.zero_()
        return logs

    def pattern(self) -> dict[str, Any]:
        """Per-layer (and per-head) rates: of the last logging window and over all of training (None: unseen)."""
        total = self.total_sum / self.total_n.clamp(min=1).unsqueeze(1)
        total[self.total_n == 0] = math.nan

        def listed(matrix: torch.Tensor) -> list:
            return [[None if math.isnan(v) else round(v, 6) for v in row] for row in matrix.tolist()]

        def layer_means(matrix: torch.Tensor) -> list:
            return [None if math.isnan(v) else round(v, 6) for v in matrix.mean(dim=1).tolist()]

        return {"last": layer_means(self.last), "overall": layer_means(total),
                "last_heads": listed(self.last), "overall_heads": listed(total)}


class DropoutStrategy(nn.Module):
    """A way to regularise a transformer's attention in training. In eval mode every strategy is the identity.

    Subclasses set `name` and override `_setup` (hooks on the model) and/or `transform_probs`.
    """

    name = ""
    per_head = False  # whether the meter keeps one rate per head

    def __init__(self, options: DropoutOptions, config: PretrainedConfig) -> None:
        super().__init__()
        self.options = options
        self.num_layers = int(config.num_hidden_layers)
        self.num_heads = int(config.num_attention_heads)
        self.hidden_size = int(config.hidden_size)
        self.meter = RateMeter(self.num_layers, self.num_heads if self.per_head else 1)
        self._attachment: Attachment | None = None

    # -- attach / detach
    def attach(self, model: PreTrainedModel) -> "DropoutStrategy":
        """Hook this strategy into `model` (in place); returns self."""
        if self._attachment is not None:
            raise ConfigError(f"dropout strategy '{self.name}' is already attached to a model")
        if int(model.config.num_hidden_layers) != self.num_layers:
            raise ConfigError(f"strategy built for {self.num_layers} layers, "
                              f"model has {model.config.num_hidden_layers}")
        attachment = Attachment(model)
        try:
            self._setup(attachment, encoder_layers(model))
        except BaseException:
            attachment.undo()
            raise
        self._attachment = attachment
        return self

    def detach(self) -> None:
        """Undo attach: the model is again exactly the original (state_dict, attention implementation, hooks)."""
        if self._attachment is not None:
            self._attachment.undo()
            self._attachment = None

    @property
    def attached(self) -> bool:
        return self._attachment is not None

    def _setup(self, attachment: Attachment, layers: nn.ModuleList) -> None:
        """Install this strategy's hooks. Default: route attention probabilities through transform_probs."""
        attachment.use_attention_function(self, layers)

    # -- training-time behaviour
    def transform_probs(self, layer: int, probs: torch.Tensor) -> torch.Tensor:
        """Attention probabilities (batch, heads, queries, keys) of `layer` in training -> what weights the values."""
        return probs

    def extra_loss(self) -> torch.Tensor | None:
        """A term to add to the task loss (e.g. G-Net's budget penalty), or None."""
        return None

    def set_horizon(self, total_forward_passes: int) -> None:
        """Tell schedule-driven strategies how many training forward passes the run has."""

    def parameter_groups(self) -> list[dict[str, Any]]:
        """Optimizer parameter groups of the strategy's own parameters (G-Net), each with its own lr."""
        return []

    # -- logging
    def drop_rates(self) -> dict[str, float]:
        """Mean drop rates per layer (and head) since the last call; usable as the Trainer's log_extra."""
        return self.meter.flush()

    def pattern(self) -> dict[str, Any]:
        """The per-layer rates learned or applied so far, for drop_pattern.json."""
        return {"strategy": self.name, "num_layers": self.num_layers, "num_heads": self.num_heads,
                **self.meter.pattern()}

"""The fixed attention-dropout strategies: none, standard, layerdrop, attn_layerdrop, scheduled_bernoulli."""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn
from transformers import PretrainedConfig

from layerwise.errors import ConfigError
from layerwise.registry import DROPOUT_STRATEGIES
from layerwise.regularization.attach import Attachment, attention_block
from layerwise.regularization.base import DropoutStrategy
from layerwise.regularization.options import DropoutOptions
from layerwise.regularization.pattern import read_pattern_rates


@DROPOUT_STRATEGIES.register("none")
class NoDropout(DropoutStrategy):
    """No dropout on the attention probabilities (the model's other dropouts are left as they are)."""

    name = "none"


def bernoulli_drop(probs: torch.Tensor, rate: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero each entry with probability `rate`, rescale the rest by 1/(1-rate); also return the drop mask."""
    drop = torch.rand_like(probs) < rate
    return probs.masked_fill(drop, 0.0) / (1.0 - rate), drop


class BernoulliDropout(DropoutStrategy):
    """Element-wise Bernoulli dropout of the attention probabilities at a per-layer rate."""

    per_head = True

    def layer_rate(self, layer: int) -> float:
        raise NotImplementedError

    def transform_probs(self, layer: int, probs: torch.Tensor) -> torch.Tensor:
        rate = self.layer_rate(layer)
        if rate <= 0:
            self.meter.add(layer, torch.zeros(probs.shape[1]))
            return probs
        dropped, drop = bernoulli_drop(probs, rate)
        self.meter.add(layer, drop.float().mean(dim=(0, 2, 3)))
        return dropped


@DROPOUT_STRATEGIES.register("standard")
class StandardDropout(BernoulliDropout):
    """Vanilla attention-probability dropout at `drop.rate` in every layer."""

    name = "standard"

    def layer_rate(self, layer: int) -> float:
        return self.options.rate


@DROPOUT_STRATEGIES.register("scheduled_bernoulli")
class ScheduledBernoulli(BernoulliDropout):
    """Fixed per-layer rates: `drop.rates`, or a learned pattern (`drop.pattern`), optionally moving linearly to
    `drop.final_rates` over the training forward passes (the horizon given by set_horizon)."""

    name = "scheduled_bernoulli"

    def __init__(self, options: DropoutOptions, config: PretrainedConfig) -> None:
        super().__init__(options, config)
        if options.pattern and options.rates:
            raise ConfigError("scheduled_bernoulli: give drop.rates or drop.pattern, not both")
        if options.pattern:
            start = read_pattern_rates(options.pattern, options.pattern_which)
        else:
            start = options.rates or [options.rate]
        self.start = self._per_layer(start, "drop.pattern" if options.pattern else "drop.rates")
        self.final = self._per_layer(options.final_rates, "drop.final_rates") if options.final_rates else None
        self.register_buffer("forwards", torch.zeros((), dtype=torch.long))
        self.horizon = 0

    def _per_layer(self, rates: list[float], key: str) -> list[float]:
        if len(rates) == 1:
            return list(rates) * self.num_layers
        if len(rates) != self.num_layers:
            raise ConfigError(f"{key}: expected 1 or {self.num_layers} rates (one per layer), got {len(rates)}")
        if any(not 0 <= r < 1 for r in rates):
            raise ConfigError(f"{key}: every rate must be in [0, 1), got {rates}")
        return [float(r) for r in rates]

    def set_horizon(self, total_forward_passes: int) -> None:
        self.horizon = int(total_forward_passes)

    def progress(self) -> float:
        return min(1.0, float(self.forwards) / self.horizon) if self.horizon > 0 else 0.0

    def layer_rate(self, layer: int) -> float:
        if self.final is None:
            return self.start[layer]
        t = self.progress()
        return (1 - t) * self.start[layer] + t * self.final[layer]

    def transform_probs(self, layer: int, probs: torch.Tensor) -> torch.Tensor:
        out = super().transform_probs(layer, probs)
        if layer == self.num_layers - 1:
            self.forwards += 1
        return out


def _skip_forward(strategy: "LayerSkip", layer: int, returns_tuple: bool) -> Callable[[Callable], Callable]:
    """A forward wrapper that, in training, returns its input unchanged with probability drop.rate."""
    state = {"tuple": returns_tuple}

    def make(forward: Callable) -> Callable:
        owner = forward.__self__

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if not owner.training:
                return forward(*args, **kwargs)
            skip = bool(torch.rand(()) < strategy.options.rate)
            strategy.meter.add(layer, float(skip))
            if not skip:
                out = forward(*args, **kwargs)
                state["tuple"] = isinstance(out, tuple)
                return out
            hidden = args[0] if args else kwargs["hidden_states"]
            return (hidden, None) if state["tuple"] else hidden

        return wrapped

    return make


class LayerSkip(DropoutStrategy):
    """Skips a (sub-)layer for the whole batch at rate drop.rate (fairseq LayerDrop); attention dropout untouched."""

    def target(self, layer: nn.Module) -> tuple[nn.Module, bool]:
        raise NotImplementedError

    def _setup(self, attachment: Attachment, layers: nn.ModuleList) -> None:
        for index, layer in enumerate(layers):
            module, returns_tuple = self.target(layer)
            attachment.wrap_forward(module, _skip_forward(self, index, returns_tuple))


@DROPOUT_STRATEGIES.register("layerdrop")
class LayerDrop(LayerSkip):
    """Skip whole transformer layers (the layer's output is its input)."""

    name = "layerdrop"

    def target(self, layer: nn.Module) -> tuple[nn.Module, bool]:
        return layer, False  # transformers 5 layers return a tensor; learned from the first real call otherwise


@DROPOUT_STRATEGIES.register("attn_layerdrop")
class AttentionLayerDrop(LayerSkip):
    """Skip the attention sub-layer (attention + its residual block): the feed-forward sees the layer's input."""

    name = "attn_layerdrop"

    def target(self, layer: nn.Module) -> tuple[nn.Module, bool]:
        return attention_block(layer), True  # BERT-style blocks return (output, attention weights)

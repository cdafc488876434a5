"""Attention-dropout strategies, selectable by name from DROPOUT_STRATEGIES, and their attach/detach.

    strategy = build_strategy("attendout", DropoutOptions(), model.config).attach(model)
    ... train ...
    strategy.detach()   # the model is again a plain transformers model
"""
from __future__ import annotations

from transformers import PretrainedConfig

from layerwise.registry import DROPOUT_STRATEGIES
from layerwise.regularization import attendout, strategies  # noqa: F401  (fill the registry)
from layerwise.regularization.base import DropoutStrategy
from layerwise.regularization.options import DropoutOptions


def build_strategy(name: str, options: DropoutOptions, config: PretrainedConfig) -> DropoutStrategy:
    """The strategy registered as `name` (ConfigError with a suggestion if unknown), for a model with `config`."""
    return DROPOUT_STRATEGIES.get(name)(options, config)


__all__ = ["DropoutOptions", "DropoutStrategy", "build_strategy"]

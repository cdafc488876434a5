"""Attach a dropout strategy to a transformers model, and detach it without a trace.

Attention probabilities are reached through transformers' attention interface: the model's attention implementation
(`sdpa` or `eager`) is swapped for `layerwise_<original>`, a function registered once that looks up which strategy
and layer own the calling module, and otherwise (eval mode, or a module no strategy owns) calls the original
implementation with the same arguments, so evaluation is bit-for-bit the original model. Layer-level strategies use
forward wrappers and hooks on the encoder layers. No parameter, buffer or config value of the model is changed.
"""
from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface, PreTrainedModel

from layerwise.errors import ConfigError

PREFIX = "layerwise_"
SUPPORTED = ("sdpa", "eager")

# module -> (strategy, layer index): filled on attach, emptied on detach. Weak keys: no reference cycles.
_OWNERS: "weakref.WeakKeyDictionary[nn.Module, tuple[Any, int]]" = weakref.WeakKeyDictionary()


def encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's list of transformer layers: the first ModuleList with num_hidden_layers entries."""
    count = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return module
    raise ConfigError(f"{type(model).__name__}: cannot find its list of {count} transformer layers")


def attention_block(layer: nn.Module) -> nn.Module:
    """The child of a layer that holds the self-attention and its residual (BERT's `layer.attention`)."""
    for child in layer.children():
        if any(hasattr(m, "scaling") and hasattr(m, "dropout") for m in child.modules()):
            if hasattr(child, "scaling"):
                break  # the bare attention, without its residual: cannot be skipped as a sub-layer
            return child
    raise ConfigError(f"{type(layer).__name__}: cannot find an attention sub-layer with its residual to skip")


def eager_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, scaling: float | None = None,
                    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
                    **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention with explicit probabilities, passed through `transform` before they weight the values.

    Accepts the boolean (True: attend) masks of sdpa and the additive float masks of eager.
    """
    scaling = query.size(-1) ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    probs = nn.functional.softmax(scores, dim=-1)
    if transform is not None:
        probs = transform(probs)
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), probs


def _original_function(name: str, module: nn.Module) -> Callable:
    if name == "eager":  # the model's own eager function (what transformers would have called)
        return getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", eager_attention)
    return ALL_ATTENTION_FUNCTIONS[name]


def _make_attention_function(original: str) -> Callable:
    def attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, **kwargs: Any):
        owner = _OWNERS.get(module)
        if owner is None or not module.training:
            return _original_function(original, module)(module, query, key, value, attention_mask, **kwargs)
        strategy, layer = owner
        kwargs.pop("dropout", None)
        return eager_attention(module, query, key, value, attention_mask,
                               transform=lambda probs: strategy.transform_probs(layer, probs), **kwargs)

    attention.__name__ = f"{PREFIX}{original}_attention"
    return attention


def _register(original: str) -> str:
    """Register `layerwise_<original>` (attention and mask functions) once; return its name."""
    name = PREFIX + original
    if name not in ALL_ATTENTION_FUNCTIONS:
        AttentionInterface.register(name, _make_attention_function(original))
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[original])
    return name


@dataclass
class Attachment:
    """Everything attach changed on a model, so that detach can undo exactly that."""

    model: PreTrainedModel
    original_impl: str | None = None
    owned: list[nn.Module] = field(default_factory=list)
    handles: list[Any] = field(default_factory=list)
    wrapped: list[nn.Module] = field(default_factory=list)

    def use_attention_function(self, strategy: Any, layers: nn.ModuleList) -> None:
        """Route the attention of every layer through the strategy's `transform_probs` (training only)."""
        impl = self.model.config._attn_implementation
        if impl not in SUPPORTED:
            raise ConfigError(f"attention implementation '{impl}' is not supported by the dropout strategies; "
                              f"load the model with attn_implementation='sdpa' or 'eager'")
        for index, layer in enumerate(layers):
            for module in layer.modules():
                _OWNERS[module] = (strategy, index)
                self.owned.append(module)
        self.original_impl = impl
        self.model.set_attn_implementation(_register(impl))

    def pre_hook(self, module: nn.Module, hook: Callable) -> None:
        self.handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))

    def wrap_forward(self, module: nn.Module, make: Callable[[Callable], Callable]) -> None:
        """Replace `module.forward` by `make(original_forward)` on this instance only."""
        module.forward = make(module.forward)
        self.wrapped.append(module)

    def undo(self) -> None:
        for handle in reversed(self.handles):
            handle.remove()
        for module in self.wrapped:
            del module.forward  # the class's forward shows through again
        for module in self.owned:
            _OWNERS.pop(module, None)
        if self.original_impl is not None:
            self.model.set_attn_implementation(self.original_impl)
        self.handles, self.wrapped, self.owned, self.original_impl = [], [], [], None

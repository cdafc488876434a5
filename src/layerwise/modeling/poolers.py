"""Poolers: from every layer's hidden states to one sentence vector. One registry, one class per name.

Inputs everywhere: `hidden_states`, the tuple the backbone returns with output_hidden_states=True
(embedding output first, so L = num_layers + 1), and the (N, T) attention mask.
"""
from __future__ import annotations

import math
from typing import Literal, Sequence

import torch
from torch import nn

from layerwise.errors import ConfigError
from layerwise.registry import POOLERS

Mode = Literal["full", "static", "cls_last", "avg_last"]
MODES: tuple[str, ...] = ("full", "static", "cls_last", "avg_last")


def masked_mean(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of token vectors under the attention mask: (N, T, H), (N, T) -> (N, H)."""
    weights = mask.unsqueeze(-1).to(states.dtype)
    return (states * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


def layer_means(hidden_states: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
    """Per-layer masked means stacked: (N, L, H).

    One (N, 1, T) @ (N, T, H) product per layer: no (N, L, T, H) stack or masked copy is materialised (the
    pooling cost is memory traffic, not arithmetic).
    """
    weights = mask.to(hidden_states[0].dtype)
    row = weights.unsqueeze(1)  # (N, 1, T)
    sums = torch.cat([torch.bmm(row, h) for h in hidden_states], dim=1)  # (N, L, H)
    return sums / weights.sum(1).clamp(min=1e-9)[:, None, None]


def layer_cls(hidden_states: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-layer first-token vectors stacked: (N, L, H)."""
    return torch.stack([h[:, 0] for h in hidden_states], dim=1)


class Pooler(nn.Module):
    """Base class. Subclasses set `name` (via the registry) and implement `pool`.

    `config()` returns the constructor kwargs, so a saved pooler is rebuilt by name + kwargs + weights.
    """

    name: str = ""
    uses_attention: bool = False  # True for poolers with an attention over layers (static mode applies)
    needs_all_layers: bool = True  # False when the last layer alone suffices (the backbone skips the rest)

    def __init__(self, hidden_size: int, num_layers: int) -> None:
        super().__init__()
        self.hidden_size, self.num_layers = hidden_size, num_layers

    def config(self) -> dict:
        return {"hidden_size": self.hidden_size, "num_layers": self.num_layers}

    @property
    def output_dim(self) -> int:
        return self.hidden_size

    def forward(self, hidden_states: Sequence[torch.Tensor], mask: torch.Tensor, mode: str = "full") -> torch.Tensor:
        if mode == "cls_last":
            return hidden_states[-1][:, 0]
        if mode == "avg_last":
            return masked_mean(hidden_states[-1], mask)
        if mode == "static":
            return self.pool_static(hidden_states, mask)
        return self.pool(hidden_states, mask)

    def pool(self, hidden_states: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def pool_static(self, hidden_states: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        raise ConfigError(f"pooler '{self.name}' has no static mode (only attention poolers do)")


@POOLERS.register("cls_last")
class ClsLast(Pooler):
    """The last layer's [CLS] vector."""

    needs_all_layers = False

    def pool(self, hidden_states, mask):
        return hidden_states[-1][:, 0]


@POOLERS.register("avg_last")
class AvgLast(Pooler):
    """The mean of the last layer's token vectors (sentence-transformers' mean pooling)."""

    needs_all_layers = False

    def pool(self, hidden_states, mask):
        return masked_mean(hidden_states[-1], mask)


@POOLERS.register("cls_avg_last")
class ClsAvgLast(Pooler):
    """[CLS last ; AVG last] concatenated: 2H dimensions."""

    @property
    def output_dim(self) -> int:
        return 2 * self.hidden_size

    def pool(self, hidden_states, mask):
        return torch.cat([hidden_states[-1][:, 0], masked_mean(hidden_states[-1], mask)], dim=-1)


@POOLERS.register("avg_first_last")
class AvgFirstLast(Pooler):
    """Mean of the first transformer layer's and the last layer's token means (SimCSE's avg_first_last).

    "First" is hidden_states[1], the first transformer layer, as in current SimCSE (not the embedding output).
    """

    def pool(self, hidden_states, mask):
        return (masked_mean(hidden_states[1], mask) + masked_mean(hidden_states[-1], mask)) / 2


@POOLERS.register("avg_top2")
class AvgTop2(Pooler):
    """Mean of the last two layers' token means."""

    def pool(self, hidden_states, mask):
        return (masked_mean(hidden_states[-2], mask) + masked_mean(hidden_states[-1], mask)) / 2


@POOLERS.register("weighted_layers")
class WeightedLayers(Pooler):
    """A static learned scalar mix of the per-layer means (sentence-transformers' WeightedLayerPooling + mean).

    Weights start at 1 for layers >= layer_start and are normalised by their sum, as in WeightedLayerPooling.
    """

    def __init__(self, hidden_size: int, num_layers: int, layer_start: int = 0) -> None:
        super().__init__(hidden_size, num_layers)
        self.layer_start = layer_start
        self.layer_weights = nn.Parameter(torch.ones(num_layers - layer_start))

    def config(self) -> dict:
        return {**super().config(), "layer_start": self.layer_start}

    def pool(self, hidden_states, mask):
        means = layer_means(hidden_states[self.layer_start:], mask)
        return (self.layer_weights[None, :, None] * means).sum(1) / self.layer_weights.sum()


class LayerAttention(nn.Module):
    """The official LayerAttPooler attention over layers (DESIGN.md section 1).

    K = RReLU(T Wk), V = RReLU(T Wv), q_i = RReLU(Q_i Wq), a_i = softmax(K q_i / scale), o_i = sum_l a_i[l] V_l,
    output O = mean_i o_i. `scale` is the number of layers (official code) or sqrt(H).
    """

    def __init__(self, hidden_size: int, num_layers: int, scale: str = "layers") -> None:
        super().__init__()
        if scale not in ("layers", "sqrt_h"):
            raise ConfigError(f"pooler scale: expected 'layers' or 'sqrt_h', got {scale!r}")
        self.query = nn.Linear(hidden_size, hidden_size, bias=False)
        self.key = nn.Linear(hidden_size, hidden_size, bias=False)
        self.value = nn.Linear(hidden_size, hidden_size, bias=False)
        self.act = nn.RReLU()
        self.divisor = float(num_layers) if scale == "layers" else math.sqrt(hidden_size)
        self.register_buffer("static_weights", torch.full((num_layers,), 1.0 / num_layers))
        self.record: list[torch.Tensor] | None = None  # when a list, forward appends mean layer weights per batch

    def weights(self, queries: torch.Tensor, keys_in: torch.Tensor) -> torch.Tensor:
        """Attention of each query layer over the key layers: (N, Lq, Lk)."""
        q = self.act(self.query(queries))
        k = self.act(self.key(keys_in))
        return torch.softmax(q @ k.transpose(1, 2) / self.divisor, dim=-1)

    def forward(self, queries: torch.Tensor, keys_values: torch.Tensor) -> torch.Tensor:
        attn = self.weights(queries, keys_values)
        if self.record is not None:
            self.record.append(attn.detach().mean(1).sum(0).cpu())
        out = attn @ self.act(self.value(keys_values))  # (N, Lq, H)
        return out.mean(1)

    def static_mix(self, layer_vectors: torch.Tensor) -> torch.Tensor:
        """The frozen corpus-average layer weights applied to raw per-layer vectors: (N, L, H) -> (N, H)."""
        return torch.einsum("l,nlh->nh", self.static_weights.to(layer_vectors.dtype), layer_vectors)


class AttentionPooler(Pooler):
    """Common part of the attention poolers: which vectors are queries and which are keys/values."""

    uses_attention = True
    queries_from: str = "cls"  # "cls" or "avg"
    keys_from: str = "avg"

    def __init__(self, hidden_size: int, num_layers: int, scale: str = "layers") -> None:
        super().__init__(hidden_size, num_layers)
        self.scale = scale
        self.attention = LayerAttention(hidden_size, num_layers, scale)

    def config(self) -> dict:
        return {**super().config(), "scale": self.scale}

    def _vectors(self, hidden_states, mask, source: str) -> torch.Tensor:
        return layer_cls(hidden_states) if source == "cls" else layer_means(hidden_states, mask)

    def attend(self, hidden_states, mask) -> torch.Tensor:
        keys = self._vectors(hidden_states, mask, self.keys_from)
        queries = keys if self.queries_from == self.keys_from else self._vectors(hidden_states, mask, self.queries_from)
        return self.attention(queries, keys)

    def pool(self, hidden_states, mask):
        return self.attend(hidden_states, mask)

    def pool_static(self, hidden_states, mask):
        """A fixed mix of the raw per-layer vectors with the corpus-average attention weights: no attention, no head.

        Equal to sentence-transformers' WeightedLayerPooling (weights = static_weights) + CLS/mean pooling.
        """
        return self.attention.static_mix(self._vectors(hidden_states, mask, self.keys_from))


@POOLERS.register("cls_all_att")
class ClsAllAtt(AttentionPooler):
    """Attention over the per-layer [CLS] vectors (queries, keys and values all CLS)."""

    queries_from, keys_from = "cls", "cls"


@POOLERS.register("avg_all_att")
class AvgAllAtt(AttentionPooler):
    """Attention over the per-layer means (queries, keys and values all means)."""

    queries_from, keys_from = "avg", "avg"


@POOLERS.register("layer_att")
class LayerAtt(AttentionPooler):
    """CLS all + AVG all: per-layer CLS queries attend over per-layer means (the official attention layer)."""

    queries_from, keys_from = "cls", "avg"


@POOLERS.register("layer_att_cls")
class LayerAttCls(LayerAtt):
    """The paper's best: z = Tanh(Linear(2H, H)([cls_L ; O])), O the layer attention output."""

    def __init__(self, hidden_size: int, num_layers: int, scale: str = "layers") -> None:
        super().__init__(hidden_size, num_layers, scale)
        self.mlp = nn.Sequential(nn.Linear(2 * hidden_size, hidden_size), nn.Tanh())

    def pool(self, hidden_states, mask):
        return self.mlp(torch.cat([hidden_states[-1][:, 0], self.attend(hidden_states, mask)], dim=-1))


@POOLERS.register("layer_att_res")
class LayerAttRes(LayerAtt):
    """Ours: z = avg_L + W O with W zero-initialised, so step 0 equals the pretrained mean-pooled embedding."""

    def __init__(self, hidden_size: int, num_layers: int, scale: str = "layers") -> None:
        super().__init__(hidden_size, num_layers, scale)
        self.residual = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.residual.weight)
        nn.init.zeros_(self.residual.bias)

    def pool(self, hidden_states, mask):
        return masked_mean(hidden_states[-1], mask) + self.residual(self.attend(hidden_states, mask))


def build_pooler(name: str, hidden_size: int, num_layers: int, **kwargs) -> Pooler:
    """Instantiate a registered pooler by name (num_layers counts the embedding output)."""
    cls = POOLERS.get(name)
    pooler = cls(hidden_size, num_layers, **kwargs)
    pooler.name = name
    return pooler


def check_mode(pooler: Pooler, mode: str) -> str:
    """Validate an inference mode for a pooler."""
    if mode not in MODES:
        from layerwise.errors import unknown_name

        raise unknown_name("inference mode", mode, MODES)
    if mode == "static" and not pooler.uses_attention:
        raise ConfigError(f"--mode static needs an attention pooler; '{pooler.name}' has none")
    return mode

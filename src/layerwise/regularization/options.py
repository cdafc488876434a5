"""Options of the attention-dropout strategies (the `drop.*` keys of the finetune config)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from layerwise.errors import ConfigError


@dataclass
class DropoutOptions:
    """Every strategy reads the fields it needs; the rest are ignored."""

    rate: float = 0.1  # standard: attention-probability dropout; layerdrop / attn_layerdrop: skip rate per layer
    rates: list[float] = field(default_factory=list)  # scheduled_bernoulli: per-layer rates (one value: every layer)
    final_rates: list[float] = field(default_factory=list)  # scheduled_bernoulli: move linearly to these over training
    pattern: str = ""  # scheduled_bernoulli: a pattern JSON (export-pattern) or an AttendOut run directory
    pattern_which: Literal["last", "overall"] = "last"  # which learned rates a run directory's pattern provides
    # AttendOut
    granularity: Literal["head", "token"] = "head"  # drop probability per (sample, layer, head) or per token pair
    objective: Literal["adversarial", "cooperative"] = "adversarial"
    target_rate: float = 0.1  # budget: the mean drop rate G-Net is held to
    budget_weight: float = 10.0  # weight of the squared distance to the budget
    reversal_weight: float = 1.0  # gradient-reversal coefficient (adversarial objective)
    max_rate: float = 0.9  # no probability above this (keeps the 1/(1-p) rescaling bounded)
    init_rate: float = 0.1  # drop probability of the untrained G-Net
    temperature: float = 0.5  # Gumbel-sigmoid temperature
    gnet_lr: float = 1e-3
    gnet_dim: int = 64
    gnet_heads: int = 2

    def validate(self) -> None:
        for name in ("rate", "target_rate", "init_rate"):
            if not 0 <= getattr(self, name) < 1:
                raise ConfigError(f"drop.{name} must be in [0, 1), got {getattr(self, name)}")
        for name in ("rates", "final_rates"):
            bad = [r for r in getattr(self, name) if not 0 <= r < 1]
            if bad:
                raise ConfigError(f"drop.{name}: every rate must be in [0, 1), got {bad[0]}")
        if not 0 < self.max_rate < 1:
            raise ConfigError(f"drop.max_rate must be in (0, 1), got {self.max_rate}")
        if not self.init_rate < self.max_rate:
            raise ConfigError(f"drop.init_rate ({self.init_rate}) must be below drop.max_rate ({self.max_rate})")
        if self.temperature <= 0 or self.gnet_lr <= 0:
            raise ConfigError("drop.temperature and drop.gnet_lr must be > 0")
        if self.budget_weight < 0 or self.reversal_weight < 0:
            raise ConfigError("drop.budget_weight and drop.reversal_weight must be >= 0")
        if self.gnet_dim <= 0 or self.gnet_heads <= 0 or self.gnet_dim % self.gnet_heads:
            raise ConfigError(f"drop.gnet_dim ({self.gnet_dim}) must be a positive multiple of drop.gnet_heads "
                              f"({self.gnet_heads})")

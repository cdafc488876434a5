"""AttendOut: a generator network (G-Net) learns per-sample, per-layer, per-head attention dropout.

For each layer, G-Net reads the layer's input hidden states (detached: G-Net never changes the model's
representations through its input), runs one small self-attention block over them and outputs drop logits per
head (granularity "head", pooled over tokens) or per token pair (granularity "token"). The drop probability is
p = max_rate * sigmoid(logit). A mask is drawn as a relaxed Bernoulli (Gumbel-sigmoid with a straight-through
hard sample: the forward pass drops exactly, the backward pass sees the soft sample), multiplies the attention
probabilities and rescales the kept ones by 1/(1-p), in training only. In eval mode nothing runs.

Objective (docs/attendout.md): by default adversarial. A gradient-reversal layer sits between G-Net's
probabilities and the mask, so G-Net *raises* the task loss that the model lowers: it learns to drop the
attention the model leans on most. Alone that would drop everything, so a budget holds the mean drop rate near
drop.target_rate: penalty = budget_weight * (mean p - target_rate)^2, which only G-Net's parameters feel. The
alternative ("cooperative") has no reversal: G-Net lowers the task loss under the same budget, so it drops what
the model needs least.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PretrainedConfig

from layerwise.errors import DataError
from layerwise.registry import DROPOUT_STRATEGIES
from layerwise.regularization.attach import Attachment
from layerwise.regularization.base import DropoutStrategy
from layerwise.regularization.options import DropoutOptions

GNET_WEIGHTS, GNET_CONFIG = "gnet.safetensors", "gnet.json"


class GradReverse(torch.autograd.Function):
    """Identity forward; multiplies the gradient by -weight backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: float) -> torch.Tensor:
        ctx.weight = weight
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return -ctx.weight * grad, None


def gumbel_sigmoid_drop(p: torch.Tensor, temperature: float) -> torch.Tensor:
    """A straight-through relaxed Bernoulli(p) sample: exactly 0/1 forward, the soft sample's gradient backward."""
    u = torch.rand_like(p).clamp(1e-6, 1 - 1e-6)
    logits = torch.log(p) - torch.log1p(-p) + torch.log(u) - torch.log1p(-u)
    soft = torch.sigmoid(logits / temperature)
    hard = (soft > 0.5).to(p.dtype)
    return hard + soft - soft.detach()


def key_validity(mask: torch.Tensor | None, batch: int, length: int, device: torch.device) -> torch.Tensor:
    """(batch, length) True where a token is real, from the 4D bool (True: attend) or additive float mask."""
    if mask is None or mask.dim() != 4:
        return torch.ones(batch, length, dtype=torch.bool, device=device)
    row = mask[:, 0, 0, :length]
    return row if row.dtype == torch.bool else row == 0


class GNet(nn.Module):
    """The generator: one self-attention block over a layer's (projected) hidden states, shared by all layers."""

    def __init__(self, hidden_size: int, num_layers: int, num_heads: int, dim: int = 64, attn_heads: int = 2,
                 granularity: str = "head", init_logit: float = 0.0) -> None:
        super().__init__()
        self.settings = dict(hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads, dim=dim,
                             attn_heads=attn_heads, granularity=granularity, init_logit=init_logit)
        self.num_heads, self.granularity = num_heads, granularity
        self.proj = nn.Linear(hidden_size, dim)
        self.layer_embedding = nn.Embedding(num_layers, dim)
        self.attn = nn.MultiheadAttention(dim, attn_heads, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        if granularity == "token":
            self.query = nn.Linear(dim, num_heads * dim, bias=False)
            self.key = nn.Linear(dim, num_heads * dim, bias=False)
            nn.init.zeros_(self.query.weight)  # start: every pair at init_rate; key random so query still learns
            self.bias = nn.Parameter(torch.full((num_heads,), init_logit))
        else:
            self.out = nn.Linear(dim, num_heads)
            nn.init.zeros_(self.out.weight)
            nn.init.constant_(self.out.bias, init_logit)

    def forward(self, hidden: torch.Tensor, valid: torch.Tensor, layer: int) -> torch.Tensor:
        """Drop logits: (batch, heads), or (batch, heads, length, length) for granularity "token"."""
        x = self.proj(hidden) + self.layer_embedding.weight[layer]
        attended, _ = self.attn(x, x, x, key_padding_mask=~valid, need_weights=False)
        x = self.norm(x + attended)
        if self.granularity == "token":
            b, t, d = x.shape
            q = self.query(x).view(b, t, self.num_heads, d).transpose(1, 2)
            k = self.key(x).view(b, t, self.num_heads, d).transpose(1, 2)
            return q @ k.transpose(2, 3) / math.sqrt(d) + self.bias.view(1, -1, 1, 1)
        weights = valid.unsqueeze(-1).to(x.dtype)
        pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1)
        return self.out(pooled)


def save_gnet(gnet: GNet, directory: Path) -> None:
    """Write G-Net's weights and settings into `directory` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in gnet.state_dict().items()}, str(directory / GNET_WEIGHTS))
    (directory / GNET_CONFIG).write_text(json.dumps(gnet.settings, indent=2) + "\n", encoding="utf-8")


def load_gnet(directory: Path) -> GNet:
    """Read a G-Net written by save_gnet."""
    directory = Path(directory)
    if not (directory / GNET_CONFIG).is_file() or not (directory / GNET_WEIGHTS).is_file():
        raise DataError(directory, f"expected {GNET_CONFIG} and {GNET_WEIGHTS} (a G-Net saved by finetune)")
    gnet = GNet(**json.loads((directory / GNET_CONFIG).read_text(encoding="utf-8")))
    gnet.load_state_dict(load_file(str(directory / GNET_WEIGHTS)))
    return gnet


@DROPOUT_STRATEGIES.register("attendout")
class AttendOut(DropoutStrategy):
    """Learned attention dropout (see the module docstring)."""

    name = "attendout"
    per_head = True

    def __init__(self, options: DropoutOptions, config: PretrainedConfig) -> None:
        super().__init__(options, config)
        ratio = options.init_rate / options.max_rate
        self.gnet = GNet(self.hidden_size, self.num_layers, self.num_heads, options.gnet_dim, options.gnet_heads,
                         options.granularity, math.log(ratio) - math.log1p(-ratio))
        self._pending: dict[int, torch.Tensor] = {}
        self._rates: list[torch.Tensor] = []

    def _setup(self, attachment: Attachment, layers: nn.ModuleList) -> None:
        attachment.use_attention_function(self, layers)
        for index, layer in enumerate(layers):
            attachment.pre_hook(layer, self._make_pre_hook(index))

    def _make_pre_hook(self, layer: int):
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            if module.training:
                hidden = args[0] if args else kwargs["hidden_states"]
                mask = args[1] if len(args) > 1 else kwargs.get("attention_mask")
                self.generate(layer, hidden, mask)

        return hook

    def generate(self, layer: int, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Compute (and keep for this layer's attention) the drop probabilities from the layer's input."""
        if layer == 0:
            self._rates, self._pending = [], {}
        b, t, _ = hidden.shape
        valid = key_validity(mask, b, t, hidden.device)
        probs = self.options.max_rate * torch.sigmoid(self.gnet(hidden.detach().float(), valid, layer))
        if probs.dim() == 4:
            weight = (valid[:, None, :, None] & valid[:, None, None, :]).to(probs.dtype)
            per_head = (probs * weight).sum((0, 2, 3)) / weight.sum((0, 2, 3)).clamp(min=1)
        else:
            per_head = probs.mean(0)
        self.meter.add(layer, per_head.detach())
        self._rates.append(per_head.mean())
        self._pending[layer] = probs
        return probs

    def transform_probs(self, layer: int, probs: torch.Tensor) -> torch.Tensor:
        rate = self._pending.pop(layer, None)
        if rate is None:
            return probs
        source = (GradReverse.apply(rate, self.options.reversal_weight) if self.options.objective == "adversarial"
                  else rate)
        keep = 1.0 - gumbel_sigmoid_drop(source, self.options.temperature)
        scale = keep / (1.0 - rate.detach())
        if scale.dim() == 2:
            scale = scale[:, :, None, None]
        return probs * scale.to(probs.dtype)

    def extra_loss(self) -> torch.Tensor | None:
        """The budget penalty on the mean drop rate of the last forward pass (reaches G-Net only)."""
        if not self._rates:
            return None
        mean = torch.stack(self._rates).mean()
        self._rates = []
        return self.options.budget_weight * (mean - self.options.target_rate) ** 2

    def parameter_groups(self) -> list[dict[str, Any]]:
        return [{"params": list(self.gnet.parameters()), "lr": self.options.gnet_lr, "weight_decay": 0.0}]

    def save(self, directory: Path) -> None:
        save_gnet(self.gnet, directory)

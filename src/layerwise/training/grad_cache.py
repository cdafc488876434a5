"""GradCache (Gao et al. 2021): contrastive batches larger than memory allows, with the same gradient.

1. Embed every chunk without a graph, remembering the RNG state before each chunk.
2. Compute the loss on the cached embeddings (as leaves) and backpropagate it to them.
3. Re-embed each chunk with a graph under the same RNG state (same dropout masks) and backpropagate the
   cached embedding gradient through it. Only one chunk's activations are alive at a time.
"""
from __future__ import annotations

from typing import Any, Callable

import torch


def _rng() -> tuple:
    return torch.get_rng_state(), (torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)


def _set_rng(state: tuple) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


def _chunks(ids: torch.Tensor, mask: torch.Tensor, size: int):
    for start in range(0, ids.shape[0], size):
        yield ids[start:start + size], mask[start:start + size]


def grad_cache_step(forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                    inputs: dict[str, tuple[torch.Tensor, torch.Tensor]],
                    loss_fn: Callable[[dict[str, torch.Tensor]], torch.Tensor],
                    chunk_size: int, scale: float = 1.0) -> torch.Tensor:
    """Run forward and backward of `loss_fn(embeddings)` in chunks; returns the (detached) loss.

    Gradients are accumulated into the parameters, scaled by `scale`. A non-finite loss returns before any
    backward, so the caller can stop or skip the batch.
    """
    states: dict[str, list[tuple]] = {}
    cached: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for key, (ids, mask) in inputs.items():
            states[key], parts = [], []
            for chunk_ids, chunk_mask in _chunks(ids, mask, chunk_size):
                states[key].append(_rng())
                parts.append(forward(chunk_ids, chunk_mask))
            cached[key] = torch.cat(parts)
    after_first_pass = _rng()
    leaves = {key: value.detach().requires_grad_() for key, value in cached.items()}
    loss = loss_fn(leaves)
    if not torch.isfinite(loss):
        return loss.detach()
    (loss * scale).backward()
    for key, (ids, mask) in inputs.items():
        grads = leaves[key].grad.split(chunk_size)
        for state, (chunk_ids, chunk_mask), grad in zip(states[key], _chunks(ids, mask, chunk_size), grads):
            _set_rng(state)
            forward(chunk_ids, chunk_mask).backward(grad)
    _set_rng(after_first_pass)
    return loss.detach()


def gradcache_compute_loss(objective: Any, forward: Callable, cfg: Any,
                           chunk_size: int) -> Callable[[Any], torch.Tensor]:
    """A Trainer compute_loss (with manual_backward=True) that runs `objective` through GradCache."""
    scale = 1.0 / cfg.train.grad_accum

    def compute(batch: Any) -> torch.Tensor:
        return grad_cache_step(forward, objective.inputs(batch), lambda z: objective.loss(z, cfg), chunk_size, scale)

    return compute

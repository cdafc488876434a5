"""Distributed contrastive training on torch.distributed (launched by torchrun or accelerate launch).

Every process builds the same global batch from the shared seed and takes its own slice; embeddings are
all-gathered so each process scores its anchors against every in-batch negative. The gather keeps the gradient
for the local shard and sums the other processes' contributions to it in backward, so with DDP's gradient
averaging the update equals one process running the whole global batch.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def launched() -> tuple[int, int]:
    """(rank, world size) as torchrun / accelerate launch set them in the environment; (0, 1) in a plain process."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def init_from_env(device: torch.device) -> DistInfo:
    """Join the process group described by torchrun's environment (WORLD_SIZE, RANK, LOCAL_RANK), if any."""
    if launched()[1] <= 1:
        return DistInfo()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def setup(device_name: str) -> tuple[torch.device, DistInfo]:
    """The training device and process group: joins torchrun's group if launched by it, and gives each process
    its own GPU (LOCAL_RANK) when training on CUDA."""
    from layerwise.modeling.encoder import pick_device

    device = pick_device(device_name)
    info = init_from_env(device)
    if device.type == "cuda" and info.enabled:
        device = torch.device("cuda", info.local_rank)
        torch.cuda.set_device(device)  # nccl's collectives run on the current device
    return device, info


def current() -> DistInfo:
    """The process group of this process (a single process when none is initialised)."""
    if not (dist.is_available() and dist.is_initialized()):
        return DistInfo()
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


_GATHER_GROUP = None


def _gather_group():
    """A process group of its own for the gathers, so they never interleave with DDP's gradient all-reduces."""
    global _GATHER_GROUP
    if _GATHER_GROUP is None:
        _GATHER_GROUP = dist.new_group(backend=dist.get_backend())
    return _GATHER_GROUP


def teardown() -> None:
    """Leave the process group, if any: wait for every process, destroy every group and drop this module's gather
    group, so no gloo group is left for interpreter shutdown to destroy (which can abort the process)."""
    global _GATHER_GROUP
    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()
    dist.destroy_process_group()
    _GATHER_GROUP = None


class _GatherRows(torch.autograd.Function):
    """all_gather along dim 0; backward sums every process's gradient and returns the local rows."""

    @staticmethod
    def forward(ctx, local: torch.Tensor) -> torch.Tensor:
        ctx.rank, ctx.rows = dist.get_rank(), local.shape[0]
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, local.contiguous(), group=_gather_group())
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone().contiguous()  # never reduce autograd's own buffer in place
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=_gather_group())
        return grad[ctx.rank * ctx.rows:(ctx.rank + 1) * ctx.rows]


def gather_rows(local: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(rows of every process concatenated, offset of this process's rows). Identity without a process group."""
    info = current()
    if not info.enabled:
        return local, 0
    return _GatherRows.apply(local), info.rank * local.shape[0]


def shard(items, info: DistInfo):
    """This process's equal slice of a global batch (its length must divide by the world size)."""
    if not info.enabled:
        return items
    size = len(items) // info.world_size
    return items[info.rank * size:(info.rank + 1) * size]


def barrier() -> None:
    if current().enabled:
        dist.barrier()


def mean_across(value: float) -> float:
    """Average a Python number across processes (for logging the global loss)."""
    info = current()
    if not info.enabled:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=_reduce_device())
    dist.all_reduce(tensor)
    return float(tensor) / info.world_size


def any_across(flag: bool) -> bool:
    """True on every process when `flag` is true on any of them."""
    if not current().enabled:
        return flag
    tensor = torch.tensor([1.0 if flag else 0.0], dtype=torch.float64, device=_reduce_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())


def _reduce_device() -> torch.device:
    """Where a small all-reduce's tensor must live: nccl reduces CUDA tensors only."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")

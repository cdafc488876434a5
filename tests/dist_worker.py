"""Worker for the 2-process gloo test (a module of its own so torch.multiprocessing can import it)."""
from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist


def contrastive_grads(model_dir: str, objective: str, triplets, sentences, batch_size: int, grad_cache: int,
                      rank: int = 0, world: int = 1):
    """Loss and pooler+backbone gradients of one step on this process's slice of the global batch."""
    import layerwise
    from layerwise.data.batching import TokenStore
    from layerwise.data.readers import Triplet
    from layerwise.training import distributed
    from layerwise.training.embed import EmbedConfig, EmbedData, _compute_loss, make_batch_source

    torch.manual_seed(0)
    encoder = layerwise.load(model_dir, pooling="layer_att").eval()  # eval: no dropout/RReLU noise to compare
    cfg = EmbedConfig(objective=objective, grad_cache_chunk=grad_cache)
    cfg.train.batch_size = batch_size
    data = EmbedData([Triplet(*t) for t in triplets], list(sentences))
    info = distributed.current()
    make_batches, _ = make_batch_source(data, TokenStore(encoder.tokenizer, data.texts(), 32), cfg, info)
    batch = next(iter(make_batches(0)))
    compute = _compute_loss(cfg, encoder, info)  # keep it (and its DDP wrapper) alive through backward
    loss = compute(batch)
    if not grad_cache:
        loss.backward()
    grads = {n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None}
    del compute
    return distributed.mean_across(float(loss.detach())), grads


def worker(rank: int, world: int, init_file: str, out_dir: str, args: tuple) -> None:
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        loss, grads = contrastive_grads(*args, rank=rank, world=world)
        torch.save({"loss": loss, "grads": grads}, Path(out_dir) / f"rank{rank}.pt")
    finally:
        from layerwise.training import distributed

        distributed.teardown()


def reproduce_failing_on_rank1(argv: list[str]) -> int:
    """`layerwise <argv[1:]>` with the pooling grid's training raising on rank 1 only, after the run's training
    (its collectives done), for the runs whose directory name contains argv[0]."""
    from layerwise.cli import main
    from layerwise.reproduce.pooling import PoolingGrid

    marker, *rest = argv
    train = PoolingGrid.train

    def failing(self, spec, run_dir: Path, resume: bool) -> None:
        train(self, spec, run_dir, resume)
        if dist.get_rank() == 1 and marker in run_dir.name:
            raise RuntimeError("injected failure on rank 1")

    PoolingGrid.train = failing
    return main(rest)


def sigterm_on_rank1(argv: list[str]) -> int:
    """`layerwise <argv[1:]>` with rank 1 alone sent SIGTERM right after optimizer step int(argv[0])."""
    import signal

    from layerwise.cli import main
    from layerwise.training.loop import Trainer
    from test_reliability_helpers import after_optimizer_step

    def signal_rank1(_) -> None:
        if dist.get_rank() == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    at, *rest = argv
    Trainer._optimizer_step = after_optimizer_step(int(at), signal_rank1)
    return main(rest)


if __name__ == "__main__":  # torchrun tests/dist_worker.py [--sigterm-rank1-at STEP | MARKER] COMMAND ...
    import sys

    if sys.argv[1] == "--sigterm-rank1-at":
        sys.exit(sigterm_on_rank1(sys.argv[2:]))
    sys.exit(reproduce_failing_on_rank1(sys.argv[1:]))

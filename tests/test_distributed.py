"""Distributed contrastive training (2 CPU processes, gloo) and GradCache equal the single-process big batch."""
from __future__ import annotations

import random

import pytest
import torch
import torch.multiprocessing as mp

from dist_worker import contrastive_grads, worker
from tiny import WORDS

rng = random.Random(0)
TRIPLETS = [tuple(" ".join(rng.sample(WORDS, 5)) for _ in range(3)) for _ in range(8)]
SENTENCES = [" ".join(rng.sample(WORDS, 6)) for _ in range(8)]


def _assert_same(reference, other):
    loss_a, grads_a = reference
    loss_b, grads_b = other
    assert loss_b == pytest.approx(loss_a, rel=1e-5)
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], atol=2e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("objective", ["supervised", "unsupervised", "hybrid"])
def test_grad_cache_equals_plain_backward(tiny_bert, objective):
    plain = contrastive_grads(str(tiny_bert), objective, TRIPLETS, SENTENCES, 8, grad_cache=0)
    cached = contrastive_grads(str(tiny_bert), objective, TRIPLETS, SENTENCES, 8, grad_cache=3)
    _assert_same(plain, cached)


@pytest.mark.parametrize("objective,grad_cache", [("supervised", 0), ("hybrid", 0), ("supervised", 2)])
def test_two_gloo_processes_equal_one_process_with_the_doubled_batch(tiny_bert, tmp_path, objective, grad_cache):
    single = contrastive_grads(str(tiny_bert), objective, TRIPLETS, SENTENCES, 8, grad_cache=0)
    args = (str(tiny_bert), objective, TRIPLETS, SENTENCES, 4, grad_cache)
    mp.spawn(worker, args=(2, str(tmp_path / "init"), str(tmp_path), args), nprocs=2, join=True)
    for rank in (0, 1):
        result = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        _assert_same(single, (result["loss"], result["grads"]))

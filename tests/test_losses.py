"""InfoNCE against a hand computation on small tensors."""
from __future__ import annotations

import math

import pytest
import torch

from layerwise.losses import info_nce


def _cos(u, v):
    return float(u @ v / (u.norm() * v.norm()))


def _hand_info_nce(anchors, positives, negatives, t, w):
    total = 0.0
    for i, a in enumerate(anchors):
        logits = [_cos(a, p) / t for p in positives]
        if negatives is not None:
            logits += [_cos(a, n) / t + (w if j == i else 0.0) for j, n in enumerate(negatives)]
        total += -logits[i] + math.log(sum(math.exp(x) for x in logits))
    return total / len(anchors)


@pytest.mark.parametrize("with_negatives,weight", [(False, 0.0), (True, 0.0), (True, 1.0)])
def test_info_nce_matches_hand_computation(with_negatives, weight):
    anchors = torch.tensor([[1.0, 0.0], [0.6, 0.8], [-1.0, 0.5]])
    positives = torch.tensor([[0.9, 0.1], [0.5, 0.9], [-0.8, 0.3]])
    negatives = torch.tensor([[0.0, 1.0], [1.0, -1.0], [0.3, 0.3]]) if with_negatives else None
    t = 0.5
    got = info_nce(anchors, positives, negatives, temperature=t, hard_negative_weight=weight)
    assert float(got) == pytest.approx(_hand_info_nce(anchors, positives, negatives, t, weight), rel=1e-5)


def test_perfect_alignment_has_lower_loss_than_random():
    torch.manual_seed(0)
    z = torch.randn(8, 16)
    assert info_nce(z, z.clone()) < info_nce(z, torch.randn(8, 16))

"""Contrastive objectives as pure functions of embeddings (testable without a model)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """All-pairs cosine similarity: (N, H), (M, H) -> (N, M)."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def info_nce(anchors: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor | None = None,
             temperature: float = 0.05, hard_negative_weight: float = 0.0) -> torch.Tensor:
    """InfoNCE with in-batch negatives (SimCSE): logits [sim(a, p) | sim(a, n)] / t, label = diagonal.

    `hard_negative_weight` is added to each anchor's logit for its own hard negative (SimCSE: 0; the official
    LayerAttPooler code: 1.0). `positives` and `negatives` may hold more rows than `anchors` (all-gathered
    across processes); anchor i's positive is row `offset + i` where offset = rank * N (see distributed code),
    here 0.
    """
    return info_nce_offset(anchors, positives, negatives, temperature, hard_negative_weight, offset=0)


def info_nce_offset(anchors: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor | None,
                    temperature: float, hard_negative_weight: float, offset: int) -> torch.Tensor:
    """InfoNCE where anchor i's positive (and hard negative) is candidate row offset + i."""
    logits = cosine_matrix(anchors, positives) / temperature
    labels = torch.arange(anchors.shape[0], device=anchors.device) + offset
    if negatives is not None:
        neg_logits = cosine_matrix(anchors, negatives) / temperature
        if hard_negative_weight:
            bonus = torch.zeros_like(neg_logits)
            bonus[torch.arange(anchors.shape[0]), labels] = hard_negative_weight
            neg_logits = neg_logits + bonus
        logits = torch.cat([logits, neg_logits], dim=1)
    return F.cross_entropy(logits, labels)

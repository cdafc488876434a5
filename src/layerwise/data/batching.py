"""Tokenise once, then build padded batches from token-id lists (deterministic per seed and epoch)."""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import torch

from layerwise.modeling.encoder import count_truncated, warn_truncated


class TokenStore:
    """Token ids of every distinct text, tokenised once (no padding), looked up by text."""

    def __init__(self, tokenizer, texts: Sequence[str], max_length: int, chunk: int = 4096) -> None:
        self.index: dict[str, int] = {}
        for text in texts:
            self.index.setdefault(text, len(self.index))
        unique = list(self.index)
        self.ids: list[list[int]] = []
        truncated = 0
        for start in range(0, len(unique), chunk):
            encoded = tokenizer(unique[start:start + chunk], truncation=True, max_length=max_length)
            self.ids.extend(encoded["input_ids"])
            truncated += count_truncated(encoded)
        warn_truncated(truncated, len(unique), max_length)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def collate(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Right-padded input_ids and attention_mask for these texts."""
        rows = [self.ids[self.index[t]] for t in texts]
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": mask}


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int, min_size: int = 2) -> Iterator[np.ndarray]:
    """Shuffled index batches for one epoch; a last batch smaller than `min_size` is dropped."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    for start in range(0, n, batch_size):
        chunk = order[start:start + batch_size]
        if len(chunk) >= min_size:
            yield chunk


def count_batches(n: int, batch_size: int, min_size: int = 2) -> int:
    full, rest = divmod(n, batch_size)
    return full + (1 if rest >= min_size else 0)

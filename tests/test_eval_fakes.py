"""A deterministic bag-of-words hashing encoder for evaluation tests (no model needed)."""
from __future__ import annotations

import re
import zlib

import numpy as np


class HashEncoder:
    """Encode a text as counts of its hashed lower-case words; records every call."""

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls: list[list[str]] = []

    def encode(self, texts, batch_size: int = 64, normalize: bool = False, show_progress: bool = False, **kwargs):
        texts = [texts] if isinstance(texts, str) else list(texts)
        self.calls.append(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, zlib.crc32(word.encode()) % self.dim] += 1.0
            out[row, self.dim - 1] += 0.5  # no all-zero rows
        if normalize:
            out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


def test_hash_encoder_is_deterministic():
    a = HashEncoder().encode(["a b", "c"])
    b = HashEncoder().encode(["a b", "c"], task_name="x")
    assert a.shape == (2, 64) and np.array_equal(a, b)

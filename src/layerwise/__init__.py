"""layerwise: more out of every layer of a pretrained transformer."""
from __future__ import annotations

__version__ = "0.1.0"


def load(name_or_path: str, pooling: str | None = None, mode: str | None = None, **kwargs):
    """Load a sentence encoder (see layerwise.modeling.encoder.load)."""
    from layerwise.modeling.encoder import load as _load

    return _load(name_or_path, pooling=pooling, mode=mode, **kwargs)


__all__ = ["load", "__version__"]

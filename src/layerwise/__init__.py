"""layerwise: more out of every layer of a pretrained transformer."""
from __future__ import annotations

__version__ = "0.1.0"

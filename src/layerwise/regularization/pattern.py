"""Learned drop-rate patterns: drop_pattern.json in a run directory, and the per-layer rates export-pattern writes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from layerwise.errors import DataError

RUN_PATTERN = "drop_pattern.json"


def read_json(path: Path) -> Any:
    if not path.is_file():
        raise DataError(path, "file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(path, f"not valid JSON ({exc})") from None


def read_pattern_rates(source: str | Path, which: str = "last") -> list[float]:
    """Per-layer rates from an exported pattern file ({"rates": [...]}) or from a run directory's drop_pattern.json."""
    path = Path(source)
    if path.is_dir():
        path = path / RUN_PATTERN
    data = read_json(path)
    key = "rates" if isinstance(data, dict) and "rates" in data else which
    rates = data.get(key) if isinstance(data, dict) else None
    if not isinstance(rates, list) or not rates:
        raise DataError(path, f"expected a JSON object with a non-empty list '{key}' of per-layer rates")
    if any(not isinstance(r, (int, float)) or isinstance(r, bool) or not 0 <= r < 1 for r in rates):
        raise DataError(path, f"'{key}': every rate must be a number in [0, 1) (a layer never observed has null)")
    return [float(r) for r in rates]

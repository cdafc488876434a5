"""Files written whole or not at all: a temporary file beside the target, renamed over it when complete."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable


def atomic_write(path: Path, write: Callable[[Path], Any]) -> None:
    """Call write(tmp) on a temporary file beside path, then rename it over path (removed again on failure)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix or ".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 -> what open() would have given
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: Path, text: str) -> None:
    """Write a text file atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (indented, trailing newline)."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")

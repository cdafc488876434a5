"""Resumable checkpoints written atomically: a temporary directory renamed into place.

A checkpoint holds the model weights (safetensors), optimizer and scheduler states (torch.save, read back with
weights_only=True), the RNG states and the position in the data, so a resumed run continues exactly.
"""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.json"


def rng_state() -> dict[str, Any]:
    state = {
        "python": _jsonable(random.getstate()),
        "numpy": _jsonable(np.random.get_state()),
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(_tuples(state["python"]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    return value


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def atomic_dir(target: Path) -> Path:
    """A fresh temporary sibling directory; call `commit_dir(tmp, target)` when it is complete."""
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def commit_dir(tmp: Path, target: Path) -> None:
    """Replace `target` by the completed `tmp` (the old one is removed only after the new one is in place)."""
    old = target.with_name(target.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    if old.exists():
        shutil.rmtree(old)


def save_checkpoint(directory: Path, model: torch.nn.Module, optimizer: Any, scheduler: Any, state: dict[str, Any],
                    stateful: dict[str, Any]) -> None:
    from safetensors.torch import save_model

    tmp = atomic_dir(directory)
    save_model(model, str(tmp / "model.safetensors"))
    extra = {name: obj.state_dict() for name, obj in stateful.items()}
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "extra": extra},
               tmp / "optimizer.pt")
    (tmp / STATE_FILE).write_text(json.dumps({**state, "rng": rng_state()}), encoding="utf-8")
    commit_dir(tmp, directory)


def load_checkpoint(directory: Path, model: torch.nn.Module, optimizer: Any, scheduler: Any,
                    stateful: dict[str, Any]) -> dict[str, Any]:
    from safetensors.torch import load_model

    load_model(model, str(directory / "model.safetensors"), device=str(next(model.parameters()).device))
    blob = torch.load(directory / "optimizer.pt", map_location="cpu", weights_only=True)
    optimizer.load_state_dict(blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    for name, obj in stateful.items():
        obj.load_state_dict(blob["extra"][name])
    state = json.loads((directory / STATE_FILE).read_text(encoding="utf-8"))
    set_rng_state(state.pop("rng"))
    return state


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints under root, oldest first (temporary ones are ignored)."""
    if not root.is_dir():
        return []
    found = [p for p in root.glob("step-*") if p.is_dir() and p.name[5:].isdigit() and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name[5:]))


def prune_checkpoints(root: Path, keep: int) -> None:
    for old in list_checkpoints(root)[:-keep] if keep > 0 else list_checkpoints(root):
        shutil.rmtree(old)

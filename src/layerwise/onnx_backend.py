"""Run an exported ONNX encoder (layerwise export --format onnx) with onnxruntime.

`layerwise.load(path, backend="onnx")` returns an OnnxEncoder: the same `encode(texts, batch_size=, normalize=)`
API as SentenceEncoder, tokenising with the tokenizer saved beside the graph. The graph holds backbone, pooler
and normalisation; it has two outputs, the raw embedding and its L2-normalised copy, and encode fetches one.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from layerwise.errors import ConfigError, LayerwiseError, unknown_name

ONNX_META = "layerwise_onnx.json"
VARIANTS = {"fp32": "model.onnx", "optimized": "model_optimized.onnx", "int8": "model_int8.onnx"}


class OnnxEncoder:
    """An exported encoder on onnxruntime. `variant`: fp32 (default), optimized or int8, or a file name."""

    def __init__(self, directory: str | os.PathLike, variant: str | None = None, threads: int | None = None,
                 providers: Sequence[str] | None = None) -> None:
        import onnxruntime as ort
        from transformers import AutoTokenizer

        self.directory = Path(directory)
        meta_path = self.directory / ONNX_META
        if not meta_path.is_file():
            raise LayerwiseError(f"{directory}: no {ONNX_META} "
                                 "(expected the output of `layerwise export --format onnx`)")
        self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
        name = self.meta.get("default", VARIANTS["fp32"]) if variant is None else VARIANTS.get(variant, variant)
        path = self.directory / name
        if not path.is_file():
            available = [k for k, v in VARIANTS.items() if (self.directory / v).is_file()]
            raise LayerwiseError(f"{path}: not found (variants here: {', '.join(available) or 'none'})")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            options.intra_op_num_threads = int(threads)
        self.session = ort.InferenceSession(str(path), options, providers=list(providers or ["CPUExecutionProvider"]))
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.directory))
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.max_length = int(self.meta.get("max_length", 128))
        self.mode = self.meta.get("mode", "full")
        self.pooler_name = self.meta.get("pooler")
        self.embedding_dim = (int(self.meta["dim"]) if "dim" in self.meta
                              else int(self.session.get_outputs()[0].shape[-1]))
        self.file = path.name

    def tokenize(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        tokens = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length,
                                return_tensors="np")
        return {n: tokens[n].astype(np.int64) for n in self.input_names}

    def encode(self, sentences: Sequence[str] | str, batch_size: int = 64, normalize: bool = False,
               show_progress: bool = False, **kwargs: Any) -> np.ndarray:
        """Embed sentences in length-sorted batches, returned in input order (float32, (N, dim)).

        Extra keyword arguments (MTEB passes task_name, prompt_type, ...) are accepted and ignored.
        """
        from tqdm.auto import tqdm

        if isinstance(sentences, str):
            sentences = [sentences]
        sentences = list(sentences)
        output = "normalized_embedding" if normalize else "embedding"
        order = np.argsort([-len(s) for s in sentences], kind="stable")
        result = np.empty((len(sentences), self.embedding_dim), dtype=np.float32)
        for start in tqdm(range(0, len(sentences), batch_size), desc="encode", disable=not show_progress,
                          unit="batch"):
            index = order[start:start + batch_size]
            result[index] = self.session.run([output], self.tokenize([sentences[i] for i in index]))[0]
        return result

    def __repr__(self) -> str:
        return (f"OnnxEncoder({str(self.directory)!r}, file={self.file!r}, "
                f"pooler={self.pooler_name!r}, mode={self.mode!r})")


def load_onnx(name_or_path: str, pooling: str | None = None, mode: str | None = None, variant: str | None = None,
              threads: int | None = None, device: str = "cpu", **ignored: Any) -> OnnxEncoder:
    """Load an exported ONNX encoder. The pooler and mode are fixed in the graph: asking for others is an error."""
    if device not in ("cpu", "auto"):
        raise ConfigError(f"backend onnx: device {device!r} is not supported here (CPU only)")
    encoder = OnnxEncoder(name_or_path, variant=variant, threads=threads)
    if pooling is not None and pooling != encoder.pooler_name:
        raise ConfigError(f"{name_or_path}: the ONNX graph holds pooler '{encoder.pooler_name}', not '{pooling}'")
    if mode is not None and mode != encoder.mode:
        raise ConfigError(f"{name_or_path}: the ONNX graph was exported in mode '{encoder.mode}', not '{mode}' "
                          "(export again with --mode)")
    return encoder


BACKENDS = ("torch", "onnx")


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise unknown_name("backend", backend, BACKENDS)
    return backend


__all__ = ["OnnxEncoder", "load_onnx", "BACKENDS"]

"""Export a saved layerwise model (RUN/best) to a sentence-transformers folder or to one ONNX graph.

sentence-transformers: `SentenceTransformer(OUT)` gives the same embeddings as layerwise. Whatever sentence-
transformers' own modules express exactly is written with them, so loading needs no layerwise:

| pooler / mode                                | modules                                                   |
|----------------------------------------------|-----------------------------------------------------------|
| any pooler, mode cls_last / avg_last         | Transformer + Pooling(cls / mean)                         |
| full: cls_last, avg_last, cls_avg_last       | Transformer + Pooling(cls / mean / (cls, mean))           |
| full: avg_first_last, avg_top2, weighted_layers | Transformer + WeightedLayerPooling + Pooling(mean)     |
| attention pooler, mode static                | Transformer + WeightedLayerPooling(static) + Pooling(*)   |
| attention pooler, mode full                  | Transformer + layerwise.st.LayerAttentionPooling          |

(*) cls for cls_all_att, else mean. The mix is linear, so pooling a weighted mix of layers equals mixing the
pooled layers; WeightedLayerPooling divides by the sum of its weights, which is 1 for calibrated static weights
(corpus averages of softmax rows).
The folder also keeps layerwise's own pooler files, so `layerwise.load(OUT)` restores the exact pooler.

onnx: the whole encoder (backbone, pooler in its mode, and an L2-normalised second output) in one graph with
dynamic batch and sequence axes, checked with onnxruntime against PyTorch; optional graph optimisation
(ORT_ENABLE_ALL, saved as model_optimized.onnx) and dynamic int8 quantisation (model_int8.onnx).
"""
from __future__ import annotations

import json
import logging
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from layerwise.errors import ConfigError, LayerwiseError, unknown_name
from layerwise.modeling import poolers as P
from layerwise.modeling.backbone import _SHORT_NAMES, resolve_model_path

FORMATS = ("sentence-transformers", "onnx")
QUANTIZE = ("int8",)
ONNX_META = "layerwise_onnx.json"
ONNX_FILE, ONNX_OPTIMIZED, ONNX_INT8 = "model.onnx", "model_optimized.onnx", "model_int8.onnx"
ONNX_OUTPUTS = ("embedding", "normalized_embedding")
CHECK_SENTENCES = (
    "A man is playing a guitar in the park with two young children.",
    "a dog",
    "Three people are eating food at a table.",
    "The sun is not very red.",
    "yes",
)


# ----------------------------------------------------------------------------------------------- input / output
def load_source(model: str, mode: str | None = None, device: str = "cpu"):
    """The layerwise encoder to export: a model directory (RUN/best, a sentence-transformers folder) or the
    default model's short name."""
    import layerwise

    if model.lower() not in _SHORT_NAMES and not Path(model).expanduser().is_dir():
        raise LayerwiseError(f"{model}: no such model directory")
    return layerwise.load(model, mode=mode, device=device)


def check_output(out: Path, overwrite: bool, source: str | None = None) -> None:
    """Refuse a non-empty output directory unless --overwrite; never let --overwrite delete the source."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise LayerwiseError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise LayerwiseError(f"{out}: directory exists and is not empty (pass --overwrite to replace it)")
    if source is not None and Path(source).expanduser().exists():
        src, dst = Path(source).expanduser().resolve(), out.resolve()
        if dst == src or dst in src.parents or src in dst.parents:
            raise LayerwiseError(f"{out}: output directory overlaps the model directory {source}")


class _Staging:
    """Write into a temporary sibling directory; move it into place only when everything succeeded."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)

    def __enter__(self) -> Path:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.", dir=self.out.parent))
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        if self.out.exists():
            shutil.rmtree(self.out)
        self.tmp.rename(self.out)


# ----------------------------------------------------------------------------------------- sentence-transformers
def native_plan(pooler: P.Pooler, mode: str) -> tuple[list[float] | None, int, str | tuple[str, ...]] | None:
    """How sentence-transformers' own modules compute this pooler in this mode: (WeightedLayerPooling weights or
    None, its layer_start, Pooling mode), or None when only LayerAttentionPooling can."""
    layers = pooler.num_layers
    kind = type(pooler)
    if mode == "cls_last" or (mode == "full" and kind is P.ClsLast):
        return None, 0, "cls"
    if mode == "avg_last" or (mode == "full" and kind is P.AvgLast):
        return None, 0, "mean"
    if mode == "static" and isinstance(pooler, P.AttentionPooler):
        weights = pooler.attention.static_weights.detach().cpu().double().tolist()
        return weights, 0, ("cls" if pooler.keys_from == "cls" else "mean")
    if mode != "full":
        return None
    if kind is P.ClsAvgLast:
        return None, 0, ("cls", "mean")
    if kind in (P.AvgFirstLast, P.AvgTop2):
        weights = [0.0] * layers
        for index in ((1, layers - 1) if kind is P.AvgFirstLast else (layers - 2, layers - 1)):
            weights[index] += 1.0
        return weights, 0, "mean"
    if kind is P.WeightedLayers:
        return pooler.layer_weights.detach().cpu().double().tolist(), pooler.layer_start, "mean"
    return None


def st_modules(encoder, backbone_dir: str, native: bool = True) -> list:
    """The sentence-transformers modules that reproduce `encoder` (its pooler in its mode)."""
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer, WeightedLayerPooling

    from layerwise.modeling.backbone import quiet_transformers
    from layerwise.st import LayerAttentionPooling

    pooler, mode = encoder.pooler, encoder.mode
    plan = native_plan(pooler, mode) if native else None
    if plan is None:  # LayerAttentionPooling reads all hidden states unless the mode needs the last layer only
        needs_layers = mode == "static" or (mode == "full" and pooler.needs_all_layers)
    else:  # WeightedLayerPooling reads them
        needs_layers = plan[0] is not None
    with quiet_transformers():
        transformer = Transformer(backbone_dir, max_seq_length=encoder.max_length,
                                  config_kwargs={"output_hidden_states": True} if needs_layers else {})
    hidden = pooler.hidden_size
    if plan is None:
        return [transformer, LayerAttentionPooling.from_pooler(pooler, mode)]
    weights, layer_start, pooling_mode = plan
    modules = [transformer]
    if weights is not None:
        if mode == "static" and abs(sum(weights) - 1.0) > 1e-4:
            raise LayerwiseError(f"static weights sum to {sum(weights):.6f}, not 1: recalibrate the model "
                                 "(SentenceEncoder.calibrate_static) before exporting")
        modules.append(WeightedLayerPooling(hidden, num_hidden_layers=pooler.num_layers - 1, layer_start=layer_start,
                                            layer_weights=torch.nn.Parameter(
                                                torch.tensor(weights, dtype=torch.float32))))
    modules.append(Pooling(hidden, pooling_mode=pooling_mode))
    return modules


def export_sentence_transformers(encoder, backbone_dir: str, out: Path, native: bool = True) -> dict:
    """Write a sentence-transformers folder (plus layerwise's pooler files) into `out` (which must exist)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(modules=st_modules(encoder, backbone_dir, native), device="cpu")
    model.save(str(out), create_model_card=False)
    _write_layerwise_pooler(encoder, out)
    with open(out / "modules.json", encoding="utf-8") as f:
        types = [m["type"] for m in json.load(f)]
    return {"modules": types, "needs_layerwise": any(t.startswith("layerwise.") for t in types)}


def _write_layerwise_pooler(encoder, out: Path) -> None:
    """layerwise's own pooler config and weights, so `layerwise.load(OUT)` restores the pooler exactly."""
    from safetensors.torch import save_file

    from layerwise.modeling.encoder import POOLER_CONFIG, POOLER_WEIGHTS

    meta = {"pooler": encoder.pooler.name, "pooler_kwargs": encoder.pooler.config(), "mode": encoder.mode,
            "max_length": encoder.max_length}
    state = {k: v.detach().cpu().contiguous() for k, v in encoder.pooler.state_dict().items()}
    if state:
        save_file(state, str(out / POOLER_WEIGHTS))
    (out / POOLER_CONFIG).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def load_sentence_transformer(path: str | Path, device: str = "cpu"):
    """Load an exported folder with sentence-transformers. Folders with layerwise.st modules need
    trust_remote_code=True in sentence-transformers 6 (it imports classes outside its namespace only then);
    native folders are loaded without it."""
    from sentence_transformers import SentenceTransformer

    modules = json.loads((Path(path) / "modules.json").read_text(encoding="utf-8"))
    trust = any(not m["type"].startswith("sentence_transformers.") for m in modules)
    return SentenceTransformer(str(path), device=device, trust_remote_code=trust)


def verify_sentence_transformers(encoder, out: Path, sentences: Sequence[str] = CHECK_SENTENCES) -> float:
    """Max abs difference between sentence-transformers' and layerwise's embeddings of `sentences`."""
    model = load_sentence_transformer(out)
    theirs = model.encode(list(sentences), convert_to_numpy=True, batch_size=4)
    ours = encoder.encode(list(sentences), batch_size=4)
    return float(np.abs(theirs - ours).max())


# ------------------------------------------------------------------------------------------------------ onnx
class _OnnxGraph(torch.nn.Module):
    """The encoder as positional-input module: (input_ids, attention_mask[, token_type_ids]) -> (z, z/|z|)."""

    def __init__(self, encoder, input_names: Sequence[str]) -> None:
        super().__init__()
        self.encoder, self.input_names = encoder, tuple(input_names)

    def forward(self, *inputs: torch.Tensor):
        z = self.encoder(**dict(zip(self.input_names, inputs)))
        return z, torch.nn.functional.normalize(z, dim=-1)


def onnx_input_names(encoder) -> list[str]:
    """input_ids and attention_mask, plus token_type_ids when the tokenizer makes them and the model takes them."""
    import inspect

    produced = set(encoder.tokenize(["a"]).keys())
    accepted = set(inspect.signature(encoder.backbone.forward).parameters)
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in produced and "token_type_ids" in accepted:
        names.append("token_type_ids")
    return names


def export_onnx(encoder, out: Path, *, opset: int = 17, optimize: bool = False, quantize: str | None = None,
                per_channel: bool = False, atol: float = 1e-4) -> dict:
    """Write model.onnx (+ tokenizer, metadata) into `out`; verify it with onnxruntime; optionally optimise and
    quantise. Raises LayerwiseError when onnxruntime's output differs from PyTorch's by more than `atol`."""
    if quantize is not None and quantize not in QUANTIZE:
        raise unknown_name("quantisation", quantize, QUANTIZE)
    encoder = encoder.to("cpu").eval()
    names = onnx_input_names(encoder)
    sample = encoder.tokenize(list(CHECK_SENTENCES[:2]))  # padded: the traced graph keeps the masking path
    args = tuple(sample[n] for n in names)
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes.update({n: {0: "batch"} for n in ONNX_OUTPUTS})
    path = out / ONNX_FILE
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(_OnnxGraph(encoder, names).eval(), args, str(path), input_names=names,
                          output_names=list(ONNX_OUTPUTS), dynamic_axes=axes, opset_version=opset,
                          do_constant_folding=True, dynamo=False)
    encoder.tokenizer.save_pretrained(str(out))
    report: dict[str, Any] = {"files": {"fp32": ONNX_FILE}}
    report["max_abs_diff"] = max_abs_diff_onnx(encoder, path, names)
    if report["max_abs_diff"] > atol:
        raise LayerwiseError(f"ONNX output differs from PyTorch by {report['max_abs_diff']:.2e} (> {atol:g})")
    if optimize:
        optimize_onnx(path, out / ONNX_OPTIMIZED)
        report["files"]["optimized"] = ONNX_OPTIMIZED
        report["max_abs_diff_optimized"] = max_abs_diff_onnx(encoder, out / ONNX_OPTIMIZED, names)
        if report["max_abs_diff_optimized"] > atol:
            raise LayerwiseError("optimised ONNX output differs from PyTorch by "
                                 f"{report['max_abs_diff_optimized']:.2e}")
    if quantize == "int8":
        quantize_int8(path, out / ONNX_INT8, per_channel=per_channel)
        report["files"]["int8"] = ONNX_INT8
        report["max_abs_diff_int8"] = max_abs_diff_onnx(encoder, out / ONNX_INT8, names)  # reported, not enforced
    meta = {"format": "onnx", "inputs": names, "outputs": list(ONNX_OUTPUTS), "files": report["files"],
            "default": ONNX_FILE, "pooler": encoder.pooler.name, "pooler_kwargs": encoder.pooler.config(),
            "mode": encoder.mode, "max_length": encoder.max_length, "dim": int(encoder.embedding_dim),
            "opset": opset, "max_abs_diff": report["max_abs_diff"], "int8_per_channel": per_channel}
    (out / ONNX_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return report


def max_abs_diff_onnx(encoder, path: Path, names: Sequence[str]) -> float:
    """Run onnxruntime and PyTorch on batches other than the traced one (other batch size and lengths, one
    unpadded sentence alone) and return the largest difference over both outputs."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for batch in (list(CHECK_SENTENCES), [CHECK_SENTENCES[0]], list(CHECK_SENTENCES[2:4])):
        tokens = encoder.tokenize(batch)
        feeds = {n: tokens[n].numpy() for n in names}
        got = session.run(list(ONNX_OUTPUTS), feeds)
        with torch.no_grad():
            z = encoder(**{n: tokens[n] for n in names})
            want = (z.numpy(), torch.nn.functional.normalize(z, dim=-1).numpy())
        worst = max(worst, *(float(np.abs(g - w).max()) for g, w in zip(got, want)))
    return worst


def optimize_onnx(src: Path, dst: Path) -> None:
    """onnxruntime's graph optimisations (ORT_ENABLE_ALL), saved to `dst`. The optimised graph may use fused
    operators of onnxruntime's CPU provider: run it with onnxruntime on a similar machine."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(dst)
    options.log_severity_level = 3  # its note: an ORT_ENABLE_ALL graph is for the same kind of machine
    ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])


def quantize_int8(src: Path, dst: Path, per_channel: bool = False) -> None:
    """Dynamic int8 quantisation of the weights of MatMul/Gemm (onnxruntime.quantization.quantize_dynamic)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_dynamic logs a pre-processing advice through the root logger
    try:
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=per_channel)
    finally:
        root.setLevel(level)


# ---------------------------------------------------------------------------------------------------- driver
def export(model: str, out: str | Path, fmt: str, *, mode: str | None = None, overwrite: bool = False,
           native: bool = True, verify: bool = True, optimize: bool = False, quantize: str | None = None,
           per_channel: bool = False, opset: int = 17, command: str = "", base_model: str | None = None) -> dict:
    """Export `model` (a saved model directory) to `out` in format `fmt`; return a report dict."""
    from layerwise.model_card import read_card_inputs, write_model_card

    if fmt not in FORMATS:
        raise unknown_name("export format", fmt, FORMATS)
    if quantize is not None and fmt != "onnx":
        raise ConfigError("--quantize applies to --format onnx only")
    if optimize and fmt != "onnx":
        raise ConfigError("--optimize applies to --format onnx only")
    if quantize is not None and quantize not in QUANTIZE:
        raise unknown_name("quantisation", quantize, QUANTIZE)
    out = Path(out)
    check_output(out, overwrite, model)
    encoder = load_source(model, mode=mode)
    report: dict[str, Any] = {"format": fmt, "pooler": encoder.pooler.name, "mode": encoder.mode, "output": str(out)}
    with _Staging(out) as tmp:
        if fmt == "sentence-transformers":
            report.update(export_sentence_transformers(encoder, resolve_model_path(model), tmp, native=native))
            if verify:
                report["max_abs_diff"] = verify_sentence_transformers(encoder, tmp)
                if report["max_abs_diff"] > 1e-5:
                    raise LayerwiseError(f"sentence-transformers output differs from layerwise by "
                                         f"{report['max_abs_diff']:.2e} (> 1e-5)")
        else:
            report.update(export_onnx(encoder, tmp, opset=opset, optimize=optimize, quantize=quantize,
                                      per_channel=per_channel))
        inputs = read_card_inputs(resolve_model_path(model)) or read_card_inputs(model) or {}
        commands = "\n".join(c for c in (inputs.get("command", ""), command) if c)
        write_model_card(tmp, base_model=base_model or inputs.get("base_model") or _base_model_guess(model),
                         pooler=encoder.pooler.name, mode=encoder.mode, datasets=inputs.get("datasets", ()),
                         metrics=inputs.get("metrics", {}) if encoder.mode == inputs.get("mode") else {},
                         command=commands, model_name=out.resolve().name)
    return report


def _base_model_guess(model: str) -> str | None:
    """A Hub id for the base model when it is known from the name (the default model)."""
    if model.lower() in _SHORT_NAMES:
        return "sentence-transformers/all-MiniLM-L6-v2"
    return None


__all__ = ["export", "FORMATS", "export_sentence_transformers", "export_onnx", "st_modules", "native_plan",
           "load_sentence_transformer"]

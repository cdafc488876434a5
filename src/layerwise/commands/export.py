"""`layerwise export`: a saved model (RUN/best) as a sentence-transformers folder or as one ONNX graph."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "export", help="export a saved model to sentence-transformers or ONNX",
        description=__doc__.splitlines()[0] + " Writes a model card (README.md) too; the folder is ready for "
        "push_to_hub / `hf upload`.")
    parser.add_argument("model", help="saved model directory (RUN/best), a sentence-transformers folder, "
                                      "or all-MiniLM-L6-v2")
    parser.add_argument("output", type=Path, help="output directory (must be empty unless --overwrite)")
    parser.add_argument("--format", default="sentence-transformers",
                        help="sentence-transformers (default) or onnx")
    parser.add_argument("--mode", help="inference mode to export: full, static, cls_last, avg_last "
                                       "(default: the model's own)")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")
    parser.add_argument("--st-modules", default="native", choices=("native", "layerwise"),
                        help="sentence-transformers: use its own modules where they are exact (native, default), "
                             "or always layerwise.st.LayerAttentionPooling")
    parser.add_argument("--no-verify", action="store_true",
                        help="sentence-transformers: skip the check that it reproduces layerwise's embeddings")
    parser.add_argument("--optimize", action="store_true",
                        help="onnx: also write model_optimized.onnx (onnxruntime ORT_ENABLE_ALL)")
    parser.add_argument("--quantize", help="onnx: also write a dynamically quantised model (int8: model_int8.onnx)")
    parser.add_argument("--per-channel", action="store_true", help="onnx --quantize: per-channel weight scales")
    parser.add_argument("--opset", type=int, default=17, help="onnx opset (default 17)")
    parser.add_argument("--base-model", help="Hub id of the base model for the model card (default: from the "
                                             "model's own card)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from layerwise.export import export

    command = "layerwise " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["export"] else ""
    report = export(args.model, args.output, args.format, mode=args.mode, overwrite=args.overwrite,
                    native=args.st_modules == "native", verify=not args.no_verify, optimize=args.optimize,
                    quantize=args.quantize, per_channel=args.per_channel, opset=args.opset,
                    command=command, base_model=args.base_model)
    detail = ""
    if "max_abs_diff" in report:
        detail = f", max abs diff vs layerwise {report['max_abs_diff']:.1e}"
    if "max_abs_diff_int8" in report:
        detail += f", int8 max abs diff {report['max_abs_diff_int8']:.1e}"
    print(f"exported {args.model} ({report['pooler']}, mode {report['mode']}) as {args.format} "
          f"to {args.output}{detail}")
    return 0

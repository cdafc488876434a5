"""Model cards: README.md with YAML metadata the Hugging Face Hub understands (base_model, datasets, tags,
library_name, pipeline_tag, model-index with the metrics the model was evaluated on), plus the training command.

`write_model_card(directory, ...)` also stores its inputs in `layerwise_card.json` beside the card, so that
`layerwise export` can carry them to the exported model's card.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

CARD_INPUTS = "layerwise_card.json"

# Known evaluation names -> (task type, task name, dataset name, dataset id on the Hub, split)
_STS_TASK = ("semantic-similarity", "Semantic Similarity")
_DATASETS = {
    "stsb": ("STS Benchmark", "sentence-transformers/stsb"),
    "sts12": ("STS12", "mteb/sts12-sts"),
    "sts13": ("STS13", "mteb/sts13-sts"),
    "sts14": ("STS14", "mteb/sts14-sts"),
    "sts15": ("STS15", "mteb/sts15-sts"),
    "sts16": ("STS16", "mteb/sts16-sts"),
    "sickr": ("SICK-R", "mteb/sickr-sts"),
    "sick": ("SICK-R", "mteb/sickr-sts"),
}
_DATASET_IDS = {"simcse": "princeton-nlp/datasets-for-simcse", "snli": "stanfordnlp/snli",
                "nli": "sentence-transformers/all-nli", "wiki1m": "princeton-nlp/datasets-for-simcse",
                "glue": "nyu-mll/glue", "stsb": "sentence-transformers/stsb"}
_MODE_TEXT = {
    "full": "the whole pooler at inference, attention and head included where it has them",
    "static": ("the attention weights averaged over a corpus and frozen into a fixed mix of layers "
               "(no attention at inference)"),
    "cls_last": "the last layer's [CLS] vector only (the pooler is removed at inference)",
    "avg_last": "the mean of the last layer's token vectors only (the pooler is removed at inference)",
}


def flatten_metrics(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """{"stsb_test": {"spearman": 82.0, "n": 1379}} -> {"stsb_test_spearman": 82.0}; counts ("n") are dropped."""
    flat: dict[str, float] = {}
    for key, value in metrics.items():
        name = f"{prefix}_{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten_metrics(value, name))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and key != "n":
            flat[name] = float(value)
    return flat


def _parse_metric(name: str) -> tuple[tuple[str, str], str, str | None, str]:
    """'stsb_test_spearman' -> ((dataset name, id), split, metric type, pretty name)."""
    parts = re.split(r"[_/.\-]+", name.lower())
    dataset = next(((p, _DATASETS[p]) for p in parts if p in _DATASETS), None)
    split = next((p for p in parts if p in ("test", "dev", "validation", "train")), "test")
    split = "validation" if split == "dev" else split
    metric = next((p for p in parts if p in ("spearman", "pearson")), None)
    if dataset is None:
        return ("", ""), split, metric, name
    metric_type = f"{metric}_cosine" if metric else parts[-1]
    return dataset[1], split, metric_type, name


def model_index(name: str, metrics: Mapping[str, Any]) -> list[dict]:
    """The Hub's model-index: one result per (dataset, split), metric types as sentence-transformers writes them."""
    results: dict[tuple, dict] = {}
    for key, value in flatten_metrics(metrics).items():
        (ds_name, ds_id), split, metric_type, pretty = _parse_metric(key)
        if not ds_id:
            ds_name, ds_id, task = key, key, ("other", "Other")
            metric_type = key
        else:
            task = _STS_TASK
        entry = results.setdefault((ds_id, split, task), {
            "task": {"type": task[0], "name": task[1]},
            "dataset": {"name": f"{ds_name} ({split})" if ds_id != key else key, "type": ds_id, "split": split},
            "metrics": [],
        })
        entry["metrics"].append({"type": metric_type, "value": round(value, 4), "name": pretty})
    return [{"name": name, "results": list(results.values())}] if results else []


def _dataset_ids(datasets: Iterable[str]) -> list[str]:
    """Hub ids stay as they are; a local file or directory maps to the Hub id of the data set it holds."""
    out = []
    for d in datasets:
        text = str(d)
        path = Path(text)
        local = path.suffix != "" or text.startswith((".", "/", "~")) or path.exists() or text.count("/") != 1
        if local:
            name = path.name.lower()
            key = next((k for k in _DATASET_IDS if k in name), None)
            text = _DATASET_IDS[key] if key else path.name
        out.append(text)
    return list(dict.fromkeys(out))


def card_metadata(*, base_model: str | None, pooler: str, mode: str, datasets: Iterable[str] = (),
                  metrics: Mapping[str, Any] | None = None, library_name: str = "sentence-transformers",
                  model_name: str = "layerwise-model", tags: Iterable[str] = ()) -> dict:
    meta: dict[str, Any] = {}
    if base_model:
        meta["base_model"] = base_model
    ds = _dataset_ids(datasets)
    if ds:
        meta["datasets"] = ds
    meta["library_name"] = library_name
    meta["pipeline_tag"] = "sentence-similarity"
    base_tags = ["sentence-transformers"] if library_name == "sentence-transformers" else []
    meta["tags"] = list(dict.fromkeys([*base_tags, "sentence-similarity", "feature-extraction", "layerwise",
                                       f"pooler:{pooler}", f"mode:{mode}", *tags]))
    index = model_index(model_name, metrics or {})
    if index:
        meta["metrics"] = sorted({m["type"] for r in index[0]["results"] for m in r["metrics"]})
        meta["model-index"] = index
    return meta


def render_card(meta: dict, *, pooler: str, mode: str, metrics: Mapping[str, Any], command: str,
                usage: str, title: str) -> str:
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000)
    flat = flatten_metrics(metrics)
    table = "\n".join(f"| {k} | {v:.2f} |" for k, v in flat.items())
    lines = [
        "---", front.rstrip("\n"), "---", "", f"# {title}", "",
        f"A sentence encoder made with layerwise (layer-wise attention pooling after Oh et al., COLING 2022, "
        f"arXiv 2209.05972): base model `{meta.get('base_model', 'unknown')}`, pooler `{pooler}`, "
        f"inference mode `{mode}` "
        f"({_MODE_TEXT.get(mode, mode)}).", "",
    ]
    if flat:
        lines += ["## Evaluation", "", "Cosine similarity, correlations x 100.", "", "| metric | value |",
                  "|---|---|", table, ""]
    lines += ["## Usage", "", usage.strip(), ""]
    if command:
        lines += ["## How it was made", "", "```bash", command.strip(), "```", ""]
    if meta.get("datasets"):
        lines += ["Training data: " + ", ".join(f"`{d}`" for d in meta["datasets"]) + ".", ""]
    return "\n".join(lines)


def _usage(directory: Path) -> str:
    if (directory / "model.onnx").is_file():
        return ("```python\nimport layerwise\n\nmodel = layerwise.load(\"PATH\", backend=\"onnx\")\n"
                "embeddings = model.encode([\"A man plays a guitar.\"], normalize=True)\n```")
    if (directory / "modules.json").is_file():
        trust = ("layerwise.st" in (directory / "modules.json").read_text(encoding="utf-8"))
        extra = (", trust_remote_code=True)  # the pooler module is layerwise.st (pip install layerwise)"
                 if trust else ")")
        return ("```python\nfrom sentence_transformers import SentenceTransformer\n\n"
                f"model = SentenceTransformer(\"PATH\"{extra}\n"
                "embeddings = model.encode([\"A man plays a guitar.\"])\n```\n\n"
                "or with layerwise: `layerwise.load(\"PATH\")`.")
    return ("```python\nimport layerwise\n\nmodel = layerwise.load(\"PATH\")\n"
            "embeddings = model.encode([\"A man plays a guitar.\"], normalize=True)\n```\n\n"
            "The backbone alone is a plain transformers model (`AutoModel.from_pretrained(\"PATH\")`); the pooler "
            "lives in `layerwise_pooler.json` and `pooler.safetensors`.")


def write_model_card(directory: str | os.PathLike, *, base_model: str | None, pooler: str, mode: str,
                     datasets: Iterable[str] = (), metrics: Mapping[str, Any] | None = None, command: str = "",
                     library_name: str | None = None, model_name: str | None = None,
                     tags: Iterable[str] = ()) -> Path:
    """Write README.md (Hub model card with YAML metadata) into a saved model directory; return its path.

    metrics: flat or nested, e.g. {"stsb_test": {"spearman": 82.1, "pearson": 84.0}} or {"stsb_dev_spearman": 86.8};
    names with a known dataset (stsb, sts12-16, sickr) become model-index results. datasets: Hub ids or local file
    names (SNLI/NLI/wiki1m files map to their Hub ids). library_name defaults from the layout: sentence-transformers
    for a modules.json folder, onnx for a model.onnx folder, else transformers.
    """
    directory = Path(directory)
    metrics = dict(metrics or {})
    datasets = [str(d) for d in datasets]
    if library_name is None:
        library_name = ("sentence-transformers" if (directory / "modules.json").is_file()
                        else "onnx" if (directory / "model.onnx").is_file() else "transformers")
    name = model_name or directory.resolve().name
    if name in ("best", "last"):
        name = f"{directory.resolve().parent.name}-{name}"
    meta = card_metadata(base_model=base_model, pooler=pooler, mode=mode, datasets=datasets, metrics=metrics,
                         library_name=library_name, model_name=name, tags=tags)
    text = render_card(meta, pooler=pooler, mode=mode, metrics=metrics, command=command,
                       usage=_usage(directory), title=name)
    path = directory / "README.md"
    path.write_text(text, encoding="utf-8")
    inputs = {"base_model": base_model, "pooler": pooler, "mode": mode, "datasets": datasets, "metrics": metrics,
              "command": command}
    (directory / CARD_INPUTS).write_text(json.dumps(inputs, indent=2) + "\n", encoding="utf-8")
    return path


def read_card_inputs(directory: str | os.PathLike) -> dict | None:
    """The inputs of the card written by write_model_card in `directory`, or None."""
    path = Path(directory) / CARD_INPUTS
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None


def read_front_matter(path: str | os.PathLike) -> dict:
    """The YAML metadata of a README.md (empty dict when it has none)."""
    text = Path(path).read_text(encoding="utf-8")
    match = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    return yaml.safe_load(match.group(1)) or {} if match else {}


__all__ = ["write_model_card", "read_card_inputs", "read_front_matter", "flatten_metrics", "model_index"]

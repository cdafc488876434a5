"""Export: sentence-transformers folders, ONNX graphs, model cards, and the `layerwise export` command."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import layerwise
from layerwise.cli import main
from layerwise.errors import ConfigError, LayerwiseError
from layerwise.export import export, load_sentence_transformer
from layerwise.model_card import read_card_inputs, read_front_matter, write_model_card
from layerwise.registry import POOLERS

SENTENCES = ["a man plays the guitar in the park", "the dog", "two young people are eating food at a table",
             "yes", "a red car is not fast", "the cat sits on the house in the rain"]
CALIBRATION = ["a man plays guitar", "the dog runs in the park", "two people eat food", "a child is happy"] * 3
ST_PREFIX = "sentence_transformers."


@pytest.fixture(scope="module")
def saved(tiny_bert, tmp_path_factory):
    """Saved model directories (like RUN/best), one per pooler, built lazily; attention poolers calibrated."""
    root = tmp_path_factory.mktemp("runs")
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            encoder = layerwise.load(str(tiny_bert), pooling=name)
            if encoder.pooler.uses_attention:
                encoder.calibrate_static(CALIBRATION)
                for p in encoder.pooler.parameters():  # a non-trivial head (zero-initialised in layer_att_res)
                    p.data.add_(0.05 * np.random.default_rng(0).standard_normal(1).item())
            cache[name] = root / name
            encoder.save(cache[name])
        return cache[name]

    return get


def _st_types(out: Path) -> list[str]:
    return [m["type"] for m in json.loads((out / "modules.json").read_text(encoding="utf-8"))]


def _diff(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape
    return float(np.abs(a - b).max())


# ------------------------------------------------------------------------------------------ sentence-transformers
@pytest.mark.parametrize("pooler", POOLERS.names())
def test_st_full_mode_every_pooler(saved, tmp_path, pooler):
    src = saved(pooler)
    out = tmp_path / "st"
    report = export(str(src), out, "sentence-transformers", mode="full")
    ours = layerwise.load(str(src), mode="full").encode(SENTENCES, batch_size=4)
    theirs = load_sentence_transformer(out).encode(SENTENCES, batch_size=4)
    assert _diff(ours, theirs) < 1e-5
    uses_attention = layerwise.load(str(src)).pooler.uses_attention
    assert report["needs_layerwise"] == uses_attention  # everything else in sentence-transformers' own modules
    # the exported folder loads back into layerwise with the exact pooler
    assert _diff(layerwise.load(str(out)).encode(SENTENCES, batch_size=4), ours) < 1e-5


@pytest.mark.parametrize("pooler,mode", [("layer_att_cls", "static"), ("cls_all_att", "static"),
                                         ("layer_att_res", "cls_last"), ("layer_att", "avg_last")])
def test_st_pooler_free_modes_use_only_sentence_transformers(saved, tmp_path, pooler, mode):
    from sentence_transformers import SentenceTransformer

    src = saved(pooler)
    out = tmp_path / "st"
    export(str(src), out, "sentence-transformers", mode=mode)
    assert all(t.startswith(ST_PREFIX) for t in _st_types(out))
    if mode == "static":
        assert any(t.endswith("WeightedLayerPooling") for t in _st_types(out))
    model = SentenceTransformer(str(out), device="cpu")  # plain sentence-transformers, no trust_remote_code
    ours = layerwise.load(str(src), mode=mode).encode(SENTENCES, batch_size=4)
    assert _diff(ours, model.encode(SENTENCES, batch_size=4)) < 1e-5
    if mode == "static":  # the calibrated mix is not uniform, so this checks the layer indexing too
        assert _diff(ours, layerwise.load(str(src), mode="avg_last").encode(SENTENCES)) > 1e-4


def test_st_layerwise_module_round_trips_through_modules_json(saved, tmp_path):
    from sentence_transformers import SentenceTransformer

    src = saved("layer_att_cls")
    out = tmp_path / "st"
    export(str(src), out, "sentence-transformers", mode="full")
    assert "layerwise.st.LayerAttentionPooling" in _st_types(out)
    config = json.loads((out / "1_LayerAttentionPooling" / "config.json").read_text(encoding="utf-8"))
    assert config["pooler_name"] == "layer_att_cls" and config["mode"] == "full"
    assert (out / "1_LayerAttentionPooling" / "model.safetensors").is_file()
    first = SentenceTransformer(str(out), device="cpu", trust_remote_code=True)
    again = tmp_path / "again"
    first.save(str(again))  # sentence-transformers saves it the way it loaded it
    second = SentenceTransformer(str(again), device="cpu", trust_remote_code=True)
    emb = first.encode(SENTENCES, batch_size=4)
    assert _diff(emb, second.encode(SENTENCES, batch_size=4)) == 0.0
    assert _diff(emb, layerwise.load(str(src)).encode(SENTENCES, batch_size=4)) < 1e-5


def test_st_forced_layerwise_module_every_mode(saved, tmp_path):
    src = saved("avg_all_att")
    for mode in ("full", "static", "cls_last"):
        out = tmp_path / mode
        export(str(src), out, "sentence-transformers", mode=mode, native=False)
        assert _st_types(out)[-1] == "layerwise.st.LayerAttentionPooling"
        ours = layerwise.load(str(src), mode=mode).encode(SENTENCES, batch_size=4)
        assert _diff(ours, load_sentence_transformer(out).encode(SENTENCES, batch_size=4)) < 1e-5


def test_sentence_transformers_folder_with_subfolder_loads_as_backbone(tiny_roberta, tmp_path):
    """An (older-layout) sentence-transformers folder whose Transformer lives in 0_Transformer."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    model = SentenceTransformer(modules=[Transformer(str(tiny_roberta), max_seq_length=48), Pooling(32, "mean")],
                                device="cpu")
    root = tmp_path / "st_model"
    model.save(str(root))
    sub = root / "0_Transformer"
    sub.mkdir()
    for f in list(root.iterdir()):
        if f.is_file() and f.name not in ("modules.json", "config_sentence_transformers.json", "README.md"):
            shutil.move(str(f), sub / f.name)
    modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
    modules[0]["path"] = "0_Transformer"
    (root / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    reloaded = SentenceTransformer(str(root), device="cpu")
    encoder = layerwise.load(str(root), pooling="avg_last")
    assert encoder.max_length == 48
    assert _diff(encoder.encode(SENTENCES), reloaded.encode(SENTENCES)) < 1e-5
    # and it exports again
    out = tmp_path / "re_export"
    export(str(root), out, "sentence-transformers")
    assert _diff(load_sentence_transformer(out).encode(SENTENCES), encoder.encode(SENTENCES)) < 1e-5


# ---------------------------------------------------------------------------------------------------------- onnx
@pytest.mark.parametrize("pooler,mode", [("layer_att_cls", "full"), ("layer_att_res", "static"),
                                         ("cls_all_att", "static"), ("avg_last", "full"), ("cls_avg_last", "full"),
                                         ("weighted_layers", "full"), ("layer_att", "cls_last")])
def test_onnx_matches_pytorch(saved, tmp_path, pooler, mode):
    src = saved(pooler)
    out = tmp_path / "onnx"
    report = export(str(src), out, "onnx", mode=mode)
    assert report["max_abs_diff"] < 1e-4
    onnx_encoder = layerwise.load(str(out), backend="onnx")
    torch_encoder = layerwise.load(str(src), mode=mode)
    for batch_size in (1, 3, 64):  # dynamic batch and sequence axes
        for normalize in (False, True):
            got = onnx_encoder.encode(SENTENCES, batch_size=batch_size, normalize=normalize)
            want = torch_encoder.encode(SENTENCES, batch_size=batch_size, normalize=normalize)
            assert _diff(got, want) < 1e-4
    assert onnx_encoder.embedding_dim == torch_encoder.embedding_dim
    assert onnx_encoder.encode("a single sentence").shape == (1, torch_encoder.embedding_dim)


def test_onnx_longer_than_traced_and_roberta(tiny_roberta, tmp_path):
    src = tmp_path / "src"
    layerwise.load(str(tiny_roberta), pooling="avg_first_last").save(src)
    out = tmp_path / "onnx"
    export(str(src), out, "onnx")
    long = [" ".join(["the man plays the guitar"] * 8), "a"]  # longer than any traced sequence
    got = layerwise.load(str(out), backend="onnx").encode(long)
    assert _diff(got, layerwise.load(str(src)).encode(long)) < 1e-4


def test_onnx_optimize_and_int8(saved, tmp_path):
    src = saved("layer_att_res")
    out = tmp_path / "onnx"
    report = export(str(src), out, "onnx", optimize=True, quantize="int8")
    assert {"fp32", "optimized", "int8"} <= set(report["files"])
    want = layerwise.load(str(src)).encode(SENTENCES, normalize=True)
    optimized = layerwise.load(str(out), backend="onnx", variant="optimized").encode(SENTENCES, normalize=True)
    assert _diff(optimized, want) < 1e-4
    int8 = layerwise.load(str(out), backend="onnx", variant="int8").encode(SENTENCES, normalize=True)
    assert np.min(np.sum(int8 * want, axis=1)) > 0.98  # quantised: close, not equal


def test_onnx_backend_refuses_other_pooler_or_mode(saved, tmp_path):
    out = tmp_path / "onnx"
    export(str(saved("layer_att")), out, "onnx", mode="static")
    with pytest.raises(ConfigError, match="mode"):
        layerwise.load(str(out), backend="onnx", mode="full")
    with pytest.raises(ConfigError, match="pooler"):
        layerwise.load(str(out), backend="onnx", pooling="avg_last")
    with pytest.raises(LayerwiseError, match="int8"):
        layerwise.load(str(out), backend="onnx", variant="int8")
    with pytest.raises(ConfigError, match="backend"):
        layerwise.load(str(out), backend="tensorrt")


# ---------------------------------------------------------------------------------------------------- model card
def test_write_model_card_metadata(tmp_path):
    run = tmp_path / "run7" / "best"
    run.mkdir(parents=True)
    write_model_card(run, base_model="sentence-transformers/all-MiniLM-L6-v2", pooler="layer_att_res", mode="full",
                     datasets=["/data/nli_for_simcse.csv"],
                     metrics={"stsb_test": {"spearman": 82.9, "pearson": 84.1, "n": 1379}, "stsb_dev_spearman": 86.75},
                     command="layerwise train-embed --pooling layer_att_res")
    meta = read_front_matter(run / "README.md")
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert meta["datasets"] == ["princeton-nlp/datasets-for-simcse"]
    assert meta["library_name"] == "transformers"
    assert "layerwise" in meta["tags"] and "pooler:layer_att_res" in meta["tags"]
    results = meta["model-index"][0]["results"]
    test = next(r for r in results if r["dataset"]["split"] == "test")
    assert test["dataset"]["type"] == "sentence-transformers/stsb"
    assert {m["type"]: m["value"] for m in test["metrics"]} == {"spearman_cosine": 82.9, "pearson_cosine": 84.1}
    assert any(r["dataset"]["split"] == "validation" for r in results)
    text = (run / "README.md").read_text(encoding="utf-8")
    assert "layerwise train-embed --pooling layer_att_res" in text
    assert read_card_inputs(run)["metrics"]["stsb_dev_spearman"] == 86.75


def test_export_carries_model_card(saved, tmp_path):
    src = tmp_path / "best"
    shutil.copytree(saved("layer_att_cls"), src)
    write_model_card(src, base_model="bert-base-uncased", pooler="layer_att_cls", mode="full", datasets=["snli"],
                     metrics={"stsb_test_spearman": 80.0}, command="layerwise train-embed")
    for fmt, library in (("sentence-transformers", "sentence-transformers"), ("onnx", "onnx")):
        out = tmp_path / fmt
        export(str(src), out, fmt, command=f"layerwise export --format {fmt}")
        meta = read_front_matter(out / "README.md")
        assert meta["base_model"] == "bert-base-uncased" and meta["library_name"] == library
        assert meta["model-index"][0]["results"][0]["metrics"][0]["value"] == 80.0
        text = (out / "README.md").read_text(encoding="utf-8")
        assert "layerwise train-embed" in text and f"layerwise export --format {fmt}" in text
    static = tmp_path / "static"
    export(str(src), static, "sentence-transformers", mode="static")  # other mode: the metrics do not apply
    assert "model-index" not in read_front_matter(static / "README.md")


# ----------------------------------------------------------------------------------------------------------- CLI
def test_cli_export_both_formats(saved, tmp_path, capsys):
    src = saved("layer_att")
    assert main(["export", "--format", "sentence-transformers", str(src), str(tmp_path / "st")]) == 0
    assert main(["export", "--format", "onnx", "--mode", "static", str(src), str(tmp_path / "onnx")]) == 0
    assert "exported" in capsys.readouterr().out
    assert (tmp_path / "st" / "README.md").is_file() and (tmp_path / "onnx" / "model.onnx").is_file()


@pytest.mark.parametrize("case", ["missing", "format", "exists", "quantize_st", "quantize_kind", "overlap", "mode"])
def test_cli_bad_input_is_one_line_exit_2(saved, tmp_path, capsys, case):
    src = str(saved("avg_last"))
    out = tmp_path / "out"
    args = {
        "missing": ["export", str(tmp_path / "nope"), str(out)],
        "format": ["export", "--format", "tflite", src, str(out)],
        "exists": ["export", src, str(out)],
        "quantize_st": ["export", "--quantize", "int8", src, str(out)],
        "quantize_kind": ["export", "--format", "onnx", "--quantize", "int4", src, str(out)],
        "overlap": ["export", "--overwrite", src, src],
        "mode": ["export", "--mode", "static", src, str(out)],
    }[case]
    if case == "exists":
        out.mkdir()
        (out / "keep.txt").write_text("x")
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("layerwise export: error:") and "\n" not in err
    if case == "exists":
        assert (out / "keep.txt").read_text() == "x"  # nothing touched
        assert main(args[:1] + ["--overwrite"] + args[1:]) == 0
        assert not (out / "keep.txt").exists() and (out / "modules.json").is_file()
    if case == "overlap":
        assert (Path(src) / "config.json").is_file()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert not leftovers  # no staging directory left behind


# ---------------------------------------------------------------------------------------------------------- slow
@pytest.mark.slow
def test_default_model_exports(tmp_path):
    from sentence_transformers import SentenceTransformer

    encoder = layerwise.load("all-MiniLM-L6-v2")
    want = encoder.encode(SENTENCES, normalize=True)
    export("all-MiniLM-L6-v2", tmp_path / "st", "sentence-transformers")
    theirs = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(SENTENCES, normalize_embeddings=True)
    assert _diff(theirs, want) < 1e-5
    assert read_front_matter(tmp_path / "st" / "README.md")["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    export("all-MiniLM-L6-v2", tmp_path / "onnx", "onnx")
    got = layerwise.load(str(tmp_path / "onnx"), backend="onnx").encode(SENTENCES, normalize=True)
    assert _diff(got, want) < 1e-4

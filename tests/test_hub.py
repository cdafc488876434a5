"""`--dataset NAME` (Hugging Face Hub through `datasets`): names, conversion to the local readers' types, and the
clear error when the Hub cannot be reached. Nothing is downloaded: load_dataset is replaced by in-memory datasets,
except in one real call made with the Hub switched off (HF_HUB_OFFLINE=1)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

datasets = pytest.importorskip("datasets")

from layerwise.cli import main  # noqa: E402
from layerwise.data import hub  # noqa: E402
from layerwise.data.readers import Triplet  # noqa: E402
from layerwise.errors import ConfigError, DataError  # noqa: E402
from tiny import write_tiny_data  # noqa: E402

WORDS = "the man dog cat plays runs eats sits on in park street happy sad big small".split()


def sentence(i: int) -> str:
    return " ".join(WORDS[(i * k + 3) % len(WORDS)] for k in range(1, 4 + i % 5)) + "."


class FakeHub:
    """Stands in for datasets.load_dataset: {(path, config, split): Dataset}; records the calls."""

    def __init__(self, tables):
        self.tables, self.calls = tables, []

    def __call__(self, path, name=None, split=None, **kwargs):
        self.calls.append((path, name, split))
        if (path, name, split) not in self.tables:
            raise ValueError(f'Unknown split "{split}". Should be one of {sorted(s for *_, s in self.tables)}.')
        return self.tables[(path, name, split)]


def triplet_table(n: int = 12):
    return datasets.Dataset.from_dict({"anchor": [sentence(i) for i in range(n)],
                                       "positive": [sentence(i + 1) for i in range(n)],
                                       "negative": [sentence(i + 7) for i in range(n)]})


def glue_table(task: str, n: int):
    features = {"cola": ("sentence",), "sst2": ("sentence",), "mnli": ("premise", "hypothesis"),
                "stsb": ("sentence1", "sentence2")}[task]
    names = {"cola": ["unacceptable", "acceptable"], "sst2": ["negative", "positive"],
             "mnli": ["entailment", "neutral", "contradiction"]}.get(task)
    data = {c: [sentence(i + j) for i in range(n)] for j, c in enumerate(features)}
    data["label"] = [i * 0.5 % 5 for i in range(n)] if names is None else [i % len(names) for i in range(n)]
    data["idx"] = list(range(n))
    schema = datasets.Features({**{c: datasets.Value("string") for c in features},
                                "label": (datasets.Value("float32") if names is None
                                          else datasets.ClassLabel(names=names)),
                                "idx": datasets.Value("int32")})
    return datasets.Dataset.from_dict(data, features=schema)


def install(monkeypatch, tables) -> FakeHub:
    fake = FakeHub(tables)
    monkeypatch.setattr(datasets, "load_dataset", fake)
    return fake


# ------------------------------------------------------------------------------------------------------ names
@pytest.mark.parametrize("name, expected", [
    ("sentence-transformers/stsb", ("sentence-transformers/stsb", None)),
    ("sentence-transformers/all-nli triplet", ("sentence-transformers/all-nli", "triplet")),
    ("sentence-transformers/all-nli:triplet", ("sentence-transformers/all-nli", "triplet")),
    ("glue/cola", ("nyu-mll/glue", "cola")),
    ("glue/SST-2", ("nyu-mll/glue", "sst2")),
    ("nyu-mll/glue:mnli", ("nyu-mll/glue", "mnli")),
    ("glue:STS-B", ("nyu-mll/glue", "stsb")),
])
def test_parse_name(name, expected):
    assert hub.parse_name(name) == expected


# ------------------------------------------------------------------------------------------------- conversion
def test_triplets_from_the_hub(monkeypatch):
    fake = install(monkeypatch, {("sentence-transformers/all-nli", "triplet", "train"): triplet_table()})
    triplets = hub.read_triplets("sentence-transformers/all-nli triplet")
    assert fake.calls == [("sentence-transformers/all-nli", "triplet", "train")]
    assert len(triplets) == 12 and all(isinstance(t, Triplet) for t in triplets)
    assert triplets[0] == Triplet(sentence(0), sentence(1), sentence(7))
    assert len(hub.read_triplets("sentence-transformers/all-nli:triplet", limit=5)) == 5


def test_simcse_columns_and_missing_columns(monkeypatch):
    simcse = datasets.Dataset.from_dict({"sent0": ["a b"], "sent1": ["c d"], "hard_neg": ["e f"]})
    pairs = datasets.Dataset.from_dict({"sentence1": ["a"], "sentence2": ["b"], "score": [0.5]})
    install(monkeypatch, {("x/simcse", None, "train"): simcse, ("x/pairs", None, "train"): pairs})
    assert hub.read_triplets("x/simcse") == [Triplet("a b", "c d", "e f")]
    with pytest.raises(DataError, match="expected triplet columns anchor, positive, negative; found sentence1"):
        hub.read_triplets("x/pairs")
    assert hub.read_sentences("x/pairs") == ["a"]


def test_sentences_from_a_text_column(monkeypatch):
    table = datasets.Dataset.from_dict({"text": ["one line", "two lines", "one line", "three"], "id": [1, 2, 3, 4]})
    install(monkeypatch, {("wiki/simple", None, "train"): table})
    assert hub.read_sentences("wiki/simple") == ["one line", "two lines", "three"]
    empty = datasets.Dataset.from_dict({"text": ["fine", "  "]})
    install(monkeypatch, {("wiki/bad", None, "train"): empty})
    with pytest.raises(DataError, match="row 1: empty or non-text value in column 'text'"):
        hub.read_sentences("wiki/bad")


def test_glue_tasks_map_to_the_task_table(monkeypatch):
    install(monkeypatch, {
        ("nyu-mll/glue", "cola", "train"): glue_table("cola", 10),
        ("nyu-mll/glue", "cola", "validation"): glue_table("cola", 4),
        ("nyu-mll/glue", "mnli", "train"): glue_table("mnli", 9),
        ("nyu-mll/glue", "mnli", "validation_matched"): glue_table("mnli", 3),
        ("nyu-mll/glue", "mnli", "validation_mismatched"): glue_table("mnli", 6),
        ("nyu-mll/glue", "stsb", "train"): glue_table("stsb", 8),
        ("nyu-mll/glue", "stsb", "validation"): glue_table("stsb", 4),
    })
    task, train, evals = hub.read_glue("glue/cola", task="sst2")  # the dataset names the task
    assert task.name == "cola" and len(train) == 10 and list(evals) == ["dev"] and len(evals["dev"]) == 4
    assert train.texts[3] == (sentence(3),) and train.labels[:4] == [0, 1, 0, 1]
    task, train, evals = hub.read_glue("glue/mnli", task="cola", subset=5)
    assert task.name == "mnli" and list(evals) == ["dev_matched", "dev_mismatched"]
    assert len(train) == 5 and len(evals["dev_matched"]) == 3 and len(evals["dev_mismatched"]) == 5
    assert train.texts[0] == (sentence(train.lines[0] - 1), sentence(train.lines[0]))
    assert set(train.labels) <= {0, 1, 2}
    task, train, _ = hub.read_glue("glue/stsb", task="cola")
    assert task.is_regression and train.labels[:3] == [0.0, 0.5, 1.0]


def test_other_datasets_use_the_task_columns_and_labels_are_checked(monkeypatch):
    unlabelled = datasets.Dataset.from_dict({"sentence": ["a", "b"], "label": [-1, -1]})
    install(monkeypatch, {("stanfordnlp/sst2", None, "train"): glue_table("sst2", 6),
                          ("stanfordnlp/sst2", None, "validation"): unlabelled})
    with pytest.raises(DataError, match=r"split dev, row 0: bad label -1 \(an unlabelled split\?\)"):
        hub.read_glue("stanfordnlp/sst2", task="sst2")
    with pytest.raises(DataError, match="lacks column\\(s\\) premise, hypothesis of task mnli"):
        hub.read_glue("stanfordnlp/sst2", task="mnli")
    with pytest.raises(ConfigError, match="unknown GLUE task 'wnli'"):
        hub.read_glue("glue/wnli", task="cola")


# -------------------------------------------------------------------------------------------------- offline
def test_unreachable_hub_says_to_pass_local_files(monkeypatch):
    def offline(path, name=None, split=None, **kwargs):
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError) as err:
        hub.read_triplets("sentence-transformers/all-nli:triplet")
    message = str(err.value)
    assert "cannot reach the Hugging Face Hub" in message and "--train-file" in message
    assert "\n" not in message
    with pytest.raises(DataError, match="--data-dir DIR"):
        hub.read_glue("glue/cola", task="cola")


def test_missing_dataset_and_missing_package(monkeypatch):
    class DatasetNotFoundError(FileNotFoundError):
        pass

    def missing(path, name=None, split=None, **kwargs):
        raise DatasetNotFoundError(f"Dataset '{path}' doesn't exist on the Hub or cannot be accessed.")

    monkeypatch.setattr(datasets, "load_dataset", missing)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    with pytest.raises(DataError, match="dataset not found .*check the name"):
        hub.read_sentences("nobody/nothing")
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ConfigError, match="pip install datasets"):
        hub.read_sentences("nobody/nothing")


def test_real_offline_call_is_turned_into_the_clear_message(tmp_path):
    """The real datasets.load_dataset with the Hub switched off, through the CLI in a fresh process."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets")}
    done = subprocess.run([sys.executable, "-m", "layerwise.cli", "train-embed", "--dataset",
                           "sentence-transformers/all-nli:triplet", "--output-dir", str(tmp_path / "run")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("layerwise train-embed: error: --dataset sentence-transformers/all-nli:triplet: "
                           "cannot reach the Hugging Face Hub (offline mode is on")
    assert "pass local files instead: --train-file FILE" in last
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------------------- through the commands
def test_train_embed_with_a_hub_dataset(tiny_bert, tmp_path, monkeypatch, capsys):
    fake = install(monkeypatch, {("sentence-transformers/all-nli", "triplet", "train"): triplet_table(12)})
    data, out = write_tiny_data(tmp_path / "data"), tmp_path / "run"
    assert main(["train-embed", "--model", str(tiny_bert), "--data-dir", str(data), "--output-dir", str(out),
                 "--dataset", "sentence-transformers/all-nli:triplet", "--pooler", "avg_last", "--batch-size", "4",
                 "--max-steps", "2", "--eval-every", "2", "--max-length", "16", "--set", "train.progress=false"]) == 0
    assert fake.calls == [("sentence-transformers/all-nli", "triplet", "train")]
    assert "on 12 examples" in capsys.readouterr().out
    assert (out / "eval.json").is_file()


def test_finetune_with_a_glue_hub_dataset(tiny_bert, tmp_path, monkeypatch):
    install(monkeypatch, {("nyu-mll/glue", "sst2", "train"): glue_table("sst2", 16),
                          ("nyu-mll/glue", "sst2", "validation"): glue_table("sst2", 8)})
    out = tmp_path / "run"
    assert main(["finetune", "--progress", "false", "--model", str(tiny_bert), "--dataset", "glue/sst2",
                 "--data-dir", str(tmp_path / "nowhere"), "--output-dir", str(out), "--max-steps", "2",
                 "--batch-size", "8"]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["task"] == "sst2" and results["metric"] == "accuracy"
    assert results["train_examples"] == 16 and results["eval_examples"] == {"dev": 8}

"""Tiny random transformer models written to a directory, for fast tests (no download)."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    AutoModel,
    BertConfig,
    BertTokenizerFast,
    ElectraConfig,
    RobertaConfig,
)

WORDS = (
    "a the man woman child dog cat is are was plays playing runs running eats eating sits on in at with "
    "park street house car ball food guitar music happy sad big small red blue two three people young old "
    "not no yes and or but very good bad fast slow water grass tree sun rain"
).split()

CONFIGS = {"bert": BertConfig, "roberta": RobertaConfig, "electra": ElectraConfig}


def write_vocab(directory: Path) -> Path:
    """Write a WordPiece vocabulary with the special tokens and the test words."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    tokens += list("abcdefghijklmnopqrstuvwxyz.,!?'")
    path = directory / "vocab.txt"
    path.write_text("\n".join(dict.fromkeys(tokens)) + "\n", encoding="utf-8")
    return path


def make_tiny_model_dir(directory: Path, arch: str = "bert", seed: int = 0, **overrides) -> Path:
    """Save a tiny random model (hidden 32, 2 layers, 4 heads) and its tokenizer into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = BertTokenizerFast(vocab=str(write_vocab(directory)), do_lower_case=True)
    settings = dict(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, pad_token_id=0,
    )
    if arch == "electra":
        settings["embedding_size"] = 32
    settings.update(overrides)
    config = CONFIGS[arch](**settings)
    torch.manual_seed(seed)
    model = AutoModel.from_config(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def write_tiny_data(root: Path, premises: int = 12) -> Path:
    """A data dir in the real layouts: senteval/SNLI (dev and test) and stsbenchmark (dev and test)."""
    import random

    rng = random.Random(0)
    snli = root / "senteval" / "SNLI"
    snli.mkdir(parents=True, exist_ok=True)
    for split in ("dev", "test"):
        s1, s2, labels = [], [], []
        for i in range(premises):
            premise = " ".join(rng.sample(WORDS, 6)) + " ."
            for label in ("entailment", "neutral", "contradiction"):
                s1.append(premise)
                s2.append(" ".join(rng.sample(WORDS, 4)) + " .")
                labels.append(label)
        for name, lines in (("s1", s1), ("s2", s2), ("labels", labels)):
            (snli / f"{name}.{split}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    sts = root / "stsbenchmark"
    sts.mkdir(parents=True, exist_ok=True)
    for split in ("dev", "test"):
        rows = []
        for i in range(24):
            a, b = " ".join(rng.sample(WORDS, 5)), " ".join(rng.sample(WORDS, 5))
            rows.append(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{rng.uniform(0, 5):.3f}\t{a}\t{b}")
        (sts / f"sts-{split}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    wiki = root / "wiki1m_slice"
    wiki.mkdir(parents=True, exist_ok=True)
    (wiki / "wiki1m_for_simcse.txt").write_text(
        "\n".join(" ".join(rng.sample(WORDS, 7)) for _ in range(40)) + "\ncut off mid-", encoding="utf-8")
    return root

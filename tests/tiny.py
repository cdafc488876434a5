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
    tokenizer = BertTokenizerFast(vocab_file=str(write_vocab(directory)), do_lower_case=True)
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

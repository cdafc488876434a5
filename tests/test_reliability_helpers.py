"""Shared helpers of the reliability tests (issue 8): small data sets in the real formats and a CLI runner.

Nothing here is a test; the other tests/test_reliability_*.py files import it.
"""
from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from tiny import WORDS

REPO = Path(__file__).resolve().parents[1]


def sentence(rng: random.Random, n: int = 6) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def write_snli(root: Path, premises: int = 14, seed: int = 0) -> Path:
    """SentEval SNLI: senteval/SNLI/{s1,s2,labels}.{dev,test}, line-aligned; one triplet per premise and split."""
    rng = random.Random(seed)
    folder = root / "senteval" / "SNLI"
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("dev", "test"):
        s1, s2, labels = [], [], []
        for _ in range(premises):
            premise = sentence(rng)
            for label in ("entailment", "contradiction", "neutral"):
                s1.append(premise)
                s2.append(sentence(rng))
                labels.append(label)
        for name, lines in (("s1", s1), ("s2", s2), ("labels", labels)):
            (folder / f"{name}.{split}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def stsb_lines(n: int = 16, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [f"main-news\tfile\t2012\t{i:04d}\t{rng.uniform(0, 5):.2f}\t{sentence(rng)}\t{sentence(rng)}"
            for i in range(n)]


def write_stsb(root: Path, n: int = 16) -> Path:
    """STS-B release: stsbenchmark/sts-{train,dev,test}.csv, tab-separated, no header."""
    folder = root / "stsbenchmark"
    folder.mkdir(parents=True, exist_ok=True)
    for k, split in enumerate(("train", "dev", "test")):
        (folder / f"sts-{split}.csv").write_text("\n".join(stsb_lines(n, seed=k + 1)) + "\n", encoding="utf-8")
    return folder


def write_sst2(root: Path, n: int = 24, seed: int = 2) -> Path:
    """GLUE SST-2: glue/SST-2/{train,dev}.tsv with the header `sentence<TAB>label`."""
    rng = random.Random(seed)
    folder = root / "glue" / "SST-2"
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        rows = [f"{sentence(rng)}\t{rng.randint(0, 1)}" for _ in range(n)]
        (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return folder


def write_data(root: Path) -> Path:
    """A complete small data directory: SNLI, STS-B, SST-2 and a sentences file `sentences.txt`."""
    root.mkdir(parents=True, exist_ok=True)
    write_snli(root)
    write_stsb(root)
    write_sst2(root)
    rng = random.Random(3)
    (root / "sentences.txt").write_text("\n".join(sentence(rng) for _ in range(10)) + "\n", encoding="utf-8")
    return root


def edit_lines(path: Path, line: int, text: str | None) -> None:
    """Replace 1-based `line` of a text file (None: delete it)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    if text is None:
        del lines[line - 1]
    else:
        lines[line - 1] = text
    path.write_text("\n".join(lines), encoding="utf-8")


def as_bom_crlf(path: Path, blank_every: int = 0) -> None:
    """Rewrite a text file with a UTF-8 BOM, CRLF endings and (optionally) a blank line after every k-th line."""
    lines = [ln for ln in path.read_text(encoding="utf-8").split("\n") if ln]
    out: list[str] = []
    for i, line in enumerate(lines, 1):
        out.append(line)
        if blank_every and i % blank_every == 0:
            out.append("")
    path.write_bytes(b"\xef\xbb\xbf" + ("\r\n".join(out) + "\r\n\r\n").encode("utf-8"))


def copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """layerwise.cli.main in-process: (exit code, stdout, stderr). argparse errors exit via SystemExit."""
    from layerwise.cli import main

    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: bad choice or missing argument
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "error:" in line]


def python_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "layerwise.cli", *args]


TRAIN_FAST = ["--max-steps", "2", "--batch-size", "4", "--eval-every", "1", "--set", "train.progress=false",
              "--static-sentences", "8"]


def after_optimizer_step(step: int, action: Callable[[Any], None]) -> Callable[[Any], None]:
    """A replacement for Trainer._optimizer_step that calls `action(trainer)` right after optimizer step `step`."""
    from layerwise.training.loop import Trainer

    real_step = Trainer._optimizer_step

    def step_then_act(self) -> None:
        real_step(self)
        if self.state["global_step"] == step:
            action(self)

    return step_then_act

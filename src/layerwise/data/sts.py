"""Readers for STS data: the STS-B release files, the raw STS12-16 releases and SICK-R.

Every reader splits on tabs and never applies CSV quoting: the sentences contain `"`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from layerwise.data.readers import text_lines
from layerwise.errors import DataError

STSB_SPLITS = ("train", "dev", "test")


@dataclass
class StsPairs:
    """Sentence pairs with a gold similarity score each."""

    sentences1: list[str]
    sentences2: list[str]
    scores: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __len__(self) -> int:
        return len(self.sentences1)

    def head(self, n: int) -> "StsPairs":
        """The first n pairs."""
        return StsPairs(self.sentences1[:n], self.sentences2[:n], self.scores[:n])

    @classmethod
    def concat(cls, parts: list["StsPairs"]) -> "StsPairs":
        """Concatenate several pair sets in order."""
        s1 = [s for p in parts for s in p.sentences1]
        s2 = [s for p in parts for s in p.sentences2]
        scores = np.concatenate([p.scores for p in parts]) if parts else np.zeros(0)
        return cls(s1, s2, scores.astype(np.float64))


def parse_score(text: str, path: Path, line: int) -> float:
    """Parse a finite float score or raise DataError naming the file and line."""
    try:
        value = float(text.strip())
    except ValueError:
        raise DataError(path, f"expected a numeric score, got {text.strip()!r}", line=line) from None
    if not math.isfinite(value):
        raise DataError(path, f"expected a finite score, got {text.strip()!r}", line=line)
    return value


def raw_lines(path: Path) -> list[str]:
    """An STS file's lines without their endings (an empty file gives no lines; the caller reports it)."""
    return text_lines(path, allow_empty=True)


def read_stsb(path: Path) -> StsPairs:
    """Read an STS-B release file (genre, file, year, id, score, sentence1, sentence2[, source1, source2])."""
    path = Path(path)
    s1: list[str] = []
    s2: list[str] = []
    scores: list[float] = []
    for number, line in enumerate(raw_lines(path), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 7:
            raise DataError(path, f"expected at least 7 tab-separated fields "
                            f"(genre, file, year, id, score, sentence1, sentence2), got {len(fields)}", line=number)
        scores.append(parse_score(fields[4], path, number))
        s1.append(fields[5])
        s2.append(fields[6])
    if not scores:
        raise DataError(path, "no sentence pairs found")
    return StsPairs(s1, s2, np.asarray(scores, dtype=np.float64))


def find_stsb(data_dir: Path, split: str) -> Path:
    """Locate sts-{split}.csv under data_dir (stsbenchmark/, senteval's copy, or data_dir itself)."""
    if split not in STSB_SPLITS:
        raise DataError(data_dir, f"unknown STS-B split {split!r}; expected one of: {', '.join(STSB_SPLITS)}")
    data_dir = Path(data_dir)
    name = f"sts-{split}.csv"
    tried = [
        data_dir / "stsbenchmark" / name,
        data_dir / "senteval" / "STS" / "STSBenchmark" / name,
        data_dir / name,
    ]
    for candidate in tried:
        if candidate.is_file():
            return candidate
    raise DataError(data_dir, "STS-B file not found; tried: " + ", ".join(str(p) for p in tried))


# --- the raw STS12-16 releases and SICK-R -------------------------------------------------------------------------

STS_YEARS = {"sts12": "STS12-en-test", "sts13": "STS13-en-test", "sts14": "STS14-en-test",
             "sts15": "STS15-en-test", "sts16": "STS16-en-test"}


def read_sts_raw(input_path: Path, gold_path: Path) -> StsPairs:
    """Read one raw STS subset: STS.input.<subset>.txt (tab-separated, >= 2 columns) and STS.gs.<subset>.txt.

    The gold file has one score per input line; an empty gold line marks an unscored pair (STS15/16), skipped.
    """
    inputs, golds = raw_lines(input_path), raw_lines(gold_path)
    if len(inputs) != len(golds):
        raise DataError(gold_path, f"has {len(golds)} lines but its input file {input_path} has {len(inputs)}; "
                        "expected one gold line (possibly empty) per sentence pair",
                        line=min(len(inputs), len(golds)) + 1)
    s1: list[str] = []
    s2: list[str] = []
    scores: list[float] = []
    for number, (text, gold) in enumerate(zip(inputs, golds), start=1):
        if not gold.strip():
            continue
        fields = text.split("\t")
        if len(fields) < 2:
            raise DataError(input_path, "expected at least 2 tab-separated sentences", line=number)
        scores.append(parse_score(gold, gold_path, number))
        s1.append(fields[0])
        s2.append(fields[1])
    if not scores:
        raise DataError(gold_path, "no scored sentence pairs found")
    return StsPairs(s1, s2, np.asarray(scores, dtype=np.float64))


def sts_subsets(folder: Path) -> dict[str, tuple[Path, Path]]:
    """Discover the subsets of a raw STS release folder: {subset: (input file, gold file)}, sorted by name.

    Handles both file prefixes, `STS.` and STS16's `STS2016.`.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(folder, "STS folder not found")
    found: dict[str, tuple[Path, Path]] = {}
    for gold in sorted(folder.glob("STS*.gs.*.txt")):
        prefix, subset = gold.name.split(".gs.", 1)
        subset = subset[: -len(".txt")]
        if subset in ("ALL", "all") or "readme" in subset.lower():
            continue
        found[subset] = (folder / f"{prefix}.input.{subset}.txt", gold)
    if not found:
        raise DataError(folder, "no gold files (STS*.gs.<subset>.txt) found")
    for subset, (inp, _) in found.items():
        if not inp.is_file():
            raise DataError(inp, f"input file for subset {subset!r} not found")
    return found


def read_sts_year(folder: Path) -> dict[str, StsPairs]:
    """Read every subset of a raw STS12-16 folder."""
    return {name: read_sts_raw(inp, gold) for name, (inp, gold) in sts_subsets(folder).items()}


def read_sick(path: Path) -> StsPairs:
    """Read SICK (header; pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment; CRLF)."""
    path = Path(path)
    lines = raw_lines(path)
    if not lines:
        raise DataError(path, "empty file")
    header = lines[0].split("\t")
    need = ("sentence_A", "sentence_B", "relatedness_score")
    missing = [name for name in need if name not in header]
    if missing:
        raise DataError(path, f"header lacks column(s) {', '.join(missing)}", line=1)
    col = {name: header.index(name) for name in need}
    s1: list[str] = []
    s2: list[str] = []
    scores: list[float] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) <= max(col.values()):
            raise DataError(path, f"expected {len(header)} tab-separated fields, got {len(fields)}", line=number)
        s1.append(fields[col["sentence_A"]])
        s2.append(fields[col["sentence_B"]])
        scores.append(parse_score(fields[col["relatedness_score"]], path, number))
    if not scores:
        raise DataError(path, "no sentence pairs found")
    return StsPairs(s1, s2, np.asarray(scores, dtype=np.float64))


def find_sick(data_dir: Path) -> Path:
    """Locate SICK_test_annotated.txt under data_dir/SICK/ (or data_dir itself)."""
    tried = [Path(data_dir) / "SICK" / "SICK_test_annotated.txt", Path(data_dir) / "SICK_test_annotated.txt"]
    for candidate in tried:
        if candidate.is_file():
            return candidate
    raise DataError(data_dir, "SICK test file not found; tried: " + ", ".join(str(p) for p in tried))


def find_sts_year(data_dir: Path, task: str) -> Path:
    """Locate the raw release folder of task (sts12..sts16) under data_dir."""
    folder = Path(data_dir) / STS_YEARS[task]
    if not folder.is_dir():
        raise DataError(data_dir, f"{task} folder not found; expected {folder}")
    return folder

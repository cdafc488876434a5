"""Readers for training data: one function per format, each returning typed examples.

Every reader raises DataError naming the file and line for bad input; none applies CSV quoting to
tab-separated files (their text contains `"`).
"""
from __future__ import annotations

import csv
import json
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from layerwise.errors import DataError


@dataclass(frozen=True)
class Triplet:
    """A supervised contrastive example: anchor, positive (entailment) and hard negative (contradiction)."""

    anchor: str
    positive: str
    negative: str


def read_text(path: str | Path, allow_empty: bool = False) -> str:
    """Whole file as text (UTF-8, BOM removed); DataError for a missing or non-UTF-8 file, and for an empty one
    unless `allow_empty`."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "file not found")
    text = decode_utf8(path, path.read_bytes())
    if not allow_empty and not text.strip():
        raise DataError(path, "file is empty")
    return text


def decode_utf8(path: Path, raw: bytes) -> str:
    """UTF-8 text with the BOM removed; DataError naming the line of the first bad byte."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(path, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x})", line=line) from None


def text_lines(path: str | Path, allow_empty: bool = False) -> list[str]:
    """Lines without their endings (LF or CRLF); a final newline adds no empty line. Errors as `read_text`."""
    lines = read_text(path, allow_empty).split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, line) pairs without line endings (LF or CRLF)."""
    yield from enumerate(text_lines(path), start=1)


def read_lines(path: str | Path, drop_unterminated_last: bool = False) -> list[str]:
    """One sentence per line; blank lines skipped. A last line with no final newline can be dropped as cut off
    (SimCSE's wiki1m slice here was cut mid-line)."""
    text = read_text(path)
    lines = text.split("\n")
    if drop_unterminated_last and not text.endswith("\n"):
        warnings.warn(f"{path}: last line has no final newline and is dropped as truncated", stacklevel=2)
        lines = lines[:-1]
    sentences = [line.rstrip("\r").strip() for line in lines]
    sentences = [s for s in sentences if s]
    if not sentences:
        raise DataError(path, "no sentences")
    return sentences


def read_snli_triplets(snli_dir: str | Path, splits: Sequence[str] = ("dev", "test")) -> list[Triplet]:
    """SentEval SNLI (s1.<split>, s2.<split>, labels.<split>, line-aligned) grouped by premise into triplets.

    Each premise's k-th entailment is paired with its k-th contradiction (cycling through the contradictions);
    premises lacking either label are skipped.
    """
    triplets: list[Triplet] = []
    for split in splits:
        premises, hypotheses, labels = (_nonblank(Path(snli_dir) / f"{name}.{split}")
                                        for name in ("s1", "s2", "labels"))
        if not len(premises) == len(hypotheses) == len(labels):
            raise DataError(Path(snli_dir) / f"labels.{split}",
                            f"line counts differ: s1 {len(premises)}, s2 {len(hypotheses)}, labels {len(labels)}")
        groups: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for (line, premise), (_, hypothesis), (_, label) in zip(premises, hypotheses, labels):
            if label not in ("entailment", "neutral", "contradiction"):
                raise DataError(Path(snli_dir) / f"labels.{split}",
                                f"expected entailment, neutral or contradiction, got {label!r}", line=line)
            groups[premise][label].append(hypothesis)
        for premise, by_label in groups.items():
            contradictions = by_label["contradiction"]
            for k, positive in enumerate(by_label["entailment"] if contradictions else []):
                triplets.append(Triplet(premise, positive, contradictions[k % len(contradictions)]))
    return triplets


def _nonblank(path: Path) -> list[tuple[int, str]]:
    lines = [(n, line.strip()) for n, line in iter_lines(path)]
    while lines and not lines[-1][1]:
        lines.pop()  # trailing newline(s)
    for number, line in lines:
        if not line:
            raise DataError(path, "empty line (files must stay line-aligned)", line=number)
    return lines


def read_table(path: str | Path, columns: Sequence[str]) -> list[tuple[str, ...]]:
    """Rows of named columns from CSV (.csv, quoted), TSV (.tsv, tab-split, no quoting) or JSON lines (.jsonl)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        rows = _jsonl_rows(path, columns)
    elif suffix in (".csv", ".tsv", ".txt"):
        rows = _delimited_rows(path, columns, "," if suffix == ".csv" else "\t")
    else:
        raise DataError(path, f"unknown format '{suffix}': expected .csv, .tsv or .jsonl")
    if not rows:
        raise DataError(path, "no rows after the header")
    return rows


def _delimited_rows(path: Path, columns: Sequence[str], delimiter: str) -> list[tuple[str, ...]]:
    lines = list(iter_lines(path))
    reader = (csv.reader([line for _, line in lines], delimiter=delimiter) if delimiter == ","
              else ([part for part in line.split("\t")] for _, line in lines))
    header: list[str] | None = None
    rows: list[tuple[str, ...]] = []
    for (number, line), fields in zip(lines, reader):
        if not line.strip():
            continue
        if header is None:
            header = [f.strip() for f in fields]
            missing = [c for c in columns if c not in header]
            if missing:
                raise DataError(path, f"header lacks column(s) {', '.join(missing)}; found {', '.join(header)}",
                                line=number)
            index = [header.index(c) for c in columns]
            continue
        if len(fields) != len(header):
            raise DataError(path, f"expected {len(header)} fields, found {len(fields)}", line=number)
        rows.append(_checked(path, number, columns, [fields[i] for i in index]))
    return rows


def jsonl_objects(path: Path, numbered_lines: Iterable[tuple[int, str]],
                  keys: Sequence[str]) -> list[tuple[int, dict]]:
    """(line number, object) for every non-blank JSON line; each must be an object holding `keys`."""
    objects = []
    for number, line in numbered_lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(path, f"not valid JSON ({exc.msg})", line=number) from None
        if not isinstance(record, dict) or any(k not in record for k in keys):
            raise DataError(path, f"expected an object with keys {', '.join(keys)}", line=number)
        objects.append((number, record))
    return objects


def _jsonl_rows(path: Path, columns: Sequence[str]) -> list[tuple[str, ...]]:
    return [_checked(path, number, columns, [record[c] for c in columns])
            for number, record in jsonl_objects(path, iter_lines(path), columns)]


def _checked(path: Path, line: int, columns: Sequence[str], values: list) -> tuple[str, ...]:
    for column, value in zip(columns, values):
        if not isinstance(value, str) or not value.strip():
            raise DataError(path, f"empty or non-text value in column '{column}'", line=line)
    return tuple(v.strip() for v in values)


def read_nli_csv(path: str | Path) -> list[Triplet]:
    """SimCSE's nli_for_simcse.csv: header sent0,sent1,hard_neg (quoted CSV)."""
    return [Triplet(*row) for row in read_table(path, ("sent0", "sent1", "hard_neg"))]


def read_triplet_table(path: str | Path, columns: Sequence[str] = ("anchor", "positive", "negative")) -> list[Triplet]:
    """Triplets from a generic CSV/TSV/JSONL with named columns."""
    return [Triplet(*row) for row in read_table(path, columns)]

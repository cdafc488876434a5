"""GLUE tasks: a declarative task table and one reader for every tab-separated layout in it.

A task is one `GlueTask` entry registered in TASKS: where its files may be (several layouts: the GLUE TSV release,
SentEval's SST files, the STS-B release), which columns hold the texts and the label, the label set (None:
regression) and the metrics. Files are split on tabs only, never with CSV quoting (texts contain `"`); a UTF-8 BOM
and CRLF endings are accepted; blank lines are skipped.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from layerwise.errors import DataError
from layerwise.registry import TASKS

Column = str | int  # a header name, or a 0-based column index for files without a header


@dataclass(frozen=True)
class Layout:
    """One way a task's files can be laid out under the data directory."""

    folders: tuple[str, ...]  # tried in order, relative to the data directory ("." : the directory itself)
    files: dict[str, str]  # split -> file name
    text: tuple[Column, ...]
    label: Column
    header: bool = True
    columns: tuple[int, int] = (0, 0)  # (min, max) fields per row without a header; with one: its width

    def paths(self, data_dir: Path, split: str) -> list[Path]:
        name = self.files.get(split)
        return [data_dir / folder / name for folder in self.folders] if name else []


@dataclass(frozen=True)
class GlueTask:
    """One task: layouts, labels (None: regression), metrics (the first is `metric`, used to pick the best model)."""

    name: str
    layouts: tuple[Layout, ...]
    labels: tuple[str, ...] | None
    metrics: tuple[str, ...]
    eval_splits: tuple[str, ...] = ("dev",)
    split_suffixes: tuple[str, ...] = ("",)  # metric-name suffix per eval split (MNLI: "", "_mm")

    @property
    def metric(self) -> str:
        return self.metrics[0]

    @property
    def num_labels(self) -> int:
        return len(self.labels) if self.labels else 1

    @property
    def is_regression(self) -> bool:
        return self.labels is None


@dataclass
class Examples:
    """Texts (one or two per example) and labels (class index, or a float for regression) read from one file."""

    texts: list[tuple[str, ...]]
    labels: list[int | float]
    path: Path | None = None
    lines: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, n: int, seed: int = 0) -> "Examples":
        """A seeded random sample of n examples, kept in file order (all of them if n <= 0 or n >= len)."""
        if n <= 0 or n >= len(self):
            return self
        keep = sorted(random.Random(seed).sample(range(len(self)), n))
        return Examples([self.texts[i] for i in keep], [self.labels[i] for i in keep], self.path,
                        [self.lines[i] for i in keep] if self.lines else [])


def glue(folder: str, text: tuple[str, ...], label: str, files: dict[str, str] | None = None) -> Layout:
    """The GLUE release layout: <data>/glue/<folder>/{train,dev}.tsv with a header (or the folder itself)."""
    return Layout((f"glue/{folder}", folder, "."), files or {"train": "train.tsv", "dev": "dev.tsv"}, text, label)


def register(task: GlueTask) -> GlueTask:
    return TASKS.register(task.name)(task)


BINARY = ("0", "1")
ENTAIL = ("entailment", "not_entailment")
STSB_RELEASE = {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}
MNLI_FILES = {"train": "train.tsv", "dev_matched": "dev_matched.tsv", "dev_mismatched": "dev_mismatched.tsv"}

register(GlueTask("cola", (Layout(("glue/CoLA", "CoLA", "."), {"train": "train.tsv", "dev": "dev.tsv"}, (3,), 1,
                                  header=False, columns=(4, 4)),), BINARY, ("matthews",)))
register(GlueTask("sst2", (glue("SST-2", ("sentence",), "label"),
                           Layout(("senteval/SST/binary", "SST/binary", "."),
                                  {"train": "sentiment-train", "dev": "sentiment-dev", "test": "sentiment-test"},
                                  (0,), 1, header=False, columns=(2, 2))), BINARY, ("accuracy",)))
register(GlueTask("mrpc", (glue("MRPC", ("#1 String", "#2 String"), "Quality"),), BINARY, ("f1", "accuracy")))
register(GlueTask("rte", (glue("RTE", ("sentence1", "sentence2"), "label"),), ENTAIL, ("accuracy",)))
register(GlueTask("qnli", (glue("QNLI", ("question", "sentence"), "label"),), ENTAIL, ("accuracy",)))
register(GlueTask("stsb", (glue("STS-B", ("sentence1", "sentence2"), "score"),
                           Layout(("stsbenchmark", "senteval/STS/STSBenchmark", "."), STSB_RELEASE, (5, 6), 4,
                                  header=False, columns=(7, 9))), None, ("spearman", "pearson")))
register(GlueTask("mnli", (glue("MNLI", ("sentence1", "sentence2"), "gold_label", MNLI_FILES),),
                  ("entailment", "neutral", "contradiction"), ("accuracy",),
                  eval_splits=("dev_matched", "dev_mismatched"), split_suffixes=("", "_mm")))
register(GlueTask("qqp", (glue("QQP", ("question1", "question2"), "is_duplicate"),), BINARY, ("accuracy", "f1")))


def get_task(name: str) -> GlueTask:
    """The task registered as `name` (case-insensitive; SST-2 / STS-B spellings accepted)."""
    return TASKS.get(name.lower().replace("-", ""))


def find_file(task: GlueTask, data_dir: Path, split: str) -> tuple[Layout, Path]:
    """The first existing file of `split` over the task's layouts and folders, or a DataError naming them all."""
    tried: list[Path] = []
    for layout in task.layouts:
        for path in layout.paths(Path(data_dir), split):
            if path.is_file():
                return layout, path
            tried.append(path)
    if not tried:
        raise DataError(data_dir, f"task {task.name} has no '{split}' split")
    looked = ", ".join(str(p) for p in tried[:4]) + (" ..." if len(tried) > 4 else "")
    raise DataError(data_dir, f"no {task.name} {split} file found (looked for {looked})")


def read_split(task: GlueTask, data_dir: Path, split: str) -> Examples:
    """Read one split of a task from the data directory (the root of ../shared/data, or the task's folder)."""
    layout, path = find_file(task, Path(data_dir), split)
    return read_file(task, layout, path)


def _rows(path: Path) -> list[tuple[int, list[str]]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(path, f"not UTF-8 text ({exc.reason})") from None
    return [(n, line.rstrip("\r").split("\t")) for n, line in enumerate(text.split("\n"), 1) if line.strip()]


def read_file(task: GlueTask, layout: Layout, path: Path) -> Examples:
    """Read a tab-separated file laid out as `layout`; DataError with the line number on any bad row."""
    rows = _rows(path)
    if layout.header:
        if not rows:
            raise DataError(path, "empty file: expected a header line")
        (_, names), rows = rows[0], rows[1:]
        missing = [c for c in (*layout.text, layout.label) if c not in names]
        if missing:
            raise DataError(path, f"header lacks column(s) {', '.join(map(repr, missing))}", line=1)
        text_at, label_at, width = [names.index(c) for c in layout.text], names.index(layout.label), (len(names),) * 2
    else:
        text_at, label_at, width = list(layout.text), int(layout.label), layout.columns
    if not rows:
        raise DataError(path, "no examples")
    examples = Examples([], [], path, [])
    for line, fields in rows:
        if not width[0] <= len(fields) <= width[1]:
            expected = f"{width[0]}" if width[0] == width[1] else f"{width[0]} to {width[1]}"
            raise DataError(path, f"expected {expected} tab-separated fields, got {len(fields)}", line=line)
        examples.texts.append(tuple(fields[i] for i in text_at))
        examples.labels.append(parse_label(task, fields[label_at], path, line))
        examples.lines.append(line)
    return examples


def parse_label(task: GlueTask, text: str, path: Path, line: int) -> int | float:
    """A class index (position in task.labels), or a finite float for regression tasks."""
    text = text.strip()
    if task.labels is None:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise DataError(path, f"expected a numeric score, got {text!r}", line=line)
        return value
    if text not in task.labels:
        raise DataError(path, f"bad label {text!r}; expected one of {', '.join(task.labels)}", line=line)
    return task.labels.index(text)

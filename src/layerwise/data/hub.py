"""Training data from the Hugging Face Hub (`--dataset NAME`), converted to the types the local readers return.

NAME is a dataset id with an optional configuration after a colon or a space:

    sentence-transformers/all-nli:triplet     (or "sentence-transformers/all-nli triplet")
    sentence-transformers/stsb
    glue/cola                                 (GLUE: the task table's task, from nyu-mll/glue)

- train-embed: triplets from the columns anchor/positive/negative (train.columns; SimCSE's sent0/sent1/hard_neg
  are found too), or sentences from a text column (text, sentence, anchor, sentence1, premise: the first present)
  for the unsupervised objective -> list[Triplet] / list[str], like read_triplet_table / read_lines.
- finetune: `glue/<task>` (or any dataset with the GLUE column names of --task) -> the task's Examples, split
  dev = validation (MNLI: validation_matched / validation_mismatched), labels as the task table's class index.

Loading goes through `datasets.load_dataset`; without a connection (or with HF_HUB_OFFLINE=1) it fails with a
DataError that says to pass local files instead. Nothing here downloads at import time.
"""
from __future__ import annotations

import math
import os
from typing import Any, Sequence

from layerwise.data.glue import Examples, GlueTask, get_task
from layerwise.data.readers import Triplet
from layerwise.errors import ConfigError, DataError

GLUE_REPO = "nyu-mll/glue"
# The GLUE columns on the Hub per task (the label column is "label" everywhere: the class index in the order of
# the task table's labels, a float score for STS-B, -1 for the unlabelled test split).
GLUE_COLUMNS: dict[str, tuple[str, ...]] = {
    "cola": ("sentence",), "sst2": ("sentence",), "mrpc": ("sentence1", "sentence2"),
    "qqp": ("question1", "question2"), "stsb": ("sentence1", "sentence2"), "mnli": ("premise", "hypothesis"),
    "qnli": ("question", "sentence"), "rte": ("sentence1", "sentence2"),
}
SPLITS = {"train": "train", "dev": "validation", "dev_matched": "validation_matched",
          "dev_mismatched": "validation_mismatched", "test": "test"}
TRIPLET_COLUMNS = [("anchor", "positive", "negative"), ("sent0", "sent1", "hard_neg")]
TEXT_COLUMNS = ("text", "sentence", "anchor", "sentence1", "premise", "sent0")
LOCAL_HINT = {
    "train-embed": "pass local files instead: --train-file FILE (triplets), --unsup-file FILE (sentences) or "
                   "--data-dir DIR",
    "finetune": "pass local files instead: --data-dir DIR (holding the task's TSV files)",
}


def parse_name(name: str) -> tuple[str, str | None]:
    """(dataset id, configuration or None) of 'id', 'id:config' or 'id config'; glue/<task> -> nyu-mll/glue."""
    text = name.strip()
    path, _, config = text.replace(" ", ":", 1).partition(":") if (" " in text or ":" in text) else (text, "", "")
    path, config = path.strip(), config.strip() or None
    if not path:
        raise ConfigError(f"--dataset {name!r}: expected a dataset name such as sentence-transformers/all-nli:triplet")
    parts = path.split("/")
    if parts[0].lower() == "glue" and len(parts) == 2 and not config:
        return GLUE_REPO, parts[1].lower().replace("-", "")
    if path.lower() in ("glue", GLUE_REPO) and config:
        return GLUE_REPO, config.lower().replace("-", "")
    return path, config


def glue_task_name(name: str) -> str | None:
    """The GLUE task of a glue/<task> (or nyu-mll/glue:<task>) name, else None."""
    path, config = parse_name(name)
    if path.lower() in (GLUE_REPO, "glue") and config:
        return config
    return None


def load_split(name: str, split: str, command: str = "train-embed") -> Any:
    """`datasets.load_dataset(name, config, split=split)`, with one clear error for every way it fails."""
    try:
        import datasets
    except ImportError:
        raise ConfigError("--dataset needs the 'datasets' package, which is not installed: pip install datasets "
                          f"(or {LOCAL_HINT.get(command, 'pass local files')})") from None
    path, config = parse_name(name)
    try:
        return datasets.load_dataset(path, config, split=split)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - datasets raises many types; each becomes one clear line
        raise _load_error(name, split, exc, command) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _load_error(name: str, split: str, exc: Exception, command: str) -> DataError:
    hint = LOCAL_HINT.get(command, "pass local files instead")
    chain = [exc, exc.__cause__, exc.__context__]
    names = " ".join(type(e).__name__ for e in chain if e is not None) + " " + str(exc)
    unreachable = isinstance(exc, ConnectionError) or any(
        marker in names for marker in ("Offline", "LocalEntryNotFound", "Couldn't reach", "ConnectError",
                                       "Name or service not known", "Max retries", "timed out"))
    if unreachable or _offline():
        mode = " (offline mode is on: HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)" if _offline() else ""
        return DataError(f"--dataset {name}", f"cannot reach the Hugging Face Hub{mode} and the dataset is not in "
                         f"the local cache ({_first_line(exc)}); {hint}")
    if type(exc).__name__ == "DatasetNotFoundError" or isinstance(exc, FileNotFoundError):
        return DataError(f"--dataset {name}", f"dataset not found ({_first_line(exc)}); check the name, or {hint}")
    if isinstance(exc, ValueError) and "split" in str(exc).lower():
        return DataError(f"--dataset {name}", f"no split '{split}' ({_first_line(exc)})")
    return DataError(f"--dataset {name}", f"cannot load ({_first_line(exc)}); {hint}")


def _columns(dataset: Any) -> list[str]:
    return list(getattr(dataset, "column_names", None) or [])


def _limit(dataset: Any, limit: int) -> Any:
    return dataset.select(range(limit)) if limit and limit < len(dataset) else dataset


def _texts(name: str, dataset: Any, column: str) -> list[str]:
    values = dataset[column]
    for row, value in enumerate(values):
        if not isinstance(value, str) or not value.strip():
            raise DataError(f"--dataset {name}", f"row {row}: empty or non-text value in column '{column}'")
    return [v.strip() for v in values]


# ------------------------------------------------------------------------------------------------ train-embed
def to_triplets(name: str, dataset: Any, columns: Sequence[str] = ("anchor", "positive", "negative"),
                limit: int = 0) -> list[Triplet]:
    """Triplets from three text columns (the given ones, else SimCSE's sent0/sent1/hard_neg)."""
    present = _columns(dataset)
    candidates = [tuple(columns)] + [c for c in TRIPLET_COLUMNS if c != tuple(columns)]
    chosen = next((c for c in candidates if all(col in present for col in c)), None)
    if chosen is None or len(chosen) != 3:
        raise DataError(f"--dataset {name}", f"expected triplet columns {', '.join(columns)}; found "
                        f"{', '.join(present) or 'none'} (pick them with --set train_columns=[a,p,n], or use a "
                        "configuration with triplets, e.g. sentence-transformers/all-nli:triplet)")
    dataset = _limit(dataset, limit)
    if not len(dataset):
        raise DataError(f"--dataset {name}", "no rows")
    anchors, positives, negatives = (_texts(name, dataset, c) for c in chosen)
    return [Triplet(a, p, n) for a, p, n in zip(anchors, positives, negatives)]


def to_sentences(name: str, dataset: Any, limit: int = 0) -> list[str]:
    """Sentences from the first text column present (text, sentence, anchor, sentence1, premise, sent0)."""
    present = _columns(dataset)
    column = next((c for c in TEXT_COLUMNS if c in present), None)
    if column is None:
        raise DataError(f"--dataset {name}", f"no text column (looked for {', '.join(TEXT_COLUMNS)}; found "
                        f"{', '.join(present) or 'none'})")
    sentences = [s for s in dict.fromkeys(_texts(name, _limit(dataset, limit), column))]
    if not sentences:
        raise DataError(f"--dataset {name}", "no sentences")
    return sentences


def read_triplets(name: str, columns: Sequence[str] = ("anchor", "positive", "negative"),
                  limit: int = 0) -> list[Triplet]:
    """The train split of a Hub dataset as triplets (train-embed, supervised)."""
    return to_triplets(name, load_split(name, "train", "train-embed"), columns, limit)


def read_sentences(name: str, limit: int = 0) -> list[str]:
    """The train split of a Hub dataset as distinct sentences (train-embed, unsupervised)."""
    return to_sentences(name, load_split(name, "train", "train-embed"), limit)


# --------------------------------------------------------------------------------------------------- finetune
def dataset_task(name: str, task: str) -> GlueTask:
    """The task a finetune --dataset trains: glue/<t> gives t, any other dataset uses --task."""
    glue = glue_task_name(name)
    if glue is not None:
        if glue not in GLUE_COLUMNS:
            raise ConfigError(f"--dataset {name}: unknown GLUE task '{glue}'; expected one of "
                              f"{', '.join(f'glue/{t}' for t in GLUE_COLUMNS)}")
        return get_task(glue)
    return get_task(task)


def to_examples(name: str, task: GlueTask, dataset: Any, split: str = "train") -> Examples:
    """A Hub split with the GLUE columns of `task` -> Examples (texts, class index or score)."""
    columns = GLUE_COLUMNS.get(task.name)
    if columns is None:
        raise ConfigError(f"--dataset: task {task.name} has no Hub column mapping")
    present = _columns(dataset)
    missing = [c for c in (*columns, "label") if c not in present]
    if missing:
        raise DataError(f"--dataset {name}", f"split {split} lacks column(s) {', '.join(missing)} of task "
                        f"{task.name} (found {', '.join(present) or 'none'})")
    if not len(dataset):
        raise DataError(f"--dataset {name}", f"split {split} has no rows")
    texts = list(zip(*(_texts(name, dataset, c) for c in columns)))
    label_names = getattr(getattr(dataset, "features", {}).get("label"), "names", None)
    labels = [_label(name, task, value, row, split, label_names) for row, value in enumerate(dataset["label"])]
    return Examples(texts, labels, None, list(range(1, len(texts) + 1)))


def _label(name: str, task: GlueTask, value: Any, row: int, split: str, names: list[str] | None) -> int | float:
    where = f"--dataset {name}"
    if task.labels is None:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise DataError(where, f"split {split}, row {row}: expected a numeric score, got {value!r}")
        return float(value)
    if isinstance(value, str):
        if value in task.labels:
            return task.labels.index(value)
        if names and value in names:
            value = names.index(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < len(task.labels):
        unlabelled = " (an unlabelled split?)" if value == -1 else ""
        raise DataError(where, f"split {split}, row {row}: bad label {value!r}{unlabelled}; expected a class "
                        f"index 0..{len(task.labels) - 1} ({', '.join(task.labels)})")
    return value


def read_glue(name: str, task: str, subset: int = 0, seed: int = 0) -> tuple[GlueTask, Examples, dict[str, Examples]]:
    """(task, train examples, {eval split: examples}) of a finetune --dataset, each capped at `subset` (seeded)."""
    glue_task = dataset_task(name, task)
    splits = {}
    for split in ("train", *glue_task.eval_splits):
        dataset = load_split(name, SPLITS.get(split, split), "finetune")
        splits[split] = to_examples(name, glue_task, dataset, split).subset(subset, seed)
    train = splits.pop("train")
    return glue_task, train, splits

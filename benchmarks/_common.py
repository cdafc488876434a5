"""Shared helpers of the benchmark scripts: interleaved timing, matmul peak, memory sampling, data, report lines.

Every script measures all of its sides in ONE process and ONE run, interleaved (A, B, A, B, ...), and reports
medians and ratios; absolute numbers from separate runs on a shared machine are not comparable. Each script ends
with one line `RESULT_JSON: {...}` (machine-readable; the smoke test parses it).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

RESULT_PREFIX = "RESULT_JSON: "


# --------------------------------------------------------------------------------------------- environment
def parser(doc: str, repeats: int) -> argparse.ArgumentParser:
    """The options every benchmark shares: --model, --data-dir, --threads, --repeats (the script's default)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--model", default="all-MiniLM-L6-v2")
    p.add_argument("--data-dir", help="the shared data folder (default: $LAYERWISE_DATA, else ../shared/data)")
    p.add_argument("--threads", type=int, default=0, help="torch (and onnxruntime) threads; 0: torch's default")
    p.add_argument("--repeats", type=int, default=repeats, help="interleaved rounds; the median counts")
    return p


def set_threads(threads: int | None) -> int:
    """Use `threads` intra-op threads in torch (0/None: keep torch's default); returns the number in use."""
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def environment() -> dict[str, Any]:
    """Machine and library versions, for the report."""
    import torch
    import transformers

    info: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(),
                            "cpu": _cpu_name(), "cpus": os.cpu_count(), "torch": torch.__version__,
                            "transformers": transformers.__version__, "torch_threads": torch.get_num_threads()}
    for name in ("sentence_transformers", "onnxruntime", "layerwise"):
        try:
            info[name] = __import__(name).__version__
        except (ImportError, AttributeError):
            pass
    try:
        info["loadavg_1min"] = round(os.getloadavg()[0], 2)
    except OSError:
        pass
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def matmul_peak_gflops(size: int = 2048, repeats: int = 5) -> float:
    """fp32 GFLOP/s of the best of `repeats` (size x size) @ (size x size) matmuls, with the current threads."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)  # warm up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best / 1e9


# ------------------------------------------------------------------------------------------------- timing
def interleave(sides: dict[str, Callable[[], Any]], repeats: int, warmup: bool = True,
               log: Callable[[str], None] | None = None) -> dict[str, list[float]]:
    """Run every side once per round, rounds repeated (A, B, A, B, ...); seconds of each call per side.

    With warmup, one untimed call of each side comes first (lazy initialisation, allocator growth).
    """
    if warmup:
        for fn in sides.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(repeats):
        for name, fn in sides.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
            if log:
                log(f"  round {round_ + 1}/{repeats} {name}: {times[name][-1]:.2f} s")
    return times


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def spread(values: Sequence[float]) -> str:
    """min-max of the repeats, as text."""
    return f"{min(values):.2f}-{max(values):.2f}"


# ------------------------------------------------------------------------------------------------- memory
def _status_kb(field: str) -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def anon_rss_mb() -> float:
    """Anonymous resident memory (MiB): the process's own heap, not file pages such as a memory-mapped output.
    Falls back to the full RSS where /proc is missing."""
    kb = _status_kb("RssAnon")
    if kb:
        return kb / 1024
    import psutil

    return psutil.Process().memory_info().rss / 2 ** 20


class PeakMemory:
    """Sample anonymous RSS every `interval` s in a thread; `.peak_mb` is the peak above the level at entry.

    In one process the allocator keeps freed memory, so a later side may show less growth than a fresh process
    would; scale.py measures each size in its own process for that reason.
    """

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.base_mb = self.max_mb = 0.0

    def __enter__(self) -> "PeakMemory":
        self.base_mb = self.max_mb = anon_rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.max_mb = max(self.max_mb, anon_rss_mb())
            self._stop.wait(self.interval)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.max_mb = max(self.max_mb, anon_rss_mb())

    @property
    def peak_mb(self) -> float:
        return self.max_mb - self.base_mb


# --------------------------------------------------------------------------------------------------- data
def data_dir(arg: str | None) -> Path:
    """--data-dir, else $LAYERWISE_DATA, else ../shared/data beside the repository."""
    if arg:
        return Path(arg)
    if os.environ.get("LAYERWISE_DATA"):
        return Path(os.environ["LAYERWISE_DATA"])
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def stsb(data: Path, split: str = "test"):
    from layerwise.data.sts import find_stsb, read_stsb

    return read_stsb(find_stsb(data, split))


def unique_sentences(pairs) -> list[str]:
    return list(dict.fromkeys(list(pairs.sentences1) + list(pairs.sentences2)))


def corpus(sentences: Sequence[str], n: int, seed: int = 0) -> list[str]:
    """n sentences: `sentences` repeated and shuffled."""
    rng = np.random.default_rng(seed)
    reps = -(-n // max(len(sentences), 1))
    pool = np.array(list(sentences) * reps, dtype=object)[:n]
    return [str(s) for s in rng.permutation(pool)]


def spearman_from_embeddings(pairs, sentences: Sequence[str], embeddings: np.ndarray) -> float:
    """STS Spearman x 100 of cosine similarities, the embeddings given for `sentences` (any order)."""
    from scipy.stats import spearmanr

    index = {s: i for i, s in enumerate(sentences)}
    a = embeddings[[index[s] for s in pairs.sentences1]].astype(np.float64)
    b = embeddings[[index[s] for s in pairs.sentences2]].astype(np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)).clip(min=1e-12)
    return float(spearmanr(cos, pairs.scores).correlation * 100)


def resolve_model(name: str) -> str:
    """A local directory for the model (the default model's short name resolves to its shipped folder)."""
    from layerwise.modeling.backbone import resolve_model_path

    return resolve_model_path(name)


# ------------------------------------------------------------------------------------------------- output
def emit(result: dict[str, Any], out=None) -> None:
    """Print the machine-readable result line, with the environment and the command that produced it."""
    result.setdefault("env", environment())
    result.setdefault("command", command_line())
    print(RESULT_PREFIX + json.dumps(result, default=float), file=out or sys.stdout, flush=True)


def parse_result(text: str) -> dict[str, Any]:
    """The last RESULT_JSON line of a script's output."""
    lines = [line for line in text.splitlines() if line.startswith(RESULT_PREFIX)]
    if not lines:
        raise ValueError("no RESULT_JSON line in the output")
    return json.loads(lines[-1][len(RESULT_PREFIX):])


def table(rows: list[list[Any]], header: list[str]) -> str:
    """A markdown table."""
    def fmt(v: Any) -> str:
        return f"{v:.3g}" if isinstance(v, float) and abs(v) < 1e-2 and v != 0 else (
            f"{v:.2f}" if isinstance(v, float) else str(v))

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def command_line() -> str:
    return "python " + " ".join([Path(sys.argv[0]).as_posix() if sys.argv else ""] + sys.argv[1:])

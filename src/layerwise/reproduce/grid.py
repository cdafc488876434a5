"""What the pooling and attendout grids share: their options, output directory and shard, the whole plan for the
report (every shard's runs) and the settings recorded beside the tables."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from layerwise.errors import LayerwiseError
from layerwise.reproduce.plan import CHARS_PER_TOKEN, RunSpec, padded_characters


class Grid:
    """Base of a reproduction grid; a subclass plans its runs (`plan`) and trains, posts and reports them."""

    def __init__(self, opts: Any, sections: dict[str, dict[str, Any]] | None = None,
                 overrides: list[str] | None = None, log: Callable[[str], None] = print) -> None:
        self.opts, self.sections, self.overrides, self.log = opts, sections or {}, overrides or [], log
        self.out = Path(opts.output_dir)
        self.shard = opts.shard
        self._sizes: dict[tuple, tuple[int, float] | None] = {}

    def plan(self) -> list[RunSpec]:
        raise NotImplementedError

    # ---------------------------------------------------------------------------------- estimate
    def examples(self, cfg: Any) -> int | None:
        """Training examples of a run (None when its data cannot be read here)."""
        size = self._size(cfg)
        return size[0] if size else None

    def characters(self, cfg: Any) -> float | None:
        """Mean width in characters of a padded training batch (`padded_characters`, texts capped where the tokenizer
        truncates, CHARS_PER_TOKEN x max_length): a step's cost scales with it across tasks, which the time estimate
        uses."""
        size = self._size(cfg)
        return size[1] if size else None

    def _size(self, cfg: Any) -> tuple[int, float] | None:
        key = (*self.data_key(cfg), cfg.train.batch_size)
        if key not in self._sizes:
            try:
                count, texts = self.train_texts(cfg)
                cap = CHARS_PER_TOKEN * cfg.max_length
                self._sizes[key] = (count, padded_characters(texts, cap, cfg.train.batch_size))
            except LayerwiseError:
                self._sizes[key] = None
        return self._sizes[key]

    def data_key(self, cfg: Any) -> tuple:
        """What decides a run's training data and its truncation (runs with the same key share both)."""
        raise NotImplementedError

    def train_texts(self, cfg: Any) -> tuple[int, list[str]]:
        """(training examples, their texts as the model reads them: one per sequence)."""
        raise NotImplementedError

    def unsharded(self) -> list[RunSpec]:
        """Every run of the grid, whatever this process's --shard: the report covers them all."""
        shard_text, self.shard = self.shard, ""
        try:
            return self.plan()
        finally:
            self.shard = shard_text

    def settings(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**asdict(self.opts), "sections": self.sections, "overrides": self.overrides}

    def settings_lines(self) -> list[str]:
        """The report's note of what the config file and `--set` changed from the defaults (named variants are
        listed by the attendout report itself), so a table never hides, say, a per-task subset."""
        parts = [f"`{name}`: " + ", ".join(f"{key}={value}" for key, value in values.items())
                 for name, values in self.sections.items() if values and not name.startswith("variants.")]
        lines = [f"Config-file settings: {'; '.join(parts)}.", ""] if parts else []
        if self.overrides:
            lines += ["`--set`: " + ", ".join(self.overrides) + ".", ""]
        return lines

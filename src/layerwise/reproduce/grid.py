"""What the pooling and attendout grids share: their options, output directory and shard, the whole plan for the
report (every shard's runs) and the settings recorded beside the tables."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from layerwise.reproduce.plan import RunSpec


class Grid:
    """Base of a reproduction grid; a subclass plans its runs (`plan`) and trains, posts and reports them."""

    def __init__(self, opts: Any, sections: dict[str, dict[str, Any]] | None = None,
                 overrides: list[str] | None = None, log: Callable[[str], None] = print) -> None:
        self.opts, self.sections, self.overrides, self.log = opts, sections or {}, overrides or [], log
        self.out = Path(opts.output_dir)
        self.shard = opts.shard
        self._examples: dict[tuple, int | None] = {}

    def plan(self) -> list[RunSpec]:
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

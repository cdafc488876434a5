"""User-facing errors: one clear line, exit code 2, never a traceback."""
from __future__ import annotations

import difflib
from typing import Iterable

EXIT_USAGE = 2


class LayerwiseError(Exception):
    """An error caused by the user's input (file, option, name). The CLI prints it as one line and exits 2."""

    exit_code = EXIT_USAGE


class DataError(LayerwiseError):
    """A data file is missing, malformed or empty."""

    def __init__(self, path: object, message: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {message}")
        self.path, self.line = path, line


class ConfigError(LayerwiseError):
    """An option or config key is unknown or has a bad value."""


def closest_hint(name: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean X?)' for the nearest valid name, or ''."""
    match = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""


def unknown_name(kind: str, name: str, choices: Iterable[str]) -> ConfigError:
    """Build the error for an unknown registry name, listing the valid ones and the closest."""
    choices = sorted(choices)
    return ConfigError(f"unknown {kind} '{name}'{closest_hint(name, choices)}; expected one of: {', '.join(choices)}")

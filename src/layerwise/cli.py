"""The `layerwise` command line: each subcommand lives in layerwise.commands.<module>.

A module there exposes `add_parser(subparsers)`, which adds its parser and sets `func` (args -> exit code).
"""
from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from layerwise.errors import LayerwiseError
from layerwise.training.stopping import TrainingStopped

# One entry per command module; add a module here to add a subcommand.
COMMAND_MODULES = (
    "train_embed",
    "encode",
    "evaluate",
    "finetune",
    "plot",
    "export_pattern",
    "export",
    "reproduce",
    "search",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="layerwise", description=__doc__.splitlines()[0])
    from layerwise import __version__

    parser.add_argument("--version", action="version", version=f"layerwise {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"layerwise.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"layerwise.commands.{name}":
                continue  # not written yet
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    _one_line_warnings(args.command)
    try:
        return int(args.func(args) or 0)
    except TrainingStopped as exc:
        print(f"layerwise {args.command}: {exc}; rerun the same command with --resume to go on", file=sys.stderr)
        return exc.exit_code
    except LayerwiseError as exc:
        print(f"layerwise {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"layerwise {args.command}: interrupted", file=sys.stderr)
        return 130


def _one_line_warnings(command: str) -> None:
    """Show Python warnings as `layerwise CMD: warning: ...` lines (no file/line noise)."""

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"layerwise {command}: warning: {message}", file=file or sys.stderr)

    warnings.showwarning = show


if __name__ == "__main__":
    sys.exit(main())
